"""Locust's --stop-timeout under locust-llm: streams in flight at the stop finish by default.

Locust's own default (0) cancels every user at once, so a 3 s run of the README's plain Locust
command cancelled the streams it had started and warned about it. The simulator's trace is the
ground truth of what the server finished.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_locust

from locust_llm.options.table import READ_TIMEOUT_DEFAULT_S, STOP_TIMEOUT_DEFAULT_S
from locust_llm.sim.testing import running_sim

pytestmark = pytest.mark.slow

#: one request streams 64 tokens at 50 ms a step: 3.2 s, longer than the 2 s run
SLOW = {"output_len": "fixed:64", "step_overhead_s": 0.05, "zero_cost": True}


def _run(tmp_path: Path, *extra: str) -> tuple[pd.DataFrame, list[dict], str, float]:
    run_dir, trace = tmp_path / "run", tmp_path / "trace.jsonl"
    with running_sim(trace_path=str(trace), **SLOW) as url:
        began = time.monotonic()
        out = run_locust([
            "-f", "locustfiles/chat.py", "--host", url, "--headless", "-u", "3", "-r", "3",
            "-t", "2s", "--llm-run-dir", str(run_dir), *extra,
        ])  # fmt: skip
        wall_s = time.monotonic() - began
    assert out.returncode == 0, out.stdout[-3000:]
    sent = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    return pd.read_parquet(run_dir / "requests.parquet"), sent, out.stdout, wall_s


def test_the_default_lets_streams_in_flight_at_the_stop_finish(tmp_path: Path) -> None:
    assert STOP_TIMEOUT_DEFAULT_S == READ_TIMEOUT_DEFAULT_S
    records, sent, log, wall_s = _run(tmp_path)
    assert "--stop-timeout is 0" not in log
    # every request sent (one per user that started before the stop: a busy machine may start
    # fewer than 3) finished, none cancelled
    assert 1 <= len(records) <= 3 and records.ok.all(), records.error_kind.tolist()
    assert sorted(records.request_id) == sorted(r["client_request_id"] for r in sent)
    assert all(r["outcome"] == "ok" for r in sent), sent
    assert (records.output_tokens == 64).all()
    # the stop waited for the streams, not for the whole stop timeout
    assert wall_s < 2 + STOP_TIMEOUT_DEFAULT_S / 4


def test_stop_timeout_zero_still_cancels_and_says_so(tmp_path: Path) -> None:
    records, _sent, log, _wall_s = _run(tmp_path, "--stop-timeout", "0")
    assert "--stop-timeout is 0" in log
    assert 1 <= len(records) <= 3
    assert (records.error_kind == "cancelled").all(), records.error_kind.tolist()
