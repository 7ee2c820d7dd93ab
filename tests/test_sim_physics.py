"""Physics of the simulated engine, stepped directly (no sleeping), plus one real-time check."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from locust_llm.roofline.floors import GPU_PRESETS, MODEL_PRESETS, Workload, compute
from locust_llm.sim.engine import Engine
from locust_llm.sim.gpu import SimGpuSource
from locust_llm.sim.metrics import SimMetrics, build_registry, render
from locust_llm.sim.testing import ideal_engine, running_sim, tpot
from locust_llm.sim.trace import read_trace

MISTRAL, RTX4090 = MODEL_PRESETS["mistral-7b"], GPU_PRESETS["rtx4090"]
engine = ideal_engine


def test_single_stream_tpot_is_the_roofline_floor() -> None:
    eng = engine()
    req = eng.add(16, 65)
    eng.run_until_idle()
    floor = compute(MISTRAL, RTX4090, Workload(context_tokens=48, batch=1)).decode_step_floor_s
    assert tpot(req) == pytest.approx(floor, rel=0.02)
    assert tpot(req) == pytest.approx(0.0141, rel=0.02)  # the seed's 14.1 ms


def decode_tpot(batch: int, context: int, **kw: object) -> tuple[float, float]:
    """(mean TPOT, tokens/s) of ``batch`` equal requests decoding 32 tokens after ``context``."""
    eng = engine(max_num_seqs=4096, max_num_batched_tokens=1 << 20, **kw)
    reqs = [eng.add(context, 33) for _ in range(batch)]
    eng.step()  # the prefill (and first token) of everyone
    start = eng.clock_s
    eng.run_until_idle()
    return sum(tpot(r) for r in reqs) / batch, batch * 32 / (eng.clock_s - start)


def test_tpot_grows_with_batch_by_the_kv_term() -> None:
    context = 2000
    t1, _ = decode_tpot(1, context)
    t16, _ = decode_tpot(16, context)
    kv_per_seq = MISTRAL.kv_bytes_per_token * (context + 16 + 1)  # mean context over the decode
    extra_weights = 15 * MISTRAL.hidden_size * MISTRAL.weight_bytes_per_param  # embedding rows
    predicted = (15 * kv_per_seq + extra_weights) / RTX4090.memory_bandwidth_bytes_s
    assert t16 > t1
    assert t16 - t1 == pytest.approx(predicted, rel=0.02)


def test_throughput_flattens_when_compute_bound() -> None:
    big = {"gpu": "h100-sxm"}  # 2048 sequences need more KV than an rtx4090 holds
    tps = {b: decode_tpot(b, 16, **big)[1] for b in (1, 8, 256, 1024, 2048)}
    assert tps[8] / tps[1] > 7  # memory-bound: a bigger batch is nearly free
    assert tps[2048] / tps[1024] < 1.1  # compute-bound: doubling the batch gains < 10 %
    assert tps[1024] / tps[256] < 2.5


def closed_loop(concurrency: int, requests: int, **kw: object) -> tuple[float, Engine]:
    """Output tokens/s of a closed loop of ``concurrency`` clients on virtual time."""
    eng = engine(**kw)
    live = [eng.add(256, 128) for _ in range(concurrency)]
    sent = len(live)
    while eng.has_work:
        for _ in eng.step().finished:
            if sent < requests:
                eng.add(256, 128)
                sent += 1
    return eng.stats.generation_tokens_total / eng.clock_s, eng


def test_kv_bound_throughput_flattens_and_preempts() -> None:
    blocks = 24 * 24  # 24 sequences of 384 tokens
    tps8, e8 = closed_loop(8, 48, num_gpu_blocks_override=blocks)
    tps24, _ = closed_loop(24, 144, num_gpu_blocks_override=blocks)
    tps96, e96 = closed_loop(96, 576, num_gpu_blocks_override=blocks)
    assert tps24 > 2 * tps8
    assert tps96 < 1.15 * tps24  # 4x the clients, no more throughput
    assert e8.stats.preemptions_total == 0 and e96.stats.preemptions_total > 0


def test_preemptions_and_simulated_gpu_in_metrics() -> None:
    _, eng = closed_loop(64, 128, num_gpu_blocks_override=200)
    clock = [0.0]
    source = SimGpuSource(eng, clock=lambda: clock[0])
    text = render(build_registry(eng, SimMetrics(), "m", source)).decode()
    line = next(x for x in text.splitlines() if x.startswith("vllm:num_preemptions_total"))
    assert float(line.split()[-1]) == eng.stats.preemptions_total > 0
    # a second interval, fully busy: utilization 1, bandwidth = bytes / (bw x interval)
    before_bytes = eng.stats.bytes_total
    for _ in range(3):
        eng.add(64, 40)
    t0 = eng.clock_s
    clock[0] = t0
    source.read()  # start the interval at the engine clock
    while eng.has_work:
        eng.step()
    clock[0] = eng.clock_s
    gpu = source.read().gpus[0]
    assert gpu.utilization_ratio == pytest.approx(1.0)
    moved = eng.stats.bytes_total - before_bytes
    assert gpu.dram_bandwidth_utilization_ratio == pytest.approx(
        moved / (RTX4090.memory_bandwidth_bytes_s * (eng.clock_s - t0)), rel=1e-6
    )
    # the KV pool is preallocated: memory in use is the same busy or idle
    pool = eng.total_blocks * eng.block_bytes
    assert gpu.memory_used_bytes == pytest.approx(MISTRAL.weights_bytes + 1024**3 + pool)
    assert gpu.power_watts == pytest.approx(RTX4090.tdp_watts)
    clock[0] += 1.0  # an idle second
    idle = source.read().gpus[0]
    assert idle.utilization_ratio == 0 and idle.power_watts == pytest.approx(RTX4090.idle_watts)


def test_real_time_steps_follow_the_physics(tmp_path) -> None:
    trace = tmp_path / "trace.jsonl"
    with running_sim(trace_path=str(trace), step_overhead_s=0.0) as url:
        body = json.dumps(
            {
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 40,
                "ignore_eos": True,
                "stream": True,
            }
        ).encode()
        req = urllib.request.Request(
            url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        t0 = time.time()
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()
        wall = time.time() - t0
    (record,) = read_trace(trace)
    eng = engine(bandwidth_efficiency=0.85, compute_efficiency=0.6)
    sim = eng.add(record["prompt_tokens"], 40)
    eng.run_until_idle()
    expected = tpot(sim)  # ~16.6 ms at 85 % of the bandwidth
    measured = (record["last_token"] - record["first_token"]) / 39
    assert measured == pytest.approx(expected, rel=0.10)
    assert wall >= sim.finished_s * 0.95  # no faster than the physics allows
    assert record["tokens_sent"] == 40 and record["outcome"] == "ok"


def test_simulated_gpu_counts_only_the_elapsed_part_of_a_step() -> None:
    eng = engine()
    clock = [0.0]
    source = SimGpuSource(eng, clock=lambda: clock[0])
    eng.add(2048, 1)  # one long prefill step
    eng.step(0.0)
    duration = eng.stats.last_step_duration_s
    assert duration > 0.05
    clock[0] = duration / 2  # half-way through the step: the GPU has been busy all along
    assert source.read().gpus[0].utilization_ratio == pytest.approx(1.0)
    clock[0] = duration  # the rest of the step lands in the next sample
    half = source.read().gpus[0]
    assert half.utilization_ratio == pytest.approx(1.0)
    assert half.dram_bandwidth_utilization_ratio == pytest.approx(
        eng.stats.last_step_bytes / 2 / (RTX4090.memory_bandwidth_bytes_s * duration / 2)
    )
