"""`locust-llm run` under signals and its own --timeout; run dirs are never silently reused.

* ``--timeout`` ends the run cleanly: the run dir is finished (records kept, report built) and
  no Locust process is left behind;
* SIGTERM to ``run`` is forwarded: the master drains and finalises, the report is built, and no
  child is left;
* a run dir holding a run is refused (exit 2, the old run untouched) unless ``--llm-overwrite``,
  which leaves no stale file of the earlier run or its report.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
from cluster_utils import LOCUST, LOCUST_LLM, ROOT, Cluster, wait_until

pytestmark = pytest.mark.slow

SIM_ARGS = ("--zero-cost", "--step-overhead-ms", "20", "--output-len", "fixed:20")


def _processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line holds ``text`` (this test's run dir)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline and int(entry.name) != os.getpid():
            pids.append(int(entry.name))
    return pids


def _run_cmd(sim_url: str, out: Path, *extra: str) -> list[str]:
    return [LOCUST_LLM, "run", "--host", sim_url, "--concurrency", "2", "--stage-duration",
            "60", "--max-tokens", "20", "--workers", "1", "--stop-timeout", "5", "--quiet",
            "--out", str(out), *extra]  # fmt: skip


def _check_finished(out: Path) -> pd.DataFrame:
    """The run dir is final (records in requests.parquet, report built), its state the truth:
    the 60 s stage was cut, so ``interrupted``."""
    info = json.loads((out / "run.json").read_text())
    assert info["state"] == "interrupted" and "during stage 1/1" in info["state_reason"]
    assert not (out / "requests.arrows").exists()
    requests = pd.read_parquet(out / "requests.parquet")
    assert len(requests) > 0 and (requests["error_kind"] == "cancelled").sum() == 0
    assert (out / "report.md").is_file()
    return requests


def test_run_timeout_ends_cleanly_and_leaves_no_process(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        _, sim_url = cluster.sim(*SIM_ARGS)
        out = tmp_path / "timed"
        started = time.monotonic()
        proc = subprocess.run(
            _run_cmd(sim_url, out, "--timeout", "8"), cwd=ROOT, capture_output=True,
            text=True, timeout=120, check=False,
        )  # fmt: skip
        assert time.monotonic() - started < 60
        assert "--timeout reached" in proc.stderr, proc.stderr[-2000:]
        assert proc.returncode == 4 and "RUN INTERRUPTED" in proc.stderr
        _check_finished(out)
        assert _processes_mentioning(str(out)) == []


def test_sigterm_to_run_is_forwarded_and_leaves_no_process(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        _, sim_url = cluster.sim(*SIM_ARGS)
        out = tmp_path / "signalled"
        run = cluster.start("run", _run_cmd(sim_url, out))
        wait_until(lambda: (out / "requests.arrows").is_file(), 60, "the run started")
        time.sleep(3.0)
        run.send(signal.SIGTERM)
        assert run.wait(60) == 4, run.text()[-3000:]  # interrupted
        _check_finished(out)
        wait_until(lambda: _processes_mentioning(str(out)) == [], 10, "no child left")


def test_a_used_run_dir_is_refused_unless_overwrite(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        _, sim_url = cluster.sim(*SIM_ARGS)
        run_dir = tmp_path / "run"

        def locust(*extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [LOCUST, "-f", "locustfiles/sweep.py", "--headless", "--host", sim_url,
                 "--llm-concurrency", "2", "--llm-stage-duration", "2", "--llm-run-dir",
                 str(run_dir), "--llm-server-metrics", "none", *extra],
                cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip

        assert locust().returncode == 0
        report = subprocess.run([LOCUST_LLM, "report", str(run_dir)], cwd=ROOT, check=False,
                                capture_output=True, timeout=60)  # fmt: skip
        assert report.returncode in (0, 3) and (run_dir / "report.md").is_file()
        first = pd.read_parquet(run_dir / "requests.parquet")
        run_json = (run_dir / "run.json").read_text()

        again = locust()
        assert again.returncode == 2, again.stderr[-2000:]
        assert "already holds a run" in again.stderr and "--llm-overwrite" in again.stderr
        assert (run_dir / "run.json").read_text() == run_json  # untouched

        second_start = time.time()
        assert locust("--llm-overwrite").returncode == 0
        second = pd.read_parquet(run_dir / "requests.parquet")
        assert (second["start_wall_s"] >= second_start).all()
        assert not set(second["request_id"]) & set(first["request_id"])
        # the earlier report described a run that is gone: it is gone too
        assert not (run_dir / "report.md").exists() and not (run_dir / "summary.json").exists()
