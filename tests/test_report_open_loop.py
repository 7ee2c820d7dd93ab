"""Open loop end to end: `locust-llm run --rate` against the simulator, then the report's
open-loop accounting (achieved = completions inside the window, the tail apart, latency from
the scheduled time beside latency from the send)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from locust_llm.demo import simulator

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "locust_llm.cli"]


def test_run_rate_counts_completions_inside_the_window(tmp_path: Path) -> None:
    run_dir = tmp_path / "open"
    # 2 sequences of 64-token answers (~4 ms steps) serve about 8 req/s: 16 is past capacity
    sim = ["--model", "qwen2.5-0.5b", "--gpu", "a10", "--max-num-seqs", "2"]
    with simulator(sim, tmp_path / "sim.log") as url:
        out = subprocess.run(
            [*CLI, "run", "--host", url, "--rate", "2,16", "--stage-duration", "4",
             "--max-tokens", "64", "--input-len", "32", "--ignore-eos", "--workers", "0",
             "--out", str(run_dir), "--quiet"],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
    assert out.returncode in (0, 3), out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    low, high = summary["stages"]
    assert (low["rate"], high["rate"]) == (2.0, 16.0)
    for s in (low, high):
        assert s["completed_in_window"] + s["completed_after_window"] == s["completed"]
        assert s["qps"] == pytest.approx(s["completed_in_window"] / s["duration_s"])
        assert s["latency_sched_p99_s"] >= s["latency_p99_s"] - 1e-9  # never before the send
    assert high["achieved_ratio"] < 0.95  # overloaded: short of the offered rate ...
    assert high["completed_after_window"] > 0  # ... with a tail after the window
    report = (run_dir / "report.md").read_text()
    assert "Open loop: offered and achieved" in report
    assert "rate 16" not in summary["knee"]["cap"]  # never a cap at the short stage


def test_run_rate_needs_a_stage_duration(tmp_path: Path) -> None:
    out = subprocess.run(
        [*CLI, "run", "--host", "http://127.0.0.1:9", "--rate", "1,2", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 2
    assert "--rate: open-loop stages need --stage-duration" in out.stderr
