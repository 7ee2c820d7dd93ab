"""Name maps: every vocabulary's text -> canonical signals, units converted, priorities kept."""

from __future__ import annotations

import math

import pytest
from test_telemetry_fakes import GIB, FakeExporter, exporter_text

from locust_llm.errors import InputError
from locust_llm.telemetry.signals import signal_docs
from locust_llm.telemetry.vocabularies import (
    extract_signals,
    known_metrics,
    map_samples,
    metric_maps,
    spoken_vocabularies,
)


def as_dict(text: str) -> dict[tuple[str, str], float]:
    return {(signal, gpu): value for signal, gpu, value in extract_signals(text)}


def test_every_mapped_signal_is_canonical() -> None:
    assert {m.signal for _, m in metric_maps()} <= set(signal_docs())
    vocabularies = {v for v, _ in metric_maps()}
    assert vocabularies == {"ours", "dcgm", "vllm", "sglang", "tgi", "llamacpp", "sim"}
    assert len(known_metrics()) == len(set(known_metrics()))


def test_ours_base_units_per_gpu() -> None:
    text = """# TYPE nvml_gpu_utilization_ratio gauge
nvml_gpu_utilization_ratio{gpu="0",uuid="GPU-a"} 0.75
nvml_gpu_utilization_ratio{gpu="1",uuid="GPU-b"} 0.5
nvml_memory_used_bytes{gpu="0",uuid="GPU-a"} 1.5e10
nvml_memory_total_bytes{gpu="0",uuid="GPU-a"} 8.0e10
nvml_power_usage_watts{gpu="1",uuid="GPU-b"} 312.5
nvml_dram_bandwidth_utilization_ratio{gpu="0",uuid="GPU-a"} 0.62
nvml_host_cpu_utilization_ratio 0.125
nvml_temperature_celsius{gpu="0",uuid="GPU-a"} 61
"""
    assert as_dict(text) == {
        ("gpu_util", "0"): 0.75,
        ("gpu_util", "1"): 0.5,
        ("mem_used_bytes", "0"): 1.5e10,
        ("mem_total_bytes", "0"): 8.0e10,
        ("power_w", "1"): 312.5,
        ("dram_bw_util", "0"): 0.62,
        ("host_cpu_util", ""): 0.125,
    }


def test_dcgm_percent_and_mib_converted_total_derived() -> None:
    text = """# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a",modelName="H100"} 87
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",modelName="H100"} 20480
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-a",modelName="H100"} 59392
DCGM_FI_DEV_FB_RESERVED{gpu="0",UUID="GPU-a",modelName="H100"} 512
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",modelName="H100"} 401.2
DCGM_FI_PROF_DRAM_ACTIVE{gpu="0",UUID="GPU-a",modelName="H100"} 0.41
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-a",modelName="H100"} 0.66
"""
    got = as_dict(text)
    assert got[("gpu_util", "0")] == pytest.approx(0.87)  # GPU_UTIL outranks GR_ENGINE_ACTIVE
    assert got[("mem_used_bytes", "0")] == 20 * GIB
    assert got[("mem_total_bytes", "0")] == (20480 + 59392 + 512) * 1024**2
    assert got[("power_w", "0")] == 401.2
    assert got[("dram_bw_util", "0")] == 0.41
    assert len(got) == 5


def test_dcgm_gr_engine_active_when_no_gpu_util_and_no_total_without_free() -> None:
    text = 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="3"} 0.3\nDCGM_FI_DEV_FB_USED{gpu="3"} 100\n'
    assert as_dict(text) == {("gpu_util", "3"): 0.3, ("mem_used_bytes", "3"): 100 * 1024**2}


def test_vllm_v1_and_legacy_names_counters_summed_over_engines() -> None:
    text = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 12
vllm:num_requests_running{engine="1",model_name="m"} 8
vllm:num_requests_waiting{engine="0",model_name="m"} 3
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.4
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.99
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="m"} 5
vllm:num_preemptions_total{engine="1",model_name="m"} 2
vllm:generation_tokens_total{engine="0",model_name="m"} 1234
"""
    assert as_dict(text) == {
        ("running", ""): 20.0,
        ("waiting", ""): 3.0,
        ("kv_cache_usage", ""): pytest.approx(0.5),  # the current name wins and is averaged
        ("preemptions", ""): 7.0,
        ("generation_tokens_total", ""): 1234.0,
    }
    legacy = 'vllm:gpu_cache_usage_perc{model_name="m"} 0.25\n'
    assert as_dict(legacy) == {("kv_cache_usage", ""): 0.25}


def test_sglang() -> None:
    text = """sglang:num_running_reqs{model_name="m"} 6
sglang:num_queue_reqs{model_name="m"} 2
sglang:token_usage{model_name="m"} 0.28
# TYPE sglang:num_retracted_requests counter
sglang:num_retracted_requests_total{model_name="m"} 4
sglang:cache_hit_rate{model_name="m"} 0.5
"""
    assert as_dict(text) == {
        ("running", ""): 6.0,
        ("waiting", ""): 2.0,
        ("kv_cache_usage", ""): 0.28,
        ("preemptions", ""): 4.0,
    }


def test_tgi() -> None:
    text = "tgi_batch_current_size 16\ntgi_queue_size 5\ntgi_batch_current_max_tokens 4096\n"
    assert as_dict(text) == {("running", ""): 16.0, ("waiting", ""): 5.0}


def test_llamacpp() -> None:
    text = """# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
llamacpp:requests_deferred 1
llamacpp:kv_cache_usage_ratio 0.63
llamacpp:tokens_predicted_total 5000
"""
    assert as_dict(text) == {
        ("running", ""): 2.0,
        ("waiting", ""): 1.0,
        ("kv_cache_usage", ""): 0.63,
        ("generation_tokens_total", ""): 5000.0,
    }
    assert spoken_vocabularies(text) == {"llamacpp"}


@pytest.mark.parametrize("phase", [0, 4, 7])
def test_ours_and_dcgm_give_the_same_signals(phase: int) -> None:
    ours = as_dict(exporter_text(FakeExporter("ours", phase=phase)))
    dcgm = as_dict(exporter_text(FakeExporter("dcgm", phase=phase)))
    ours.pop(("host_cpu_util", ""))  # dcgm-exporter has no host CPU
    assert set(ours) == set(dcgm)
    for key, value in ours.items():
        assert dcgm[key] == pytest.approx(value, rel=1e-9), key


def test_nan_stays_nan_and_unknown_names_are_ignored() -> None:
    text = 'nvml_power_usage_watts{gpu="0"} NaN\nsomething_else 3\n'
    (row,) = extract_signals(text)
    assert row[:2] == ("power_w", "0") and math.isnan(row[2])
    assert extract_signals("") == []


def test_map_samples_takes_tuples() -> None:
    samples = [("tgi_queue_size", {"instance": "x"}, 2.0), ("tgi_queue_size", {}, 3.0)]
    assert map_samples(samples) == [("waiting", "", 5.0)]


def test_not_prometheus_text_is_one_line_input_error() -> None:
    with pytest.raises(InputError, match="not Prometheus text") as info:
        extract_signals("<html><body>Not here</body></html>\n")
    assert "\n" not in str(info.value)


def test_prefilter_keeps_known_lines_and_rejects_non_metric_lines() -> None:
    text = """# HELP vllm:e2e_request_latency_seconds a { brace } in help
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="0.5",model_name="a{b} c"} 3
  vllm:num_requests_waiting{model_name="a{b} c"} 9

vllm:num_requests_running 2 1700000000000
"""
    assert as_dict(text) == {("waiting", ""): 9.0, ("running", ""): 2.0}
    with pytest.raises(InputError, match="bad line"):
        extract_signals("vllm:num_requests_running 1\n<p>oops</p>\n")


def test_vllm_label_filtered_series_feed_their_own_signals() -> None:
    text = """vllm:num_requests_waiting{engine="0"} 5
vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 4
vllm:num_requests_waiting_by_reason{engine="0",reason="deferred"} 1
vllm:request_success_total{engine="0",finished_reason="length"} 30
vllm:request_success_total{engine="0",finished_reason="stop"} 2
vllm:request_success_total{engine="0",finished_reason="repetition"} 7
vllm:prompt_tokens_cached_total{engine="0"} 64
vllm:prefix_cache_hits_total{engine="0"} 48
vllm:estimated_flops_per_gpu_total{engine="0"} 1.5e12
"""
    got = as_dict(text)
    assert got[("waiting", "")] == 5
    assert got[("waiting_capacity", "")] == 4
    assert got[("waiting_deferred", "")] == 1
    assert got[("finished_length", "")] == 30
    assert got[("finished_stop", "")] == 2
    assert ("finished_abort", "") not in got  # no series: no data, never 0
    assert got[("prompt_tokens_cached_total", "")] == 64  # v1's counter before the older one
    assert got[("server_flops_total", "")] == 1.5e12
    assert spoken_vocabularies(text) == {"vllm"}
    assert "vllm:num_requests_waiting_by_reason" in known_metrics()
