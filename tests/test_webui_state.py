"""The web UI's stats poll held through a stop's passing states (client/webui_state.py); the
page itself, in real Chromium, is tests/test_webui_restart.py."""

from __future__ import annotations

import time
from types import SimpleNamespace

import gevent

from locust_llm.client.webui_state import await_settled


def test_a_poll_during_stopping_answers_once_the_state_settles() -> None:
    runner = SimpleNamespace(state="stopping")
    gevent.get_hub().loop.update_now()  # libev's clock is stale in a process whose hub slept
    gevent.spawn_later(0.2, setattr, runner, "state", "stopped")
    began = time.monotonic()
    assert await_settled(runner, 5.0) == "stopped"  # it began "stopping": it waited for this
    assert time.monotonic() - began < 4.0


def test_a_state_that_does_not_settle_is_read_as_it_is_after_the_wait() -> None:
    runner = SimpleNamespace(state="cleanup")
    began = time.monotonic()
    assert await_settled(runner, 0.2) == "cleanup"
    assert time.monotonic() - began >= 0.2


def test_a_running_test_is_answered_at_once() -> None:
    began = time.monotonic()
    assert await_settled(SimpleNamespace(state="running"), 5.0) == "running"
    assert time.monotonic() - began < 1.0
