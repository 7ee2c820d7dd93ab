"""A run's last scrape comes after its last request: the server's counts over the last stage
reach its end, whatever the scrape interval (a fresh-clone CI run's last timer scrape came 47 ms
before the last batch of a llama.cpp sweep ended, and the stage's server tokens missed it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster_utils import LOCUST_LLM, Cluster

pytestmark = pytest.mark.slow

#: 20 ms per step, 20 tokens: a request takes ~0.45 s
SIM = ("--zero-cost", "--step-overhead-ms", "20", "--output-len", "fixed:20")


def test_the_last_stage_counts_the_servers_tokens_to_its_last_request(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        _, sim_url = cluster.sim(*SIM)
        out = tmp_path / "out"
        # one scrape a minute: the timers' only one is taken before the first request
        cmd = [LOCUST_LLM, "run", "--host", sim_url, "--max-tokens", "20", "--ignore-eos",
               "--workers", "1", "--quiet", "--out", str(out), "--concurrency", "2",
               "--stage-requests", "6", "--server-metrics", sim_url + "/metrics",
               "--llm-scrape-interval", "60"]  # fmt: skip
        run = cluster.start("run", cmd)
        code = run.wait(120)
        assert code == 0, run.text()[-3000:]
    row = json.loads((out / "summary.json").read_text())["stages"][0]
    assert (row["completed"], row["output_tokens_avg"]) == (6, 20.0), row
    assert row["server_output_tokens"] == 6 * 20, row  # the server's count, to the last token
