"""GpuCollector with plain sources: omission of None, nvml_up on failure, per-family guards."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, generate_latest

from locust_llm.gpu.collector import GpuCollector
from locust_llm.gpu.names import GPU_METRICS
from locust_llm.gpu.source import GpuSample, HostSample


class StaticSource:
    def __init__(self, sample: HostSample | Exception) -> None:
        self.sample = sample
        self.reads = 0

    def read(self) -> HostSample:
        self.reads += 1
        if isinstance(self.sample, Exception):
            raise self.sample
        return self.sample


def registry_for(source: StaticSource) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(GpuCollector(source))
    return registry


def test_registering_does_not_read_the_source() -> None:
    source = StaticSource(HostSample())
    registry_for(source)
    assert source.reads == 0


def test_none_fields_are_left_out_never_zero() -> None:
    gpu = GpuSample(0, "GPU-a", utilization_ratio=0.0, power_watts=None)
    registry = registry_for(StaticSource(HostSample(gpus=[gpu])))
    labels = {"gpu": "0", "uuid": "GPU-a"}
    assert registry.get_sample_value("nvml_gpu_utilization_ratio", labels) == 0.0  # a real 0
    assert registry.get_sample_value("nvml_power_usage_watts", labels) is None
    text = generate_latest(registry).decode()
    assert "nvml_power_usage_watts" not in text  # no empty family either
    assert "nvml_host_cpu_utilization_ratio" not in text


def test_nan_is_missing_data() -> None:
    gpu = GpuSample(0, "GPU-a", temperature_celsius=math.nan)
    registry = registry_for(StaticSource(HostSample(gpus=[gpu])))
    labels = {"gpu": "0", "uuid": "GPU-a"}
    assert registry.get_sample_value("nvml_temperature_celsius", labels) is None


def test_every_table_metric_is_served_when_the_source_has_it() -> None:
    values = {m.field: 0.25 for m in GPU_METRICS}
    gpu = GpuSample(3, "GPU-x", name="H", **values)
    sample = HostSample(
        gpus=[gpu],
        host_cpu_utilization_ratio=0.5,
        host_memory_used_bytes=1e9,
        host_memory_total_bytes=4e9,
    )
    registry = registry_for(StaticSource(sample))
    for metric in GPU_METRICS:
        assert registry.get_sample_value(metric.sample_name, {"gpu": "3", "uuid": "GPU-x"}) == 0.25
    assert registry.get_sample_value("nvml_host_cpu_utilization_ratio") == 0.5
    assert registry.get_sample_value("nvml_host_memory_used_bytes") == 1e9
    assert registry.get_sample_value("nvml_host_memory_total_bytes") == 4e9


def test_source_failure_answers_with_up_0() -> None:
    registry = registry_for(StaticSource(RuntimeError("driver gone")))
    text = generate_latest(registry).decode()
    assert "nvml_up 0.0" in text
    assert registry.get_sample_value("nvml_scrape_duration_seconds") >= 0.0
    assert "nvml_gpu_utilization_ratio" not in text


def test_one_bad_value_costs_only_its_family() -> None:
    gpu = GpuSample(0, "GPU-a", utilization_ratio="garbage", power_watts=100.0)  # type: ignore[arg-type]
    registry = registry_for(StaticSource(HostSample(gpus=[gpu])))
    labels = {"gpu": "0", "uuid": "GPU-a"}
    assert registry.get_sample_value("nvml_gpu_utilization_ratio", labels) is None
    assert registry.get_sample_value("nvml_power_usage_watts", labels) == 100.0
    assert registry.get_sample_value("nvml_up") == 1.0


def test_scrape_duration_uses_the_clock() -> None:
    ticks = iter([10.0, 10.25])
    registry = CollectorRegistry()
    registry.register(GpuCollector(StaticSource(HostSample()), clock=lambda: next(ticks)))
    assert registry.get_sample_value("nvml_scrape_duration_seconds") == 0.25
