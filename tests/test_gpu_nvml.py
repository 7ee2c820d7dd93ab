"""NvmlSource + GpuCollector against a fake pynvml: units, omissions, failures, GPM, PCIe."""

from __future__ import annotations

import logging

import pytest
from fake_pynvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_SUPPORTED,
    Err,
    FakeDevice,
    FakePynvml,
)
from prometheus_client import CollectorRegistry

from locust_llm.gpu.collector import GpuCollector
from locust_llm.gpu.nvml_source import NvmlSource, NvmlUnavailable, cuda_version_text

L0 = {"gpu": "0", "uuid": "GPU-11111111"}


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def serve(nvml: FakePynvml, clock: Clock | None = None) -> tuple[CollectorRegistry, NvmlSource]:
    source = NvmlSource(nvml, clock=clock or Clock())
    registry = CollectorRegistry()
    registry.register(GpuCollector(source))
    return registry, source


def test_every_metric_present_in_base_units() -> None:
    registry, _ = serve(FakePynvml())
    v = registry.get_sample_value
    assert v("nvml_up") == 1.0
    assert v("nvml_gpu_utilization_ratio", L0) == pytest.approx(0.87)  # % -> ratio
    assert v("nvml_memory_utilization_ratio", L0) == pytest.approx(0.42)
    assert v("nvml_memory_used_bytes", L0) == 50 * 1024**3  # NVML already gives bytes
    assert v("nvml_memory_total_bytes", L0) == 141 * 1024**3
    assert v("nvml_power_usage_watts", L0) == pytest.approx(312.5)  # mW -> W
    assert v("nvml_energy_consumption_joules_total", L0) == pytest.approx(1234.567)  # mJ -> J
    assert v("nvml_temperature_celsius", L0) == 61.0
    assert v("nvml_sm_clock_hertz", L0) == 1980e6  # MHz -> Hz
    assert v("nvml_memory_clock_hertz", L0) == 2619e6
    # no PCIe byte counters on this fake: falls back to throughput, KiB/s -> B/s
    assert v("nvml_pcie_rx_bytes_per_second", L0) == 2000 * 1024
    assert v("nvml_pcie_tx_bytes_per_second", L0) == 1000 * 1024
    assert v("nvml_throttle_reason_active", {**L0, "reason": "sw_power_cap"}) == 1.0
    assert v("nvml_throttle_reason_active", {**L0, "reason": "gpu_idle"}) == 1.0
    assert v("nvml_throttle_reason_active", {**L0, "reason": "hw_slowdown"}) == 0.0
    info = {**L0, "name": "NVIDIA H200", "driver_version": "550.54.15", "cuda_version": "12.4"}
    assert v("nvml_gpu_info", info) == 1.0
    assert v("nvml_scrape_duration_seconds") >= 0.0


def test_gpm_needs_two_scrapes_and_keeps_previous_sample() -> None:
    nvml = FakePynvml()
    registry, source = serve(nvml)
    v = registry.get_sample_value
    assert v("nvml_dram_bandwidth_utilization_ratio", L0) is None  # one sample only so far
    assert v("nvml_dram_bandwidth_utilization_ratio", L0) == pytest.approx(0.55)
    assert v("nvml_sm_activity_ratio", L0) == pytest.approx(0.90)
    assert v("nvml_sm_occupancy_ratio", L0) == pytest.approx(0.40)
    assert v("nvml_tensor_activity_ratio", L0) == pytest.approx(0.70)
    assert nvml.calls.count("gpm_sample") == 5  # one GPM sample per scrape (5 so far), no more
    assert nvml.gpm_allocated == 2
    source.close()
    assert nvml.gpm_allocated == 0 and nvml.initialised == 0


def test_pre_hopper_gpu_has_no_gpm_metrics_and_no_gpm_calls() -> None:
    nvml = FakePynvml([FakeDevice(gpm=False)])
    registry, _ = serve(nvml)
    for _ in range(2):
        assert registry.get_sample_value("nvml_dram_bandwidth_utilization_ratio", L0) is None
    assert "gpm_sample" not in nvml.calls and nvml.gpm_allocated == 0
    assert registry.get_sample_value("nvml_gpu_utilization_ratio", L0) == pytest.approx(0.87)


def test_unsupported_metric_is_omitted_logged_once_and_not_called_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nvml = FakePynvml([FakeDevice(power_mw=Err(NVML_ERROR_NOT_SUPPORTED))])
    registry, _ = serve(nvml)
    with caplog.at_level(logging.INFO, logger="locust_llm.gpu.nvml_source"):
        for _ in range(3):
            assert registry.get_sample_value("nvml_power_usage_watts", L0) is None
            assert registry.get_sample_value("nvml_up") == 1.0
    assert nvml.calls.count("power") == 1
    assert len([r for r in caplog.records if "power not supported" in r.getMessage()]) == 1
    assert registry.get_sample_value("nvml_temperature_celsius", L0) == 61.0


def test_transient_metric_error_omits_that_scrape_only(caplog: pytest.LogCaptureFixture) -> None:
    device = FakeDevice(temperature_c=Err(NVML_ERROR_NO_PERMISSION))
    registry, _ = serve(FakePynvml([device]))
    with caplog.at_level(logging.WARNING, logger="locust_llm.gpu.nvml_source"):
        assert registry.get_sample_value("nvml_temperature_celsius", L0) is None
        assert registry.get_sample_value("nvml_temperature_celsius", L0) is None
    assert len([r for r in caplog.records if "temperature" in r.getMessage()]) == 1
    device.temperature_c = 70
    assert registry.get_sample_value("nvml_temperature_celsius", L0) == 70.0


def test_nvml_failure_at_scrape_time_gives_up_0_then_recovers() -> None:
    nvml = FakePynvml()
    registry, _ = serve(nvml)
    assert registry.get_sample_value("nvml_up") == 1.0
    nvml.fail_all = NVML_ERROR_GPU_IS_LOST
    assert registry.get_sample_value("nvml_up") == 0.0  # the scrape still answers
    assert registry.get_sample_value("nvml_scrape_duration_seconds") is not None
    assert registry.get_sample_value("nvml_gpu_utilization_ratio", L0) is None
    nvml.fail_all = None
    assert registry.get_sample_value("nvml_up") == 1.0  # re-initialised
    assert registry.get_sample_value("nvml_gpu_utilization_ratio", L0) == pytest.approx(0.87)
    assert nvml.initialised == 1


def test_pcie_byte_counters_give_a_rate_over_the_scrape_interval() -> None:
    device = FakeDevice(pcie_counters=(1_000, 5_000))
    clock = Clock()
    registry, _ = serve(FakePynvml([device]), clock)
    assert registry.get_sample_value("nvml_pcie_rx_bytes_per_second", L0) is None  # no interval yet
    device.pcie_counters = (3_000, 25_000)
    clock.t += 2.0
    assert registry.get_sample_value("nvml_pcie_tx_bytes_per_second", L0) == 1_000.0
    # the previous call took a reading too; no time has passed since, so no rate
    device.pcie_counters = (3_000, 45_000)
    clock.t += 4.0
    assert registry.get_sample_value("nvml_pcie_rx_bytes_per_second", L0) == 5_000.0


def test_older_throttle_function_used_when_driver_lacks_the_newer_one() -> None:
    nvml = FakePynvml([FakeDevice(throttle_current=Err(NVML_ERROR_FUNCTION_NOT_FOUND))])
    nvml.nvmlDeviceGetCurrentClocksThrottleReasons = lambda d: 0x008  # type: ignore[attr-defined]
    registry, _ = serve(nvml)
    reason = {**L0, "reason": "hw_slowdown"}
    assert registry.get_sample_value("nvml_throttle_reason_active", reason) == 1.0


def test_throttle_reasons_limited_to_supported_bits() -> None:
    registry, _ = serve(FakePynvml([FakeDevice(throttle_supported=0x004)]))
    v = registry.get_sample_value
    assert v("nvml_throttle_reason_active", {**L0, "reason": "sw_power_cap"}) == 1.0
    assert v("nvml_throttle_reason_active", {**L0, "reason": "gpu_idle"}) is None


def test_two_gpus_are_labelled_by_index_and_uuid() -> None:
    nvml = FakePynvml([FakeDevice(), FakeDevice(uuid="GPU-2222", util_gpu=10)])
    registry, _ = serve(nvml)
    labels = {"gpu": "1", "uuid": "GPU-2222"}
    assert registry.get_sample_value("nvml_gpu_utilization_ratio", labels) == pytest.approx(0.10)
    assert registry.get_sample_value("nvml_gpu_utilization_ratio", L0) == pytest.approx(0.87)


def test_no_driver_at_start_is_nvml_unavailable() -> None:
    with pytest.raises(NvmlUnavailable, match="failed to start"):
        NvmlSource(FakePynvml(init_error=NVML_ERROR_DRIVER_NOT_LOADED))


def test_cuda_version_text() -> None:
    assert cuda_version_text(12040) == "12.4"
    assert cuda_version_text(11080) == "11.8"
