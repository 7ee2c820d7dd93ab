"""The NVML source (``--source nvml``): nvidia-ml-py readings converted to base units.

The ``pynvml`` module is injectable (tests pass ``tests/fake_pynvml.py``), the way client_python's
``ProcessCollector`` takes a fake ``/proc``. Every metric group is read under its own guard:
``Not Supported`` marks that GPU+metric unsupported for good (left out, logged once); other
per-metric errors leave it out of this scrape (logged once); errors that mean NVML itself is gone
(driver unloaded, GPU lost, not initialised) propagate, so the Collector answers ``nvml_up 0``,
and the next read re-initialises NVML. Rates that need two readings (GPM bandwidth/activity,
PCIe byte counters) keep the previous reading between scrapes; nothing here sleeps.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from locust_llm.errors import InputError, LocustLLMError
from locust_llm.gpu.names import throttle_reasons_from_mask
from locust_llm.gpu.source import GpuSample, HostSample

log = logging.getLogger(__name__)

KIB = 1024
#: GpuSample field -> NVML GPM metric id constant name (values are percent)
GPM_METRICS: dict[str, str] = {
    "dram_bandwidth_utilization_ratio": "NVML_GPM_METRIC_DRAM_BW_UTIL",
    "sm_activity_ratio": "NVML_GPM_METRIC_SM_UTIL",
    "sm_occupancy_ratio": "NVML_GPM_METRIC_SM_OCCUPANCY",
    "tensor_activity_ratio": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
}
_UNSUPPORTED_CODES = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND")
_FATAL_CODES = (
    "NVML_ERROR_UNINITIALIZED",
    "NVML_ERROR_DRIVER_NOT_LOADED",
    "NVML_ERROR_LIBRARY_NOT_FOUND",
    "NVML_ERROR_GPU_IS_LOST",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
    "NVML_ERROR_UNKNOWN",
)


class NvmlUnavailable(LocustLLMError):
    """NVML could not start (no driver, no library, no permission); the message says why."""


@dataclass(slots=True)
class _Device:
    index: int
    handle: Any
    uuid: str
    name: str
    throttle_supported: int | None = None
    gpm_samples: list[Any] = field(default_factory=list)  # [previous, current] when GPM works
    gpm_primed: bool = False
    pcie_prev: tuple[float, int, int] | None = None  # (t, tx_bytes, rx_bytes)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def cuda_version_text(version: int) -> str:
    """NVML's CUDA driver version integer (12040) as text ("12.4")."""
    return f"{version // 1000}.{(version % 1000) // 10}"


class NvmlSource:
    """Read every GPU through ``nvml`` (default: ``import pynvml``); see the module docstring."""

    def __init__(self, nvml: Any = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        if nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                raise NvmlUnavailable(f"nvidia-ml-py is not installed ({exc})") from exc
            nvml = pynvml
        self.nvml = nvml
        self._clock = clock
        self._unsupported: set[tuple[int, str]] = set()
        self._warned: set[tuple[int, str]] = set()
        self._fatal = {getattr(nvml, c) for c in _FATAL_CODES if hasattr(nvml, c)}
        self._unsupported_codes = {getattr(nvml, c) for c in _UNSUPPORTED_CODES if hasattr(nvml, c)}
        self._devices: list[_Device] = []
        self._ok = False
        self._inited = False
        self.driver_version = ""
        self.cuda_version = ""
        try:
            self._start()
        except nvml.NVMLError as exc:
            raise NvmlUnavailable(f"NVML failed to start: {exc}") from exc

    # -- start-up -------------------------------------------------------------------------
    def _start(self) -> None:
        nv = self.nvml
        nv.nvmlInit()
        self._inited = True
        self.driver_version = _text(nv.nvmlSystemGetDriverVersion())
        try:
            self.cuda_version = cuda_version_text(int(nv.nvmlSystemGetCudaDriverVersion()))
        except nv.NVMLError:
            self.cuda_version = ""
        self._devices = []
        for index in range(nv.nvmlDeviceGetCount()):
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            device = _Device(
                index,
                handle,
                _text(nv.nvmlDeviceGetUUID(handle)),
                _text(nv.nvmlDeviceGetName(handle)),
            )
            supported = self._call(device, "throttle_reasons", self._supported_reasons, handle)
            device.throttle_supported = supported
            self._start_gpm(device)
            self._devices.append(device)
        self._ok = True

    def _supported_reasons(self, handle: Any) -> int:
        return self._newer_or_older(
            "nvmlDeviceGetSupportedClocksEventReasons",
            "nvmlDeviceGetSupportedClocksThrottleReasons",
            handle,
        )

    def _newer_or_older(self, newer: str, older: str, handle: Any) -> int:
        """Call NVML's newer function name, or the older one when the driver lacks the newer."""
        nv = self.nvml
        fn = getattr(nv, newer, None)
        if fn is not None:
            try:
                return int(fn(handle))
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) != getattr(nv, _UNSUPPORTED_CODES[1], None):
                    raise
        return int(getattr(nv, older)(handle))

    def _start_gpm(self, device: _Device) -> None:
        nv = self.nvml
        if not hasattr(nv, "nvmlGpmQueryDeviceSupport"):
            self._omit(device, "gpm", "this nvidia-ml-py has no GPM")
            return
        try:
            if not nv.nvmlGpmQueryDeviceSupport(device.handle).isSupportedDevice:
                self._omit(device, "gpm", "no GPM (needs Hopper or newer)")
                return
            device.gpm_samples = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
        except nv.NVMLError as exc:
            self._omit(device, "gpm", f"GPM unavailable: {exc}")

    def close(self) -> None:
        """Free GPM samples and shut NVML down (errors ignored: we are leaving)."""
        nv = self.nvml
        for device in self._devices:
            for sample in device.gpm_samples:
                with contextlib.suppress(nv.NVMLError):
                    nv.nvmlGpmSampleFree(sample)
            device.gpm_samples = []
        self._devices = []
        self._ok = False
        if self._inited:
            self._inited = False
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlShutdown()

    # -- per scrape -----------------------------------------------------------------------
    def read(self) -> HostSample:
        """One sample per GPU; raises the NVMLError when NVML itself has failed."""
        nv = self.nvml
        try:
            if not self._ok:
                self.close()
                self._start()
            gpus = [self._read_device(d) for d in self._devices]
        except nv.NVMLError:
            self._ok = False
            raise
        return HostSample(
            gpus=gpus, driver_version=self.driver_version, cuda_version=self.cuda_version
        )

    def _read_device(self, d: _Device) -> GpuSample:
        nv, h = self.nvml, d.handle
        s = GpuSample(index=d.index, uuid=d.uuid, name=d.name)
        rates = self._call(d, "utilization", nv.nvmlDeviceGetUtilizationRates, h)
        if rates is not None:
            s.utilization_ratio = rates.gpu / 100.0
            s.memory_utilization_ratio = rates.memory / 100.0
        memory = self._call(d, "memory", nv.nvmlDeviceGetMemoryInfo, h)
        if memory is not None:  # NVML reports bytes
            s.memory_used_bytes, s.memory_total_bytes = float(memory.used), float(memory.total)
        s.power_watts = _scaled(self._call(d, "power", nv.nvmlDeviceGetPowerUsage, h), 1e-3)
        s.energy_joules_total = _scaled(
            self._call(d, "energy", nv.nvmlDeviceGetTotalEnergyConsumption, h), 1e-3
        )
        s.temperature_celsius = _scaled(
            self._call(d, "temperature", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
            1.0,
        )
        s.sm_clock_hertz = _scaled(
            self._call(d, "sm_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM), 1e6
        )
        s.memory_clock_hertz = _scaled(
            self._call(d, "memory_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM), 1e6
        )
        self._read_pcie(d, s)
        mask = self._call(d, "throttle_reasons", self._current_reasons, h)
        if mask is not None:
            s.throttle_reasons = throttle_reasons_from_mask(mask, d.throttle_supported)
        if d.gpm_samples:
            self._call(d, "gpm", self._read_gpm, d, s)
        return s

    def _current_reasons(self, handle: Any) -> int:
        return self._newer_or_older(
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
            handle,
        )

    def _read_pcie(self, d: _Device, s: GpuSample) -> None:
        """Byte counters (rate over the interval since the previous scrape) when the driver has
        them, else ``nvmlDeviceGetPcieThroughput`` (KiB/s; NVML samples it over ~20 ms)."""
        nv = self.nvml
        if (d.index, "pcie_counters") not in self._unsupported:
            counters = self._call(d, "pcie_counters", self._pcie_counters, d.handle)
            if counters is not None:
                now = self._clock()
                tx, rx = counters
                prev, d.pcie_prev = d.pcie_prev, (now, tx, rx)
                if prev is not None and now > prev[0] and tx >= prev[1] and rx >= prev[2]:
                    s.pcie_tx_bytes_per_second = (tx - prev[1]) / (now - prev[0])
                    s.pcie_rx_bytes_per_second = (rx - prev[2]) / (now - prev[0])
                return
            if (d.index, "pcie_counters") not in self._unsupported:
                return  # a transient error: no PCIe this scrape
        rx_kib = self._call(
            d, "pcie_rx", nv.nvmlDeviceGetPcieThroughput, d.handle, nv.NVML_PCIE_UTIL_RX_BYTES
        )
        tx_kib = self._call(
            d, "pcie_tx", nv.nvmlDeviceGetPcieThroughput, d.handle, nv.NVML_PCIE_UTIL_TX_BYTES
        )
        s.pcie_rx_bytes_per_second = _scaled(rx_kib, KIB)
        s.pcie_tx_bytes_per_second = _scaled(tx_kib, KIB)

    def _pcie_counters(self, handle: Any) -> tuple[int, int]:
        nv = self.nvml
        ids = [nv.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, nv.NVML_FI_DEV_PCIE_COUNT_RX_BYTES]
        values = nv.nvmlDeviceGetFieldValues(handle, ids)
        for value in values:
            if value.nvmlReturn != nv.NVML_SUCCESS:
                raise nv.NVMLError(value.nvmlReturn)
        return int(values[0].value.ullVal), int(values[1].value.ullVal)

    def _read_gpm(self, d: _Device, s: GpuSample) -> None:
        nv = self.nvml
        previous, current = d.gpm_samples
        nv.nvmlGpmSampleGet(d.handle, current)
        d.gpm_samples = [current, previous]  # this sample is the next scrape's "previous"
        if not d.gpm_primed:
            d.gpm_primed = True  # first scrape: one sample only, nothing to report yet
            return
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1, request.sample2 = previous, current
        for i, metric_id in enumerate(GPM_METRICS.values()):
            request.metrics[i].metricId = getattr(nv, metric_id)
        nv.nvmlGpmMetricsGet(request)
        for i, field_name in enumerate(GPM_METRICS):
            metric = request.metrics[i]
            if metric.nvmlReturn == nv.NVML_SUCCESS:
                setattr(s, field_name, float(metric.value) / 100.0)
            else:
                self._warn(d, field_name, f"GPM metric failed: {nv.NVMLError(metric.nvmlReturn)}")

    # -- guards ---------------------------------------------------------------------------
    def _call(self, d: _Device, metric: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, or ``None`` when this GPU+metric is unsupported or failed this time."""
        if (d.index, metric) in self._unsupported:
            return None
        nv = self.nvml
        try:
            return fn(*args)
        except nv.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in self._fatal:
                raise
            if code in self._unsupported_codes:
                self._omit(d, metric, str(exc))
            else:
                self._warn(d, metric, str(exc))
        except AttributeError as exc:  # an older nvidia-ml-py without this function
            self._omit(d, metric, str(exc))
        return None

    def _omit(self, d: _Device, metric: str, why: str) -> None:
        self._unsupported.add((d.index, metric))
        log.info("GPU %d (%s): %s not supported, left out (%s)", d.index, d.name, metric, why)

    def _warn(self, d: _Device, metric: str, why: str) -> None:
        if (d.index, metric) not in self._warned:
            self._warned.add((d.index, metric))
            log.warning("GPU %d (%s): reading %s failed: %s", d.index, d.name, metric, why)


def _scaled(value: Any, factor: float) -> float | None:
    return None if value is None else float(value) * factor


def from_args(args: Any, *, nvml: Any = None) -> NvmlSource:
    """``--source nvml``: the driver (``nvml`` replaces ``pynvml`` in tests); without a usable
    driver a one-line InputError that names ``--source fake``."""
    try:
        return NvmlSource(nvml)
    except NvmlUnavailable as exc:
        raise InputError(
            f"--source nvml: no usable NVIDIA driver ({exc}); use --source fake to try the "
            "exporter without a GPU"
        ) from exc
