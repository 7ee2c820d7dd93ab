"""Tensor parallelism and vLLM's memory layout in the simulator, against the roofline."""

from __future__ import annotations

import pytest

from locust_llm.errors import InputError
from locust_llm.roofline.floors import (
    GPU_PRESETS,
    INTERCONNECT_PRESETS,
    MODEL_PRESETS,
    Workload,
    allreduce_seconds,
    compute,
)
from locust_llm.sim.config import config_from_mapping
from locust_llm.sim.engine import Engine
from locust_llm.sim.gpu import SimGpuSource
from locust_llm.sim.metrics import SimMetrics, build_registry, render

LLAMA8B, LLAMA70B = MODEL_PRESETS["llama-3.1-8b"], MODEL_PRESETS["llama-3.1-70b"]
H100 = GPU_PRESETS["h100-sxm"]
IDEAL = {
    "bandwidth_efficiency": 1.0,
    "compute_efficiency": 1.0,
    "step_overhead_s": 0.0,
    "step_overhead_per_seq_s": 0.0,
}


def engine(**kw: object) -> Engine:
    return Engine(config_from_mapping({**IDEAL, **kw}))


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_one_stream_tpot_is_the_tp_roofline_floor(tp: int) -> None:
    eng = engine(model="llama-3.1-8b", gpu="h100-sxm", tp=tp)
    req = eng.add(16, 65)
    eng.run_until_idle()
    tpot = (req.finished_s - req.first_token_s) / (req.generated - 1)
    floor = compute(LLAMA8B, H100, Workload(context_tokens=48, tp=tp)).decode_step_floor_s
    assert tpot == pytest.approx(floor, rel=0.01)


def test_tp_splits_weights_and_adds_allreduce_time() -> None:
    one = compute(LLAMA70B, H100, Workload(context_tokens=0, tp=2))
    two = compute(LLAMA70B, H100, Workload(context_tokens=0, tp=4))
    assert two.weights_bytes_per_gpu == pytest.approx(one.weights_bytes_per_gpu / 2, rel=1e-3)
    # two all-reduces per layer, each the link latency plus 2(tp-1)/tp of hidden x 2 bytes
    link = INTERCONNECT_PRESETS["nvlink"]
    per = link.latency_s + 2 * 3 / 4 * LLAMA70B.hidden_size * 2 / link.bandwidth_bytes_s
    assert two.decode_allreduce_time_s == pytest.approx(2 * 80 * per)
    assert allreduce_seconds(LLAMA70B, 1, 1, link) == 0
    pcie = compute(LLAMA70B, H100, Workload(context_tokens=0, tp=4, interconnect="pcie"))
    assert pcie.decode_allreduce_time_s > two.decode_allreduce_time_s
    assert pcie.decode_step_floor_s > two.decode_step_floor_s


def test_a_model_that_does_not_fit_names_the_smallest_tp_or_precision() -> None:
    with pytest.raises(InputError) as exc:
        engine(model="llama-3.1-70b", gpu="h100-sxm")
    text = str(exc.value)
    assert "--tp 2" in text and "8-bit weights" in text and "raise it" not in text
    eng = engine(model="llama-3.1-70b", gpu="h100-sxm", tp=2)  # the advice works
    assert eng.total_blocks > 0


def test_invalid_tp_degree_is_refused() -> None:
    with pytest.raises(InputError, match="attention heads"):
        engine(model="llama-3.1-8b", gpu="h100-sxm", tp=3)


def test_block_override_beyond_device_memory_is_refused() -> None:
    with pytest.raises(InputError, match=r"--num-gpu-blocks-override 1000000: .* at most \d+"):
        engine(num_gpu_blocks_override=1_000_000)
    assert engine(num_gpu_blocks_override=1000).total_blocks == 1000


def test_kv_pool_is_preallocated_and_gpus_report_per_shard() -> None:
    eng = engine(model="llama-3.1-70b", gpu="h100-sxm", tp=4)
    clock = [0.0]
    source = SimGpuSource(eng, clock=lambda: clock[0])
    idle = source.read().gpus
    assert [g.index for g in idle] == [0, 1, 2, 3] and len({g.uuid for g in idle}) == 4
    # weights + reserve + the whole pool: gpu_memory_utilization of the device, flat
    assert idle[0].memory_used_bytes == pytest.approx(0.9 * H100.memory_bytes, rel=0.002)
    reqs = [eng.add(2000, 50) for _ in range(8)]
    eng.step()
    clock[0] = eng.clock_s
    busy = source.read().gpus
    assert eng.kv_usage_ratio > 0
    assert all(g.memory_used_bytes == idle[0].memory_used_bytes for g in busy)
    text = render(build_registry(eng, SimMetrics(), "m", source)).decode()
    assert text.count("nvml_memory_used_bytes{") == 4
    usage = [x for x in text.splitlines() if x.startswith("vllm:kv_cache_usage_perc")]
    old = [x for x in text.splitlines() if x.startswith("vllm:gpu_cache_usage_perc")]
    assert float(usage[0].split()[-1]) == float(old[0].split()[-1]) == eng.kv_usage_ratio
    assert reqs[0].computed > 0
