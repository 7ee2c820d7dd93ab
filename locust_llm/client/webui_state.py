"""Locust's web UI through a stop: its page reads the state the stop ends in.

The page asks the master for its state (``/stats/requests``) every 2 s only while a test spawns
or runs (pinned: locust 2.47, the web UI's stats poll). A poll that read a passing state was its
last: ``stopping`` on a master while its workers answer the stop, ``cleanup`` on one process
while its users finish the requests in flight. On a busy host that window is wide enough for a
poll to land in it, and the page said STOPPING after the test had stopped, until reloaded.
:func:`install` holds such a poll until the state has settled (at most :data:`SETTLE_WAIT_S`;
past that, it reads what Locust says, as before), so the page reads ``stopped``.
"""

from __future__ import annotations

import time
from typing import Any

import gevent

STATS_ENDPOINT = "locust.request_stats"  # Flask endpoint of Locust's /stats/requests
PASSING_STATES = ("stopping", "cleanup")
#: The most a poll waits for a stop's passing state to settle (seconds).
SETTLE_WAIT_S = 10.0


def install(environment: Any) -> None:
    """Hold ``environment``'s web-UI stats polls while its runner passes a stop's states."""
    from flask import request

    @environment.web_ui.app.before_request
    def _await_settled_state() -> None:
        if request.endpoint == STATS_ENDPOINT:
            await_settled(environment.runner, SETTLE_WAIT_S)


def await_settled(runner: Any, wait_s: float) -> str:
    """Wait (cooperatively, at most ``wait_s``) while ``runner`` passes a stop; its state then."""
    deadline = time.monotonic() + wait_s
    while getattr(runner, "state", "") in PASSING_STATES and time.monotonic() < deadline:
        gevent.sleep(0.05)
    return str(getattr(runner, "state", ""))
