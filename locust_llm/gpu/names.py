"""The exporter's metric names, in one table, with their dcgm-exporter equivalents.

Each :class:`GpuMetric` ties a :class:`~locust_llm.gpu.source.GpuSample` field to the Prometheus
name this exporter serves (``nvml_*``, base units) and to the name dcgm-exporter serves for the
same quantity (``DCGM_FI_*``) with the factor that turns dcgm's unit into ours. The Collector
builds its families from this table and the telemetry reader uses it to accept either exporter,
so users who already run dcgm-exporter need not run ours.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: labels every per-GPU metric carries (ours) -> the label dcgm-exporter uses for the same thing
GPU_LABELS: tuple[str, str] = ("gpu", "uuid")
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class GpuMetric:
    """One per-GPU metric: sample field, our name and unit, dcgm-exporter's name and unit factor.

    ``dcgm_scale`` multiplies a dcgm-exporter value into our unit (dcgm reports percent for
    ``GPU_UTIL``, MiB for ``FB_USED``, MHz for clocks, mJ for energy); ``None`` when dcgm-exporter
    has no equivalent. For counters ``name`` is the family name; the sample name adds ``_total``.
    """

    field: str
    name: str
    help: str
    kind: Literal["gauge", "counter"] = "gauge"
    dcgm: str | None = None
    dcgm_scale: float = 1.0
    gpm: bool = False  # needs GPM (Hopper and newer)

    @property
    def sample_name(self) -> str:
        """The name a scrape shows (counters end in ``_total``)."""
        return f"{self.name}_total" if self.kind == "counter" else self.name


GPU_METRICS: tuple[GpuMetric, ...] = (
    GpuMetric(
        "utilization_ratio",
        "nvml_gpu_utilization_ratio",
        "Fraction of the last sample period a kernel was running (0..1).",
        dcgm="DCGM_FI_DEV_GPU_UTIL",
        dcgm_scale=0.01,
    ),
    GpuMetric(
        "memory_utilization_ratio",
        "nvml_memory_utilization_ratio",
        "Fraction of the last sample period the memory controller was busy (0..1).",
        dcgm="DCGM_FI_DEV_MEM_COPY_UTIL",
        dcgm_scale=0.01,
    ),
    GpuMetric(
        "memory_used_bytes",
        "nvml_memory_used_bytes",
        "Device memory in use, bytes.",
        dcgm="DCGM_FI_DEV_FB_USED",
        dcgm_scale=MIB,
    ),
    GpuMetric(
        "memory_total_bytes",
        "nvml_memory_total_bytes",
        "Device memory in total, bytes.",
        dcgm="DCGM_FI_DEV_FB_TOTAL",
        dcgm_scale=MIB,
    ),
    GpuMetric(
        "power_watts",
        "nvml_power_usage_watts",
        "Power draw, watts.",
        dcgm="DCGM_FI_DEV_POWER_USAGE",
    ),
    GpuMetric(
        "energy_joules_total",
        "nvml_energy_consumption_joules",
        "Energy used since the driver was loaded, joules.",
        kind="counter",
        dcgm="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        dcgm_scale=0.001,
    ),
    GpuMetric(
        "temperature_celsius",
        "nvml_temperature_celsius",
        "GPU core temperature, degrees Celsius.",
        dcgm="DCGM_FI_DEV_GPU_TEMP",
    ),
    GpuMetric(
        "sm_clock_hertz",
        "nvml_sm_clock_hertz",
        "SM clock, hertz.",
        dcgm="DCGM_FI_DEV_SM_CLOCK",
        dcgm_scale=1e6,
    ),
    GpuMetric(
        "memory_clock_hertz",
        "nvml_memory_clock_hertz",
        "Memory clock, hertz.",
        dcgm="DCGM_FI_DEV_MEM_CLOCK",
        dcgm_scale=1e6,
    ),
    GpuMetric(
        "pcie_rx_bytes_per_second",
        "nvml_pcie_rx_bytes_per_second",
        "PCIe bytes received by the GPU per second.",
        dcgm="DCGM_FI_PROF_PCIE_RX_BYTES",
    ),
    GpuMetric(
        "pcie_tx_bytes_per_second",
        "nvml_pcie_tx_bytes_per_second",
        "PCIe bytes sent by the GPU per second.",
        dcgm="DCGM_FI_PROF_PCIE_TX_BYTES",
    ),
    GpuMetric(
        "dram_bandwidth_utilization_ratio",
        "nvml_dram_bandwidth_utilization_ratio",
        "DRAM bandwidth used over its peak since the previous scrape (GPM, 0..1).",
        dcgm="DCGM_FI_PROF_DRAM_ACTIVE",
        gpm=True,
    ),
    GpuMetric(
        "sm_activity_ratio",
        "nvml_sm_activity_ratio",
        "Fraction of SMs busy since the previous scrape (GPM, 0..1).",
        dcgm="DCGM_FI_PROF_SM_ACTIVE",
        gpm=True,
    ),
    GpuMetric(
        "sm_occupancy_ratio",
        "nvml_sm_occupancy_ratio",
        "Resident warps over the maximum since the previous scrape (GPM, 0..1).",
        dcgm="DCGM_FI_PROF_SM_OCCUPANCY",
        gpm=True,
    ),
    GpuMetric(
        "tensor_activity_ratio",
        "nvml_tensor_activity_ratio",
        "Fraction of time tensor cores were busy since the previous scrape (GPM, 0..1).",
        dcgm="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        gpm=True,
    ),
)

#: labelled gauge: 1 while the reason holds the clocks down, 0 otherwise (label ``reason``)
THROTTLE_METRIC = "nvml_throttle_reason_active"
#: dcgm-exporter serves the same information as one bitmask (NVML's clocks-event reason bits)
#: NVML clocks-event (throttle) reason bit -> our ``reason`` label
THROTTLE_REASON_BITS: dict[int, str] = {
    0x001: "gpu_idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal_slowdown",
    0x040: "hw_thermal_slowdown",
    0x080: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

INFO_METRIC = "nvml_gpu_info"
UP_METRIC = "nvml_up"
SCRAPE_DURATION_METRIC = "nvml_scrape_duration_seconds"

#: host metrics: HostSample field -> (name, help), under the exporter's ``nvml_`` namespace as
#: the telemetry reader expects. dcgm-exporter has none (use node_exporter).
HOST_METRICS: dict[str, tuple[str, str]] = {
    "host_cpu_utilization_ratio": (
        "nvml_host_cpu_utilization_ratio",
        "Host CPU busy time over all cores since the previous scrape (0..1).",
    ),
    "host_memory_used_bytes": (
        "nvml_host_memory_used_bytes",
        "Host memory in use (total - available), bytes.",
    ),
    "host_memory_total_bytes": ("nvml_host_memory_total_bytes", "Host memory in total, bytes."),
}

#: dcgm-exporter name -> (our sample name, factor into our unit); used by the telemetry reader
DCGM_TO_OURS: dict[str, tuple[str, float]] = {
    m.dcgm: (m.sample_name, m.dcgm_scale) for m in GPU_METRICS if m.dcgm is not None
}
#: our sample name -> GpuMetric


def throttle_reasons_from_mask(mask: int, supported: int | None = None) -> dict[str, bool]:
    """Decode an NVML clocks-event bitmask into ``reason -> active`` (only supported bits)."""
    return {
        reason: bool(mask & bit)
        for bit, reason in THROTTLE_REASON_BITS.items()
        if supported is None or supported & bit
    }
