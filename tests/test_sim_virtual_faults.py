"""Virtual time with the real-time simulator's faults and prefix cache, and its run.json's TP.

Faults: the same seeded draws, applied and classified as the front and the real client do; the
oracle is a real-time run of the same config through the real client (Locust). Prefix cache:
cached tokens in the records against an independent count of the blocks the prompts share.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_locust

from locust_llm.errors import InputError
from locust_llm.launch.sweep import simulator
from locust_llm.rundir.layout import read_run_info
from locust_llm.sim.config import SimConfig
from locust_llm.sim.faults import Fault, FaultPlan
from locust_llm.sim.virtual import VirtualWorkload, simulate, write_run_dir
from locust_llm.sim.virtual_stream import VirtualStream
from locust_llm.workloads.stages import StagePlan

FAULTS = ("http500:0.08", "http503:0.08", "http429:0.08:1", "disconnect:0.08:2",
          "malformed:0.08:2", "stall:0.05:2", "slow_first_byte:0.05:0.3")  # fmt: skip
#: the real client's error kind for each fault, with a 0.8 s read timeout (test_user_faults
#: holds the real client to the same table)
CLIENT_KIND = {"http500": "http_5xx", "http503": "http_5xx", "http429": "http_429",
               "disconnect": "stream_broken", "malformed": "bad_payload", "stall": "timeout",
               "slow_first_byte": ""}  # fmt: skip


def faulty_config(**kw: object) -> SimConfig:
    settings: dict = {
        "model": "qwen2.5-0.5b",
        "gpu": "h100-sxm",
        "output_len": "fixed:8",
        "seed": 3,
        "faults": FAULTS,
        **kw,
    }
    return SimConfig(**settings)


def faulty_workload(requests: int = 160, **kw: object) -> VirtualWorkload:
    stage = StagePlan(concurrency=8, requests=requests, max_sends=requests)
    settings: dict = {"input_len": "32", "max_tokens": "8", "read_timeout_s": 0.8, **kw}
    return VirtualWorkload(stages=(stage,), **settings)


def test_faults_are_the_seeded_draws_classified_as_the_client_does() -> None:
    run = simulate(faulty_config(), faulty_workload())
    assert len(run.records) == 160 and len({r.request_id for r in run.records}) == 160
    plan = FaultPlan(FAULTS, seed=3)  # the server's draws, one per request in arrival order
    drawn = [plan.draw() for _ in range(160)]
    expected = Counter(CLIENT_KIND[f.kind] if f else "" for f in drawn)
    got = Counter(r.error_kind for r in run.records)
    assert got == expected
    assert {k for k in got if k} == {"http_5xx", "http_429", "stream_broken", "bad_payload",
                                     "timeout"}  # fmt: skip
    by_number = sorted(run.records, key=lambda r: int(r.request_id.split("-")[1]))
    for record, fault in zip(by_number, drawn, strict=True):
        assert record.error_kind == (CLIENT_KIND[fault.kind] if fault else "")
        assert record.ok == (record.error_kind == "")
        if not record.ok:
            assert record.error_message
        kind = fault.kind if fault else ""
        if kind == "disconnect":  # cut after the chunk that brought the 2nd token
            assert record.output_tokens == 2 and record.status_code == 200
        elif kind == "malformed":  # the 2nd chunk was not JSON: one good chunk before it
            assert record.chunks == 1
        elif kind == "stall":  # the client gave up 0.8 s after its first chunk
            assert record.chunks == 1
            assert record.e2e_s == pytest.approx(record.first_token_s + 0.8)
        elif kind == "slow_first_byte":  # held 0.3 s from arrival, then everything flows
            assert record.ttft_s >= 0.3 - 1e-9 and record.output_tokens == 8
        elif kind.startswith("http"):
            assert record.status_code == int(kind[4:]) and record.chunks == 0
    # the engine let go of every request: the run ends with nothing running
    assert run.info.extra["preemptions"] == 0


@pytest.mark.slow
def test_faulty_virtual_run_classifies_like_the_real_client(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    sim_args = ["--model", "qwen2.5-0.5b", "--gpu", "h100-sxm", "--output-len", "fixed:8",
                "--trace", str(trace), "--seed", "3",
                *(f"--fault={f}" for f in FAULTS)]  # fmt: skip
    with simulator(sim_args, tmp_path / "sim.log") as url:
        out = run_locust([
            "-f", "locust_llm/client/sweep_locustfile.py", "--host", url, "--headless",
            "--only-summary", "--stop-timeout", "10s", "--llm-run-dir", str(tmp_path / "run"),
            "--llm-concurrency", "8", "--llm-stage-requests", "160", "--llm-max-tokens", "8",
            "--llm-input-len", "32", "--llm-read-timeout", "0.8", "--llm-server-metrics", "none",
        ], timeout=120)  # fmt: skip
    assert out.returncode in (0, 1), out.stdout[-3000:]
    real = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    served = len(trace.read_text().splitlines())
    virtual = simulate(faulty_config(), faulty_workload(requests=served))
    assert Counter(real.error_kind) == Counter(r.error_kind for r in virtual.records)
    real_status = Counter(zip(real.error_kind, real.status_code, strict=True))
    assert real_status == Counter((r.error_kind, r.status_code) for r in virtual.records)


def test_a_stall_shorter_than_the_read_timeout_only_delays_the_tokens() -> None:
    stall = Fault("stall", 1.0, 0.5)
    stream = VirtualStream(0.0, stall, output_tokens=4, read_timeout_s=0.8)
    for t in (0.1, 0.2, 0.3, 0.7):
        assert stream.token(t) is None
    assert stream.chunk_times == [0.1, 0.6, 0.6, 0.7] and stream.complete
    slow = VirtualStream(0.0, stall, output_tokens=4, read_timeout_s=0.4)
    for t in (0.1, 0.2, 0.3, 0.7):
        assert slow.token(t) is None  # held past the deadline: nothing reaches the client
    assert slow.doomed and slow.chunk_times == [0.1]
    ended = slow.timed_out(0.5)
    assert ended is not None and ended.kind == "timeout" and ended.at_s == pytest.approx(0.5)


def test_a_queue_longer_than_the_read_timeout_is_timeout_records() -> None:
    config = SimConfig(model="mistral-7b", gpu="rtx4090", num_gpu_blocks_override=400, seed=1)
    stage = StagePlan(concurrency=64, requests=64, max_sends=64)
    wl = VirtualWorkload(stages=(stage,), input_len="512", max_tokens="64", read_timeout_s=1.0)
    run = simulate(config, wl)
    kinds = Counter(r.error_kind for r in run.records)
    assert len(run.records) == 64 and kinds["timeout"] > 0 and kinds[""] > 0
    for r in run.records:
        if r.error_kind == "timeout":  # no byte for 1 s: before the first token, or between
            last = r.last_token_s if r.chunks else 0.0
            assert r.e2e_s == pytest.approx(last + 1.0)
        else:
            assert r.ttft_s <= 1.0 + 1e-9
    no_timeout = simulate(config, VirtualWorkload(**{**wl.__dict__, "read_timeout_s": math.inf}))
    assert all(r.ok for r in no_timeout.records)


def test_prefix_cache_in_virtual_time_serves_a_shared_prefix(tmp_path: Path) -> None:
    spec = "shared-prefix:groups=1,prefix=256,suffix=32"
    config = SimConfig(model="mistral-7b", gpu="rtx4090", seed=2)
    wl = VirtualWorkload(
        stages=(StagePlan(concurrency=1, requests=6, max_sends=6),),
        dataset=spec,
        max_tokens="16",
        ignore_eos=True,
    )
    run = simulate(config, wl)
    cached = [r.cached_tokens for r in sorted(run.records, key=lambda r: r.start_wall_s)]
    # the first request finds nothing; every later one finds the 256-token prefix's 16 blocks
    assert cached == [0] + [256] * 5
    assert all(r.input_tokens == 256 + 32 for r in run.records)
    # the same prompts without the cache: nothing cached, and a slower first token
    off = simulate(
        SimConfig(model="mistral-7b", gpu="rtx4090", seed=2, enable_prefix_caching=False), wl
    )
    assert [r.cached_tokens for r in off.records] == [0] * 6
    later = [r.ttft_s for r in sorted(run.records, key=lambda r: r.start_wall_s)[1:]]
    uncached = [r.ttft_s for r in sorted(off.records, key=lambda r: r.start_wall_s)[1:]]
    assert max(later) < min(uncached)
    # the run dir carries them: the report's prefix-cache figures read requests.parquet
    path = write_run_dir(run, tmp_path / "run")
    frame = pd.read_parquet(path / "requests.parquet")
    assert list(frame.sort_values("start_wall_s").cached_tokens) == cached


def test_random_prompts_share_no_block_and_four_users_see_each_others_prefix() -> None:
    config = SimConfig(model="mistral-7b", gpu="rtx4090", seed=2)
    stage = StagePlan(concurrency=4, requests=12, max_sends=12)
    random_run = simulate(
        config, VirtualWorkload(stages=(stage,), dataset="random", input_len="300")
    )
    assert [r.cached_tokens for r in random_run.records] == [0] * 12
    assert all(r.input_tokens == 300 for r in random_run.records)
    spec = "shared-prefix:groups=2,prefix=160,suffix=40"
    run = simulate(config, VirtualWorkload(stages=(stage,), dataset=spec, max_tokens="8"))
    hits = sum(r.cached_tokens for r in run.records)
    # each group's prefix is computed at most once per user racing for it, then served: at
    # least 12 - (2 groups x 4 users) prompts find their 160 tokens cached
    assert hits % 160 == 0 and 160 * 4 <= hits <= 160 * 11


def test_run_json_records_the_tensor_parallel_degree(tmp_path: Path) -> None:
    config = SimConfig(model="llama-3.1-70b", gpu="h100-sxm", tp=4, seed=1)
    wl = VirtualWorkload(stages=(StagePlan(concurrency=2, requests=4),), max_tokens="8")
    path = write_run_dir(simulate(config, wl), tmp_path / "run")
    info = read_run_info(path)
    assert info.roofline["tp"] == 4 and info.extra["tp"] == 4
    assert json.loads((path / "run.json").read_text())["roofline"]["tp"] == 4


def test_bad_dataset_and_timeout_are_one_clear_line() -> None:
    stage = (StagePlan(concurrency=1, requests=1),)
    with pytest.raises(InputError, match="read timeout"):
        simulate(SimConfig(), VirtualWorkload(stages=stage, read_timeout_s=0))
    with pytest.raises(InputError, match="no such file"):
        simulate(SimConfig(), VirtualWorkload(stages=stage, dataset="missing.jsonl"))
    with pytest.raises(InputError, match="not both"):
        simulate(SimConfig(), VirtualWorkload(stages=stage, dataset="random", lengths=((4, 4),)))
