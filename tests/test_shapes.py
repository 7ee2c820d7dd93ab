"""Stage shapes end to end: exact request counts per stage, warm-up, open-loop rate and delay.

Locust runs in subprocesses (single process, and a master with two workers) against a small
streaming server in this process.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import locust_cmd, run_distributed, run_locust
from fake_openai import FakeConfig, fake_openai_server

from locust_llm.rundir.layout import read_run_info, stage_of

pytestmark = pytest.mark.slow

SWEEP = "locustfiles/sweep.py"


def _per_stage(run_dir: Path) -> tuple[list[int], pd.DataFrame]:
    info = read_run_info(run_dir)
    records = pd.read_parquet(run_dir / "requests.parquet")
    records["window"] = [stage_of(s, info.stages) for s in records.start_wall_s]
    counts = [int((records.window == s.index).sum()) for s in info.stages]
    return counts, records


def test_stage_requests_are_exact_in_one_process(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with fake_openai_server(FakeConfig(tokens=6, interval_s=0.005)) as url:
        out = run_locust([
            "-f", SWEEP, "--host", url, "--headless", "--only-summary", "--stop-timeout", "10s",
            "--llm-run-dir", str(run_dir), "--llm-concurrency", "1,3,6",
            "--llm-stage-requests", "4,9,25",
        ])  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    assert "locust-llm: TTFT" not in out.stdout  # the per-request lines are the debug path's
    # a headless run ends with the command line that reports on its run dir
    assert out.stdout.splitlines()[-1] == (
        f"locust-llm: run dir {run_dir}; its report: locust-llm report {run_dir}"
    )
    counts, records = _per_stage(run_dir)
    assert counts == [4, 9, 25]
    assert (records.window >= 0).all()  # no request outside a stage window
    assert (records.stage == records.window).all()  # the stage the user saw = the window


def test_stage_requests_are_exact_across_two_workers(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with fake_openai_server(FakeConfig(tokens=6, interval_s=0.005)) as url:
        code, output = run_distributed(
            SWEEP,
            ["--host", url, "--only-summary", "--stop-timeout", "10s", "--llm-run-dir",
             str(run_dir), "--llm-concurrency", "1,4,8", "--llm-stage-requests", "5,12,30"],
            workers=2, worker_cwd=tmp_path,
        )  # fmt: skip
    assert code == 0, output[-3000:]
    assert output.splitlines()[-1] == (  # the headless master's last line
        f"locust-llm: run dir {run_dir}; its report: locust-llm report {run_dir}"
    )
    counts, records = _per_stage(run_dir)
    assert counts == [5, 12, 30]
    assert records.worker_id.nunique() == 2 and records.request_id.is_unique
    assert (records.stage == records.window).all()


def test_warmup_is_excluded_from_the_report(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with fake_openai_server(FakeConfig(tokens=4, interval_s=0.01)) as url:
        out = run_locust([
            "-f", SWEEP, "--host", url, "--headless", "--only-summary", "--stop-timeout", "10s",
            "--llm-run-dir", str(run_dir), "--llm-concurrency", "2",
            "--llm-stage-duration", "3", "--llm-warmup", "1",
        ])  # fmt: skip
        assert out.returncode == 0, out.stdout[-3000:]
    report = subprocess.run(
        [str(Path(locust_cmd()[0]).parent / "locust-llm"), "report", str(run_dir), "--out",
         str(tmp_path / "rep")],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert report.returncode in (0, 3), report.stdout + report.stderr
    info = read_run_info(run_dir)
    records = pd.read_parquet(run_dir / "requests.parquet")
    stage = info.stages[0]
    assert stage.warmup_s == 1.0
    after = records[(records.start_wall_s >= stage.start_wall_s + 1.0)]
    summary = json.loads((tmp_path / "rep" / "summary.json").read_text())
    row = summary["stages"][0]
    assert 0 < row["completed"] + row.get("failed", 0) == len(after) < len(records)


def _open_loop(url: str, run_dir: Path, *extra: str) -> pd.DataFrame:
    out = run_locust([
        "-f", SWEEP, "--host", url, "--headless", "--only-summary", "--stop-timeout", "10s",
        "--llm-run-dir", str(run_dir), *extra,
    ])  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    return pd.read_parquet(run_dir / "requests.parquet")


def test_open_loop_rate_and_dispatch_delay(tmp_path: Path) -> None:
    with fake_openai_server(FakeConfig(tokens=5, interval_s=0.02)) as url:  # ~100 ms requests
        # near-regular arrivals (gamma shape 100): the achieved rate is the target's
        regular = _open_loop(url, tmp_path / "a", "--llm-rate", "25", "--llm-stage-duration",
                             "6", "--llm-burstiness", "100", "--llm-max-users", "16")  # fmt: skip
        # the same rate from two users that each need ~100 ms: they cannot keep up
        starved = _open_loop(url, tmp_path / "b", "--llm-rate", "25", "--llm-stage-duration",
                             "4", "--llm-max-users", "2")  # fmt: skip
    sched = np.sort(regular.scheduled_wall_s.to_numpy())
    rate = (len(sched) - 1) / (sched[-1] - sched[0])
    assert rate == pytest.approx(25, rel=0.05)
    delay = regular.start_wall_s - regular.scheduled_wall_s
    settled = delay[regular.scheduled_wall_s >= sched[0] + 1.0]  # users spawn in the first 0.3 s
    assert delay.median() < 0.01 and settled.quantile(0.99) < 0.05
    late = starved.start_wall_s - starved.scheduled_wall_s
    assert late.quantile(0.9) > 0.5  # requests wait for a free user: dispatch delay shows it
