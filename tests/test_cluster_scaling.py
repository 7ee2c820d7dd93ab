"""Horizontal scaling: requests spread over 2 server instances, and the throughput gain.

Two simulators, each limited to 2 sequences per batch (so the server, not the client, is the
bottleneck), are driven by a master + 2 workers at concurrency 8: once with one instance,
once with ``--llm-hosts URL1,URL2`` (round robin in each worker), and once through nginx as a
load balancer in front of both (``proxy_buffering off`` for SSE). ``locust-llm report --compare``
turns the first two into the gain per added instance.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster_utils import Cluster, read_run, read_trace

pytestmark = pytest.mark.slow

#: 2 sequences per batch, 10 ms a step, 20 tokens: about 10 requests/s per instance
SIM = ("--zero-cost", "--step-overhead-ms", "10", "--max-num-seqs", "2", "--output-len", "fixed:20")
LOAD = ["--llm-concurrency", "8", "--llm-stage-requests", "60", "--llm-max-tokens", "20",
        "--llm-server-metrics", "none"]  # fmt: skip


def _qps(run_dir: Path) -> float:
    _, requests = read_run(run_dir)
    assert requests["ok"].all() and len(requests) == 60
    span = requests["start_wall_s"].max() - requests["start_wall_s"].min()
    return (len(requests) - 1) / span


def test_round_robin_hosts_and_a_load_balancer_scale_throughput(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        traces = [tmp_path / "trace1.jsonl", tmp_path / "trace2.jsonl"]
        urls = [cluster.sim(*SIM, "--trace", str(t), name=f"sim{i}")[1]
                for i, t in enumerate(traces, 1)]  # fmt: skip

        one, _ = cluster.run("one", urls[0], LOAD)
        assert len(read_trace(traces[0])) == 60 and read_trace(traces[1]) == []

        two, _ = cluster.run("two", urls[0], [*LOAD, "--llm-hosts", ",".join(urls)])
        info, requests = read_run(two)
        assert info["server_instances"] == 2 and info["hosts"] == urls
        # each user alternates its requests between the instances, starting with the one its
        # index names (user i of a worker starts at host i mod 2): an odd count leaves its
        # extra request there
        assert requests["worker_id"].nunique() == 2
        per_user = requests.groupby(["worker_id", "user_id"]).size()
        first = sum((n + 1) // 2 if user % 2 == 0 else n // 2
                    for (_, user), n in per_user.items())  # fmt: skip
        assert [len(read_trace(t)) for t in traces] == [60 + first, 60 - first]

        lb_url = cluster.nginx(urls)
        balanced, _ = cluster.run("nginx", lb_url, LOAD)
        through_lb = [len(read_trace(t)) for t in traces]
        assert sum(through_lb) == 60 + 60 + 60
        assert through_lb[1] - (60 - first) >= 20  # nginx sent the second one a fair share of 60

        qps = {name: _qps(d) for name, d in (("one", one), ("two", two), ("nginx", balanced))}
        assert qps["two"] / qps["one"] >= 1.6, qps
        assert qps["nginx"] / qps["one"] >= 1.6, qps

        done = cluster.report(one, "--compare", str(two), "--out", str(tmp_path / "compare"))
        assert done.returncode in (0, 3), done.stdout
        comparison = json.loads((tmp_path / "compare" / "summary.json").read_text())["comparison"]
        assert [row["instances"] for row in comparison] == [1, 2]
        # the report's QPS is per stage window (closed by a 1 s shape tick), hence the margin
        gain = comparison[1]
        assert gain["gain"] >= 1.4 and gain["gain_per_instance"] >= 0.7, comparison
        report_md = (tmp_path / "compare" / "report.md").read_text()
        assert "Comparison (horizontal scaling)" in report_md
