"""Every simulator fault becomes the right error kind, the run goes on, and sent = ok + failed.

The simulator's trace says which requests it failed and how; the client's records must hold the
same multiset of outcomes, mapped to error kinds, and as many records as the server saw requests.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_locust

from locust_llm.launch.sweep import simulator

pytestmark = pytest.mark.slow

#: the simulator's trace outcome -> the client's error kind
EXPECTED_KIND = {
    "ok": "",
    "fault:http500": "http_5xx",
    "fault:http503": "http_5xx",
    "fault:http429": "http_429",
    "fault:disconnect": "stream_broken",
    "fault:malformed": "bad_payload",
    "fault:stall": "timeout",
    "fault:slow_first_byte": "",  # slower, but it succeeds
}


def test_faults_become_classified_records(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    run_dir = tmp_path / "run"
    faults = ["http500:0.08", "http503:0.08", "http429:0.08:1", "disconnect:0.08:2",
              "malformed:0.08:2", "stall:0.05:2", "slow_first_byte:0.05:0.3"]  # fmt: skip
    sim_args = ["--model", "qwen2.5-0.5b", "--gpu", "h100-sxm", "--step-overhead-ms", "2",
                "--output-len", "fixed:8", "--trace", str(trace), "--seed", "3",
                *(f"--fault={f}" for f in faults)]  # fmt: skip
    with simulator(sim_args, tmp_path / "sim.log") as url:
        out = run_locust([
            "-f", "locust_llm/client/sweep_locustfile.py", "--host", url, "--headless",
            "--only-summary", "--stop-timeout", "10s", "--llm-run-dir", str(run_dir),
            "--llm-concurrency", "8", "--llm-stage-requests", "160", "--llm-max-tokens", "8",
            "--llm-input-len", "32", "--llm-read-timeout", "0.8", "--llm-server-metrics", "none",
        ], timeout=120)  # fmt: skip
    assert out.returncode in (0, 1), out.stdout[-3000:]  # 1: Locust saw failures, as it should
    records = pd.read_parquet(run_dir / "requests.parquet")
    served = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(records) == len(served) == 160  # the stage's requests, every one recorded once
    assert records.request_id.is_unique
    got = Counter(records.error_kind)
    expected = Counter(EXPECTED_KIND[s["outcome"]] for s in served)
    assert got == expected
    # every fault kind really happened, and the run went on after each
    assert {k for k in got if k} == {"http_5xx", "http_429", "stream_broken", "bad_payload",
                                     "timeout"}  # fmt: skip
    assert got[""] > 80
    failed = records[~records.ok]
    assert (failed.error_message != "").all() and (failed.error_kind != "").all()
    assert (records.ok == (records.error_kind == "")).all()
