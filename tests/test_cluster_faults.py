"""Faults of a real cluster during a run, with exact counts.

* a worker killed with SIGKILL mid-stage: the master goes on; run.json names the lost worker and
  its requests in flight; every other record is there;
* the target killed and restarted mid-stage: failures are classified connect / stream_broken and
  the run recovers;
* the GPU exporter stopped: telemetry records the gap as a gap (scrape_up 0, NaN values) and the
  report says where data is missing;
* the master's run dir unwritable at start: a clear error, a non-zero exit, no request sent;
* a worker killed with SIGKILL mid trace replay: its lines not yet due are sent by the survivor
  on the same schedule, and every line it left unreported has one record: no line lost, none
  sent twice (the simulator's request trace is the judge).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from cluster_utils import (
    Cluster,
    free_port,
    http_get,
    locust_counts,
    metric_value,
    read_run,
    read_trace,
    wait_until,
)

from locust_llm.report.build import build_report
from locust_llm.report.document import document
from locust_llm.report.load import load_run

pytestmark = pytest.mark.slow

#: each request streams 100 tokens at 20 ms a step: 2 s in flight, cheap for the CPU
SLOW_SIM = ("--zero-cost", "--step-overhead-ms", "20", "--output-len", "fixed:100")


def _running(sim_url: str) -> float:
    return metric_value(http_get(sim_url + "/metrics", 2), "vllm:num_requests_running")


def test_worker_sigkill_mid_stage_is_named_with_its_in_flight_requests(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        trace = tmp_path / "trace.jsonl"
        _, sim_url = cluster.sim(*SLOW_SIM, "--trace", str(trace))
        run_dir = tmp_path / "run"
        master, port = cluster.master(sim_url, [
            "--llm-concurrency", "4", "--llm-stage-duration", "9", "--llm-max-tokens", "100",
            "--llm-record-batch-s", "0.2", "--stop-timeout", "5", "--llm-run-dir", str(run_dir),
            "--llm-server-metrics", "none",
        ])  # fmt: skip
        victim, survivor = (cluster.worker(i, "127.0.0.1", port) for i in (1, 2))
        # all 4 users have a 2 s request in flight; 0.6 s later every batch has reported them
        wait_until(lambda: _running(sim_url) >= 4, 20, "4 requests in flight")
        time.sleep(0.6)
        victim.send(signal.SIGKILL)
        victim.popen.wait(5)
        master.wait(60)
        survivor.wait(20)

        info, requests = read_run(run_dir)
        counts = locust_counts(survivor)
        assert len(counts) == 1, survivor.text()[-2000:]
        ((survivor_id, survivor_count),) = counts.items()
        lost_id = next(w for w in info["workers"] if w != survivor_id)
        # the lost worker is named, with its 2 users' requests that were in flight
        assert info["lost_workers"] == {lost_id: 2}
        # it sent no finished record; the server saw exactly those 2 requests go away
        assert (requests["worker_id"] == lost_id).sum() == 0
        outcomes = [r["outcome"] for r in read_trace(trace)]
        assert outcomes.count("aborted") == 2
        # every other record is there: the survivor's records equal its Locust-counted requests,
        # and every request the server completed has its record
        mine = requests[requests["worker_id"] == survivor_id]
        assert (mine["error_kind"] != "cancelled").sum() == survivor_count > 0
        assert mine["ok"].sum() == outcomes.count("ok")
        assert set(requests["worker_id"]) == {survivor_id}


def test_worker_sigkill_mid_replay_leaves_its_lines_to_the_survivor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from locust_llm.workloads.traces import synthetic_mooncake, write_jsonl

    lines = 320  # 16 s of trace at 20 lines/s: the survivor still has lines to adopt
    trace_file = write_jsonl(
        synthetic_mooncake(lines, rate_per_s=20.0, seed=3), tmp_path / "t.jsonl"
    )
    monkeypatch.setenv("LOCUST_LLM_TRACE", str(trace_file))  # the workers inherit it
    with Cluster(tmp_path) as cluster:
        sim_trace = tmp_path / "sim.jsonl"
        _, sim_url = cluster.sim("--zero-cost", "--step-overhead-ms", "2", "--output-len",
                                 "fixed:4", "--trace", str(sim_trace))  # fmt: skip
        run_dir = tmp_path / "run"
        master, port = cluster.master(sim_url, [
            "--llm-record-batch-s", "0.2", "--stop-timeout", "5", "--llm-run-dir", str(run_dir),
            "--llm-server-metrics", "none",
        ], locustfile="locustfiles/trace_replay.py")  # fmt: skip
        victim, survivor = (cluster.worker(i, "127.0.0.1", port) for i in (1, 2))
        done = lambda: metric_value(http_get(sim_url + "/metrics", 2), "vllm:request_success_total")  # noqa: E731
        wait_until(lambda: done() >= 60, 40, "3 s of the replay answered")
        killed_wall_s = time.time()
        victim.send(signal.SIGKILL)
        victim.popen.wait(5)
        assert master.wait(90) == 0, master.text()[-3000:]
        survivor.wait(20)

        info, requests = read_run(run_dir)
        (lost_id,) = info["lost_workers"]
        survivor_id = next(w for w in info["workers"] if w != lost_id)
        # every line has exactly one record
        assert sorted(requests.trace_line) == list(range(lines)), master.text()[-3000:]
        lost = requests[requests.error_message.str.contains("lost with worker", na=False)]
        assert len(lost) > 0 and (lost.error_kind == "cancelled").all()
        assert (lost.worker_id == lost_id).all()
        assert lost.error_message.str.contains(lost_id, regex=False).all()
        # the lost worker's share: what it reported before dying, what it left unreported (due
        # before the master knew), and what the survivor sent for it afterwards
        share = requests.trace_line % 2 == (
            requests[requests.worker_id == lost_id].trace_line.iloc[0] % 2
        )
        adopted = requests[share & (requests.worker_id == survivor_id)]
        assert len(adopted) > 0 and adopted.ok.all(), adopted.error_message.unique()
        assert (adopted.scheduled_wall_s > killed_wall_s).all()
        assert (lost.scheduled_wall_s < adopted.scheduled_wall_s.min()).all()
        sent_on_time = adopted.start_wall_s - adopted.scheduled_wall_s
        assert sent_on_time.median() < 0.05, sent_on_time.describe()
        # no line sent twice: the server received each answered record's request once, and at
        # most the lost lines besides (those the victim had in flight)
        received = [r["client_request_id"] for r in read_trace(sim_trace)]
        assert len(received) == len(set(received))
        answered = set(requests[requests.ok].request_id)
        assert answered <= set(received)
        assert len(answered) <= len(received) <= len(answered) + len(lost)
        # the report counts them apart
        doc = document(build_report(load_run(run_dir)))
        rows = dict(doc.section("trace_replay").blocks[0].rows)  # type: ignore[union-attr]
        assert rows["lost with a worker (sent and never reported, or never sent)"] == str(len(lost))
        assert rows["trace lines recorded"] == str(lines)


def test_target_restart_mid_stage_is_classified_and_recovers(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        port = free_port()
        sim_args = ("--zero-cost", "--step-overhead-ms", "10", "--output-len", "fixed:40")
        sim, sim_url = cluster.sim(*sim_args, port=port, name="sim-a")
        run_dir = tmp_path / "run"
        master, mport = cluster.master(sim_url, [
            "--llm-concurrency", "2", "--llm-stage-duration", "7", "--llm-max-tokens", "40",
            "--llm-record-batch-s", "0.2", "--stop-timeout", "3", "--llm-run-dir", str(run_dir),
            "--llm-server-metrics", "none", "--llm-connect-timeout", "2",
        ], workers=1)  # fmt: skip
        worker = cluster.worker(1, "127.0.0.1", mport)
        wait_until(lambda: _running(sim_url) >= 2, 20, "2 requests in flight")
        time.sleep(1.0)
        killed_at = time.time()
        sim.send(signal.SIGKILL)  # a crash: open streams break, new connections are refused
        sim.popen.wait(5)
        time.sleep(0.5)
        cluster.sim(*sim_args, port=port, name="sim-b")
        restarted_at = time.time()
        master.wait(60)
        worker.wait(20)

        _, requests = read_run(run_dir)
        failed = requests[~requests["ok"] & (requests["error_kind"] != "cancelled")]
        kinds = failed["error_kind"].value_counts().to_dict()
        assert set(kinds) <= {"connect", "stream_broken"}, kinds
        assert kinds.get("stream_broken", 0) >= 1 and kinds.get("connect", 0) >= 1, kinds
        # every failure happened around the outage; the run went on and recovered after it
        assert failed["start_wall_s"].min() >= killed_at - 1.0
        assert failed["start_wall_s"].max() <= restarted_at + 1.0
        before = requests[requests["start_wall_s"] < killed_at - 1.0]
        after = requests[requests["start_wall_s"] > restarted_at + 1.0]
        assert before["ok"].all() and len(before) > 0
        completed_after = after[after["error_kind"] != "cancelled"]
        assert len(completed_after) >= 4 and completed_after["ok"].all()


def test_exporter_stopped_leaves_a_gap_not_zeros(tmp_path: Path) -> None:
    import pandas as pd

    with Cluster(tmp_path) as cluster:
        _, sim_url = cluster.sim("--zero-cost", "--step-overhead-ms", "10",
                                 "--output-len", "fixed:20")  # fmt: skip
        exporter, exporter_url = cluster.exporter()
        run_dir = tmp_path / "run"
        master, port = cluster.master(sim_url, [
            "--llm-concurrency", "2", "--llm-stage-duration", "6", "--llm-max-tokens", "20",
            "--llm-run-dir", str(run_dir), "--llm-gpu-metrics", exporter_url,
            "--llm-server-metrics", sim_url + "/metrics", "--llm-scrape-interval", "0.25",
        ], workers=1)  # fmt: skip
        worker = cluster.worker(1, "127.0.0.1", port)
        wait_until(lambda: _running(sim_url) >= 2, 20, "the load running")
        time.sleep(2.0)
        exporter.stop()
        stopped_at = time.time()
        master.wait(60)
        worker.wait(20)

        telemetry = pd.read_parquet(run_dir / "telemetry.parquet")
        gpu = telemetry[(telemetry["source"] == exporter_url)]
        up = gpu[gpu["signal"] == "scrape_up"]
        util = gpu[gpu["signal"] == "gpu_util"]
        assert (up[up["time_s"] < stopped_at - 0.5]["value"] == 1).all()
        assert (up[up["time_s"] > stopped_at + 0.5]["value"] == 0).sum() >= 4
        # before the stop: readings; after it: NaN rows (a gap), never 0
        assert util[util["time_s"] < stopped_at - 0.5]["value"].notna().sum() >= 4
        after = util[util["time_s"] > stopped_at + 0.5]["value"]
        assert len(after) >= 4 and after.isna().all()
        # the server's own metrics kept coming: the gap is the exporter's only
        server_up = telemetry[(telemetry["source"] == sim_url + "/metrics")
                              & (telemetry["signal"] == "scrape_up")]  # fmt: skip
        assert (server_up["value"] == 1).all() and len(server_up) >= 8

        done = cluster.report(run_dir, "--out", str(tmp_path / "report"))
        assert done.returncode in (0, 3), done.stdout
        report_md = (tmp_path / "report" / "report.md").read_text()
        exporter_hostport = exporter_url.split("://", 1)[1].split("/", 1)[0]
        assert any(exporter_hostport in line and "gap" in line for line in report_md.splitlines()
                   ), "the report should say which source has a gap"  # fmt: skip


def test_unwritable_run_dir_fails_before_any_request(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        trace = tmp_path / "trace.jsonl"
        _, sim_url = cluster.sim("--zero-cost", "--trace", str(trace))
        blocker = tmp_path / "not-a-dir"
        blocker.write_text("a file where the run dir's parent should be")
        master, port = cluster.master(sim_url, [
            "--llm-concurrency", "2", "--llm-stage-requests", "10",
            "--llm-run-dir", str(blocker / "run"), "--llm-server-metrics", "none",
        ], workers=1)  # fmt: skip
        cluster.worker(1, "127.0.0.1", port)
        code = master.wait(30)
        output = master.text()
        assert code != 0
        assert "not writable" in output and str(blocker / "run") in output, output[-2000:]
        time.sleep(0.5)
        metrics = http_get(sim_url + "/metrics", 2)
        assert metric_value(metrics, "vllm:prompt_tokens_total") == 0
        assert metric_value(metrics, "vllm:request_success_total") == 0
        assert read_trace(trace) == []


def test_worker_sigkill_in_a_request_count_stage_does_not_hang_the_run(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        _, sim_url = cluster.sim(*SLOW_SIM)
        run_dir = tmp_path / "run"
        master, port = cluster.master(sim_url, [
            "--llm-concurrency", "4", "--llm-stage-requests", "24", "--llm-max-tokens", "100",
            "--llm-record-batch-s", "0.2", "--stop-timeout", "5", "--llm-run-dir", str(run_dir),
            "--llm-server-metrics", "none",
        ])  # fmt: skip
        victim, survivor = (cluster.worker(i, "127.0.0.1", port) for i in (1, 2))
        wait_until(lambda: _running(sim_url) >= 4, 20, "4 requests in flight")
        time.sleep(0.6)
        victim.send(signal.SIGKILL)  # its granted permits must come back to the stage
        victim.popen.wait(5)
        # before the fix the master waited forever for the victim's permits
        assert master.wait(90) == 0, master.text()[-3000:]
        survivor.wait(20)

        info, requests = read_run(run_dir)
        ((survivor_id, _),) = locust_counts(survivor).items()
        lost_id = next(w for w in info["workers"] if w != survivor_id)
        assert info["lost_workers"] == {lost_id: 2}
        ended = requests[requests["error_kind"] != "cancelled"]
        # the stage's 24 requests: the survivor's records and the victim's 2 permits that never
        # became records (they count as ended, so the stage neither hangs nor overshoots)
        assert len(ended) == 24 - 2 and ended["ok"].all()
        assert info["state"] == "finished"
        assert set(requests["worker_id"]) == {survivor_id}
        assert "lost" in master.text()
        # the stage window says the users really running fell to the survivor's 2
        assert info["stages"][0]["users_min"] == 2


def test_master_sigterm_mid_stage_drains_workers_and_finalises(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        trace = tmp_path / "trace.jsonl"
        _, sim_url = cluster.sim(*SLOW_SIM, "--trace", str(trace))
        run_dir = tmp_path / "run"
        master, port = cluster.master(sim_url, [
            "--llm-concurrency", "4", "--llm-stage-duration", "60", "--llm-max-tokens", "100",
            "--llm-record-batch-s", "0.2", "--stop-timeout", "10", "--llm-run-dir", str(run_dir),
            "--llm-server-metrics", "none",
        ])  # fmt: skip
        workers = [cluster.worker(i, "127.0.0.1", port) for i in (1, 2)]
        wait_until(lambda: len(read_trace(trace)) >= 4, 30, "4 requests finished")
        master.send(signal.SIGTERM)  # a stage shape runs: Locust's own handler is not there yet
        assert master.wait(40) == 4, master.text()[-3000:]  # interrupted
        for worker in workers:
            worker.wait(20)
        info, requests = read_run(run_dir)
        assert info["state"] == "interrupted" and info["lost_workers"] == {}
        # the streams in flight drained: none cancelled, every request the server saw recorded
        assert (requests["error_kind"] == "cancelled").sum() == 0
        served = {str(r["client_request_id"]) for r in read_trace(trace)}
        assert served == set(requests["request_id"]) and requests["ok"].all()


def test_master_sigkill_leaves_a_run_dir_report_reads_as_partial(tmp_path: Path) -> None:
    from locust_llm.rundir.journal import read_journal

    with Cluster(tmp_path) as cluster:
        trace = tmp_path / "trace.jsonl"
        _, sim_url = cluster.sim(*SLOW_SIM, "--trace", str(trace))
        run_dir = tmp_path / "run"
        master, port = cluster.master(sim_url, [
            "--llm-concurrency", "4", "--llm-stage-duration", "60", "--llm-max-tokens", "100",
            "--llm-record-batch-s", "0.2", "--llm-run-dir", str(run_dir),
            "--llm-server-metrics", "none",
        ])  # fmt: skip
        for i in (1, 2):
            cluster.worker(i, "127.0.0.1", port)
        wait_until(lambda: len(read_trace(trace)) >= 8, 30, "8 requests finished")
        time.sleep(0.5)
        killed_at = time.time()
        master.send(signal.SIGKILL)
        master.popen.wait(5)
        table, _ = read_journal(run_dir / "requests.arrows")
        recorded = set(table.column("request_id").to_pylist())
        # worker batches every 0.2 s + the master's 1 s flush: all but the last ~1.5 s is there
        early = {str(r["client_request_id"]) for r in read_trace(trace)
                 if float(r["engine_finish"]) < killed_at - 1.5}  # type: ignore[arg-type]  # fmt: skip
        assert early and early <= recorded
        done = cluster.report(run_dir)
        assert done.returncode in (0, 3), done.stdout[-3000:]
        assert "partial run" in done.stdout


def test_worker_sigterm_mid_stage_loses_no_record(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        trace = tmp_path / "trace.jsonl"
        _, sim_url = cluster.sim(*SLOW_SIM, "--trace", str(trace))
        run_dir = tmp_path / "run"
        master, port = cluster.master(sim_url, [
            "--llm-concurrency", "4", "--llm-stage-duration", "10", "--llm-max-tokens", "100",
            "--llm-record-batch-s", "0.2", "--stop-timeout", "5", "--llm-run-dir", str(run_dir),
            "--llm-server-metrics", "none",
        ])  # fmt: skip
        leaver, stayer = (cluster.worker(i, "127.0.0.1", port) for i in (1, 2))
        wait_until(lambda: _running(sim_url) >= 4, 20, "4 requests in flight")
        time.sleep(0.6)
        leaver.send(signal.SIGTERM)
        assert leaver.wait(20) == 0, leaver.text()[-3000:]
        assert master.wait(60) == 0, master.text()[-3000:]
        stayer.wait(20)
        info, requests = read_run(run_dir)
        assert info["state"] == "finished" and info["lost_workers"] == {}
        # every request the server saw has exactly one record (finished or cancelled)
        served = [str(r["client_request_id"]) for r in read_trace(trace)]
        assert sorted(served) == sorted(requests["request_id"])
        assert len(set(requests["worker_id"])) == 2
