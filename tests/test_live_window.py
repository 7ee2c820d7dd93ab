"""The live charts' recent window (the last 10 s, as Locust's own charts) beside the cumulative
table: percentiles of what ended since a mark taken a window ago, checked against numpy's
percentiles of exactly those values; and the payload the tab reads."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from locust_llm.live.llmstats import RECENT_WINDOW_S, TOTAL, LiveStats
from locust_llm.metrics import RequestRecord
from locust_llm.webui import data as wd

RNG = np.random.default_rng(7)


def _add(stats: LiveStats, ttfts: np.ndarray) -> None:
    for t in ttfts:
        stats.add(
            RequestRecord(request_id="r", endpoint="/chat", ok=True, ttft_s=float(t), tpot_s=0.02,
                          e2e_s=float(t) + 0.2, input_tokens=10, output_tokens=11),
            [], [],
        )  # fmt: skip


def _total_row(stats: LiveStats) -> dict:
    return next(r for r in reversed(stats.history) if r["Name"] == TOTAL)


def test_the_window_holds_only_what_ended_within_it() -> None:
    assert RECENT_WINDOW_S == 10
    stats = LiveStats()
    fast, slow = RNG.uniform(0.05, 0.15, 400), RNG.uniform(0.9, 1.1, 200)
    _add(stats, fast)
    stats.snapshot_history(now=1000.0)  # a young run: the window is the whole run
    young = _total_row(stats)
    assert young["ttft_recent_p50_s"] == young["ttft_p50_s"]
    stats.snapshot_history(now=1005.0)
    _add(stats, slow)
    stats.snapshot_history(now=1011.0)  # the window: after the mark at 1000 (>= 10 s ago)
    row = _total_row(stats)
    for q in (50, 90, 99):
        assert row[f"ttft_recent_p{q}_s"] == pytest.approx(np.percentile(slow, q), rel=0.01)
    both = np.concatenate([fast, slow])
    assert row["ttft_p50_s"] == pytest.approx(np.percentile(both, 50), rel=0.01)  # cumulative
    assert row["ttft_recent_p50_s"] > 5 * row["ttft_p50_s"]  # the change shows at once
    stats.snapshot_history(now=1022.0)  # nothing ended in the last 10 s: no line, never 0
    assert math.isnan(_total_row(stats)["ttft_recent_p50_s"])
    assert len(stats._marks) <= 3  # marks are dropped once older than the window


def test_the_tab_payload_carries_both_and_the_window() -> None:
    stats = LiveStats()
    _add(stats, RNG.uniform(0.05, 0.15, 50))
    stats.snapshot_history(now=2000.0)
    runtime = SimpleNamespace(stats=stats, telemetry=None, stages=[], current_stage=-1,
                              run_dir=None, run_ended=False,
                              options=SimpleNamespace(scrape_interval_s=0.5))  # fmt: skip
    runner = SimpleNamespace(state="running", user_count=4)
    payload = wd.stats_payload(runtime, runner, now=2001.0)
    assert payload["recent_window_s"] == 10 and payload["scrape_interval_s"] == 0.5
    history = payload["history"]
    assert history["time_s"] == [2000.0]
    assert history["ttft_recent_p50_s"][0] == pytest.approx(history["ttft_p50_s"][0])
    stats.reset()
    assert not stats._marks
