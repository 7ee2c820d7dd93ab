"""The cluster over a network, not loopback: each worker in its own network namespace.

Each worker's namespace is joined to the root namespace by its own veth pair (a /30 link with
addresses this test chooses); the master and the simulator bind the root side of the first link,
so workers reach both over veth links. Workers run in separate temporary directories and fetch
the locustfiles from the master (``-f -``): no file is shared. Skipped, with the reason, where
this process may not create network namespaces.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cluster_utils import Cluster, locust_counts, netns_supported, read_run, read_trace

pytestmark = pytest.mark.slow


def test_workers_in_their_own_network_namespaces(tmp_path: Path) -> None:
    reason = netns_supported()
    if reason:
        pytest.skip(reason)
    with Cluster(tmp_path) as cluster:
        ns1, ns2 = cluster.netns(1), cluster.netns(2)
        address = ns1.host_addr  # the master's and the server's address, on a veth link
        trace = tmp_path / "trace.jsonl"
        _, sim_url = cluster.sim("--zero-cost", "--step-overhead-ms", "5", "--output-len",
                                 "fixed:16", "--trace", str(trace), bind=address)  # fmt: skip
        assert sim_url.startswith(f"http://{address}:")
        run_dir = tmp_path / "run"
        master, port = cluster.master(sim_url, [
            "--llm-concurrency", "2,4", "--llm-stage-requests", "10,20", "--llm-max-tokens", "16",
            "--llm-run-dir", str(run_dir), "--llm-server-metrics", "none",
        ], bind=address)  # fmt: skip
        workers = [cluster.worker(i, address, port, netns=ns) for i, ns in ((1, ns1), (2, ns2))]
        assert master.wait(90) == 0, master.text()[-3000:]
        for worker in workers:
            worker.wait(20)

        info, requests = read_run(run_dir)
        assert len(info["workers"]) == 2 and info["lost_workers"] == {}
        assert requests.groupby("stage").size().to_dict() == {0: 10, 1: 20}
        assert requests["ok"].all()
        assert requests.groupby("worker_id").size().to_dict() == locust_counts(*workers)
        assert len(read_trace(trace)) == 30
        # the workers' own dirs hold only what they downloaded from the master: no run dir there
        for i in (1, 2):
            names = {p.name for p in (tmp_path / f"worker{i}").iterdir()}
            assert not {"run.json", "requests.parquet"} & names
            assert "sweep.py" in names  # fetched from the master over the network
