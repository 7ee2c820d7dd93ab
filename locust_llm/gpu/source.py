"""What a GPU source hands the exporter's Collector: one sample per device, per scrape.

A source is anything with ``read() -> HostSample`` (see :class:`GpuSource`). Sources: ``nvml``
(nvidia-ml-py), ``fake`` (deterministic, scriptable), ``replay`` (a CSV timeline) and the
simulator's own (``locust_llm.sim``). A field left ``None`` means the device does not support
that metric: the Collector omits it (never reports 0). Units are base units, already converted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(slots=True)
class GpuSample:
    """One device at one instant. ``None`` = not supported / not available on this device."""

    index: int
    uuid: str
    name: str = ""
    utilization_ratio: float | None = None  # kernel busy time, 0..1
    memory_utilization_ratio: float | None = None  # memory-controller busy time, 0..1
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    power_watts: float | None = None
    energy_joules_total: float | None = None
    temperature_celsius: float | None = None
    sm_clock_hertz: float | None = None
    memory_clock_hertz: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    pcie_tx_bytes_per_second: float | None = None
    throttle_reasons: dict[str, bool] | None = None  # reason name -> active
    # GPM (Hopper and newer): ratios over the interval since the previous sample
    dram_bandwidth_utilization_ratio: float | None = None
    sm_activity_ratio: float | None = None
    sm_occupancy_ratio: float | None = None
    tensor_activity_ratio: float | None = None


@dataclass(slots=True)
class HostSample:
    """Everything one scrape reads: the devices plus the host the exporter runs on."""

    gpus: list[GpuSample] = field(default_factory=list)
    driver_version: str = ""
    cuda_version: str = ""
    host_cpu_utilization_ratio: float | None = None
    host_memory_used_bytes: float | None = None
    host_memory_total_bytes: float | None = None


class GpuSource(Protocol):
    """A source of samples. ``read`` may raise; the Collector then reports ``nvml_up 0``."""

    def read(self) -> HostSample: ...
