"""Durable records under signals, judged against the simulator's own request trace.

* SIGTERM (before Locust installs its own handler) or SIGINT to a headless staged run: the
  load stops, in-flight streams drain, the run dir is finalised, exit 0, every request the
  server finished has its record;
* SIGKILL of the same run: the journal on disk holds every request the server finished more than
  the flush interval (1 s, plus the client's measured lag behind the server on a busy host)
  before the kill, and ``report`` reads the unfinished run as partial.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from cluster_utils import LOCUST, Cluster, read_run, read_trace, wait_until

from locust_llm.rundir.journal import JOURNAL_FILE, read_journal

pytestmark = pytest.mark.slow

#: each request streams 40 tokens at 20 ms a step: 0.8 s in flight, cheap for the CPU
SIM_ARGS = ("--zero-cost", "--step-overhead-ms", "20", "--output-len", "fixed:40")


def _staged_run(cluster: Cluster, sim_url: str, run_dir: Path, stop_timeout_s: int) -> object:
    cmd = [
        LOCUST, "-f", f"locustfiles/sweep.py,{cluster.counter_file}", "--headless",
        "--host", sim_url, "--llm-concurrency", "4", "--llm-stage-duration", "60",
        "--llm-max-tokens", "40", "--llm-server-metrics", "none", "--stop-timeout",
        str(stop_timeout_s), "--llm-run-dir", str(run_dir),
    ]  # fmt: skip
    return cluster.start("run", cmd)


def _journaled(run_dir: Path) -> int:
    """Records in the run's journal so far (0 before it exists)."""
    if not (run_dir / JOURNAL_FILE).exists():
        return 0
    table, _clean = read_journal(run_dir / JOURNAL_FILE)
    return table.num_rows


def _finished_ids(trace: Path, before_wall_s: float = float("inf")) -> set[str]:
    return {
        str(r["client_request_id"])
        for r in read_trace(trace)
        if r["outcome"] == "ok" and float(r["engine_finish"] or 0) < before_wall_s  # type: ignore[arg-type]
    }


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_mid_stage_drains_and_finalises(signum: int, tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        trace = tmp_path / "trace.jsonl"
        _, sim_url = cluster.sim(*SIM_ARGS, "--trace", str(trace))
        run_dir = tmp_path / "run"
        proc = _staged_run(cluster, sim_url, run_dir, stop_timeout_s=10)
        wait_until(lambda: len(_finished_ids(trace)) >= 12, 40, "12 requests finished")
        # run.json is on disk while the run goes, marked running
        info = json.loads((run_dir / "run.json").read_text())
        assert info["state"] == "running"
        proc.send(signum)  # type: ignore[attr-defined]
        code = proc.wait(30)  # type: ignore[attr-defined]
        assert code == 4, proc.text()[-3000:]  # type: ignore[attr-defined]  # interrupted
        info, requests = read_run(run_dir)
        assert info["state"] == "interrupted" and "during stage 1/" in info["state_reason"]
        assert not (run_dir / JOURNAL_FILE).exists()
        # drained: no request was cancelled, and every one the server finished is recorded
        assert (requests["error_kind"] == "cancelled").sum() == 0
        assert _finished_ids(trace) <= set(requests["request_id"])
        assert requests["ok"].all() and len(requests) == len(read_trace(trace))


def test_sigkill_loses_at_most_the_last_second_and_report_says_partial(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        trace = tmp_path / "trace.jsonl"
        _, sim_url = cluster.sim(*SIM_ARGS, "--trace", str(trace))
        run_dir = tmp_path / "run"
        proc = _staged_run(cluster, sim_url, run_dir, stop_timeout_s=5)
        # a kill with records on disk already (the persist loop's first flushes), mid-stage
        wait_until(
            lambda: len(_finished_ids(trace)) >= 20 and _journaled(run_dir) >= 10,
            40,
            "20 requests finished and 10 journaled",
        )
        killed_at = time.time()
        proc.send(signal.SIGKILL)  # type: ignore[attr-defined]
        proc.wait(10)  # type: ignore[attr-defined]
        assert not (run_dir / "requests.parquet").exists()
        table, _clean = read_journal(run_dir / JOURNAL_FILE)
        recorded = set(table.column("request_id").to_pylist())
        # the flush interval is 1 s, plus the time from the server's finish to the client's
        # record: on an idle host milliseconds, on a busy one as late as this run measured it
        # (each journaled record's end against the server's finish of the same request), plus
        # 0.5 s for the flush itself
        finish = {str(r["client_request_id"]): float(r["engine_finish"] or 0)
                  for r in read_trace(trace) if r["outcome"] == "ok"}  # fmt: skip
        ends = zip(table.column("request_id").to_pylist(),
                   table.column("start_wall_s").to_pylist(),
                   table.column("e2e_s").to_pylist(), strict=True)  # fmt: skip
        lag = max([0.0] + [s + e - finish[r] for r, s, e in ends if r in finish and e == e])
        assert lag < 2.0, lag  # a client that far behind would be a bug of its own
        # the persist loop writes run.json right after each journal flush: its last write says
        # when the last flush ended. That flush ran at most a second (its interval) plus the
        # host's scheduling delay before the kill, and held every record ended by its start
        last_persist = (run_dir / "run.json").stat().st_mtime
        assert killed_at - last_persist < 2.5, killed_at - last_persist
        allowance = max(1.5, killed_at - last_persist + 0.5) + lag
        assert _finished_ids(trace, before_wall_s=killed_at - allowance) <= recorded, (
            lag,
            killed_at - last_persist,
        )
        assert len(recorded) >= 10
        report = cluster.report(run_dir)
        assert report.returncode == 0, report.stdout[-3000:]
        assert "partial run" in report.stdout
        assert "partial run" in (run_dir / "report.md").read_text()


def test_sigterm_while_the_master_waits_for_workers_exits(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        run_dir = tmp_path / "run"
        master = cluster.start("master", [
            LOCUST, "-f", "locustfiles/sweep.py", "--master", "--headless", "--expect-workers",
            "2", "--master-bind-port", "0", "--host", "http://127.0.0.1:9", "--llm-concurrency",
            "1", "--llm-stage-duration", "5", "--llm-run-dir", str(run_dir),
        ])  # fmt: skip
        wait_until(lambda: "Waiting for workers" in master.text(), 30, "the master waiting")
        master.send(signal.SIGTERM)  # Locust's own wait loop: before the fix it never ended
        assert master.wait(20) == 0, master.text()[-2000:]
        assert not (run_dir / "requests.parquet").exists()  # no run began, none is invented
