"""The compose topology as processes: simulator, GPU exporter (fake source), a real Prometheus,
a headless Locust master and 2 workers running a short sweep; then ``locust-llm report`` from the
master's direct scrapes and from ``--prometheus``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from cluster_utils import Cluster, locust_counts, read_run, read_trace

pytestmark = pytest.mark.slow

SWEEP = ["--llm-concurrency", "1,4", "--llm-stage-requests", "20,40", "--llm-max-tokens", "16",
         "--llm-record-batch-s", "0.25"]  # fmt: skip


def _stage_rows(summary_path: Path) -> list[dict[str, object]]:
    return json.loads(summary_path.read_text())["stages"]


def test_master_two_workers_sweep_then_report_from_scrapes_and_prometheus(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        trace = tmp_path / "sim-trace.jsonl"
        _, sim_url = cluster.sim("--trace", str(trace), "--output-len", "fixed:64")
        _, exporter_url = cluster.exporter("--fake-profile", "compute:2,copy:2")
        sim_hostport = sim_url.split("://", 1)[1]
        exporter_hostport = exporter_url.split("://", 1)[1]
        prom_url = cluster.prometheus({"target": [sim_hostport + "/metrics"],
                                       "gpu-exporter": [exporter_hostport]})  # fmt: skip
        cluster.prometheus_up(prom_url, expected=2)
        run_dir = tmp_path / "run"
        master, port = cluster.master(sim_url, [
            *SWEEP, "--llm-run-dir", str(run_dir), "--llm-gpu-metrics", exporter_url,
            "--llm-server-metrics", sim_url + "/metrics", "--llm-scrape-interval", "0.5",
        ])  # fmt: skip
        workers = [cluster.worker(i, "127.0.0.1", port) for i in (1, 2)]
        assert master.wait(90) == 0, master.text()[-3000:]
        for worker in workers:
            worker.wait(20)

        info, requests = read_run(run_dir)
        assert len(info["workers"]) == 2
        assert info["lost_workers"] == {}
        assert [s["name"] for s in info["stages"]] == ["c=1", "c=4"]
        # every request the server answered has exactly one record, and nothing failed
        outcomes = Counter(str(r["outcome"]) for r in read_trace(trace))
        assert len(requests) == sum(outcomes.values()), (outcomes, requests["error_kind"].tolist())
        assert requests["ok"].all(), requests["error_kind"].value_counts()
        assert requests["request_id"].is_unique
        # the stage quotas were met exactly, across both workers
        assert requests.groupby("stage").size().to_dict() == {0: 20, 1: 40}
        # each worker's records match what Locust itself counted on that worker
        counts = locust_counts(*workers)
        assert set(counts) == set(info["workers"])
        assert requests.groupby("worker_id").size().to_dict() == counts
        assert set(requests["worker_id"]) == set(info["workers"])

        # telemetry scraped by the master: the exporter's GPU and the server's KV cache
        import pandas as pd

        telemetry = pd.read_parquet(run_dir / "telemetry.parquet")
        by_source = telemetry.groupby("source")["signal"].agg(set).to_dict()
        assert "gpu_util" in by_source[exporter_url]
        assert {"kv_cache_usage", "running"} <= by_source[sim_url + "/metrics"]

        direct = cluster.report(run_dir, "--out", str(tmp_path / "direct"))
        assert direct.returncode in (0, 3), direct.stdout
        rows = _stage_rows(tmp_path / "direct" / "summary.json")
        assert [r["completed"] for r in rows] == [20, 40]
        assert all(r["gpu_util"] is not None and r["kv_cache_usage"] is not None for r in rows)

        prom = cluster.report(run_dir, "--prometheus", prom_url, "--prometheus-step", "0.5",
                              "--out", str(tmp_path / "prom"))  # fmt: skip
        assert prom.returncode in (0, 3), prom.stdout
        prom_rows = _stage_rows(tmp_path / "prom" / "summary.json")
        assert [r["completed"] for r in prom_rows] == [20, 40]
        assert all(r["gpu_util"] is not None and r["kv_cache_usage"] is not None
                   for r in prom_rows)  # fmt: skip
