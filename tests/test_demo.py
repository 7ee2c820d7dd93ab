"""`locust-llm demo` and `locust-llm run` end to end, scaled down: sim, master, worker, report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from locust_llm.demo import simulator

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "locust_llm.cli"]


def _check_run(run_dir: Path, concurrencies: list[int]) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    stages = summary["stages"]
    assert [s["concurrency"] for s in stages] == concurrencies
    report = (run_dir / "report.md").read_text()
    # the seed's table first, then its reading and conclusion
    table_at = report.index("| concurrency | QPS | avg latency (ms) | P99 (ms) | GPU util |")
    assert table_at < report.index("**Reading:**") < report.index("**Conclusion:**")
    assert "cap concurrency at" in report
    assert (run_dir / "report.html").stat().st_size > 10_000
    assert summary["verdict"]["kind"] and summary["verdict"]["evidence"]
    return summary


def test_demo_scaled_down(tmp_path: Path) -> None:
    run_dir = tmp_path / "demo"
    out = subprocess.run(
        [*CLI, "demo", "--concurrency", "1,4,8", "--stage-requests", "3,8,16", "--max-tokens",
         "16", "--input-len", "64", "--workers", "1", "--out", str(run_dir)],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert out.returncode in (0, 3), out.stdout[-3000:] + out.stderr[-3000:]
    for line in ("stage 1/3: c=1", "stage 3/3: c=8", "Verdict:", "Report:"):
        assert line in out.stdout
    summary = _check_run(run_dir, [1, 4, 8])
    assert [s["completed"] for s in summary["stages"]] == [3, 8, 16]
    # the simulator's telemetry reached the table
    assert all(s["gpu_util"] is not None for s in summary["stages"])


def test_run_against_a_running_server(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with simulator(["--model", "qwen2.5-0.5b", "--gpu", "h100-sxm"], tmp_path / "sim.log") as url:
        out = subprocess.run(
            [*CLI, "run", "--host", url, "--concurrency", "1,2", "--stage-requests", "2,4",
             "--max-tokens", "8", "--workers", "0", "--out", str(run_dir), "--quiet"],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
    assert out.returncode in (0, 3), out.stdout[-3000:] + out.stderr[-3000:]
    _check_run(run_dir, [1, 2])


def test_run_needs_a_host() -> None:
    out = subprocess.run([*CLI, "run"], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2 and "--host" in out.stderr
