"""`locust-llm demo` and `locust-llm run` end to end, scaled down: sim, master, worker, report."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from locust_llm.launch.sweep import simulator

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
    # not a terminal: plain progress lines, one at each stage's end, from the master's live stats
    # (a stage shorter than a poll of the live stats, as c=1's 3 requests can be on a busy
    # host, still gets its line); QPS, tokens/s and TTFT P50 are the stage's own, from the
    # records the master receives, so even a stage of 3 requests has them; the count too
    done = re.findall(r"^  stage (\d)/3 c=\d+: (\d+)/(\d+) requests, (?:\d+ s, QPS "
                      r"[\d.]+, [\d,]+ tokens/s, TTFT P50 [\d,]+ ms|ended between two polls of "
                      r"the live stats) \(stage done\)$", out.stdout, re.M)  # fmt: skip
    assert [d[0] for d in done] == ["1", "2", "3"], out.stdout
    assert [d[1] for d in done] == [d[2] for d in done] == ["3", "8", "16"], out.stdout
    assert "\r" not in out.stdout
    # the field's summary table: one row per stage, then the verdict
    table = out.stdout[out.stdout.index("Per stage (times in ms):") :].splitlines()
    assert table[1].split()[:3] == ["stage", "concurrency", "QPS"]
    assert [row.split()[1] for row in table[3:6]] == ["1", "4", "8"]
    assert out.stdout.index("Per stage") < out.stdout.index("Verdict:")
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
    # it ends with the command line that reports on the run dir again
    assert out.stdout.splitlines()[-2:] == [
        f"Run dir: {run_dir}",
        f"Report it again: locust-llm report {run_dir}",
    ]


def _run_on_a_terminal(cmd: list[str], timeout_s: float) -> str:
    """Run ``cmd`` with its stdout on a pseudo-terminal; everything it wrote there."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=follower, stderr=subprocess.PIPE)
    os.close(follower)
    chunks, deadline = [], time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if select.select([leader], [], [], 1.0)[0]:
                try:
                    data = os.read(leader, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
        proc.wait(timeout=max(deadline - time.monotonic(), 1.0))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
        assert proc.stderr is not None
        proc.stderr.close()
    assert proc.returncode in (0, 3)
    return b"".join(chunks).decode()


def test_run_on_a_terminal_announces_then_redraws_one_line_per_stage(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with simulator(["--model", "mistral-7b", "--gpu", "rtx4090"], tmp_path / "sim.log") as url:
        text = _run_on_a_terminal(
            [*CLI, "run", "--host", url, "--concurrency", "1,2", "--stage-requests", "4,8",
             "--max-tokens", "48", "--ignore-eos", "--workers", "0", "--out", str(run_dir)],
            timeout_s=180,
        )  # fmt: skip
    text = text.replace("\r\n", "\n")  # the terminal's own line ends
    first = text.splitlines()[0]
    assert first == (
        f"locust-llm run: {url}; model: the first of /v1/models; sweep concurrency 1,2, 4,8 "
        f"requests per stage; 0 worker(s); run dir {run_dir}"
    )
    # each stage: one line redrawn in place (carriage returns), ended by a newline
    stage_lines = [ln for ln in text.split("\n") if ln.startswith("\r  stage ")]
    assert [ln.split("\r")[-1].split(":")[0].strip() for ln in stage_lines] == [
        "stage 1/2 c=1",
        "stage 2/2 c=2",
    ]
    assert all(ln.count("\r") >= 2 for ln in stage_lines)  # redrawn at least once
    assert "Per stage (times in ms):" in text and (run_dir / "report.html").is_file()


def test_run_needs_a_host() -> None:
    out = subprocess.run([*CLI, "run"], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2 and "--host" in out.stderr
