"""A fake ``pynvml`` for tests: the functions and constants NvmlSource uses, on fake devices.

``FakePynvml(devices)`` is used in place of the module (attribute access only). Each
:class:`FakeDevice` holds raw NVML readings in NVML's own units (mW, mJ, MHz, percent, bytes,
KiB/s); a value set to an ``int`` error code makes that call raise ``NVMLError(code)``.
``fail_all`` makes every call raise (NVML gone at scrape time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999


#: GPM metric id -> percent: DRAM bandwidth 55, SM activity 90, occupancy 40, tensor 70
GPM_PERCENT = {10: 55.0, 2: 90.0, 3: 40.0, 5: 70.0}


class NVMLError(Exception):
    """Same shape as pynvml's: the NVML return code in ``.value``."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return f"fake NVML error {self.value}"


class Err:
    """Marker: the call for this reading raises ``NVMLError(code)``."""

    def __init__(self, code: int) -> None:
        self.code = code


@dataclass
class FakeDevice:
    """Raw readings of one fake GPU in NVML's units; any value may be an :class:`Err`."""

    uuid: str = "GPU-11111111"
    name: str = "NVIDIA H200"
    util_gpu: Any = 87  # percent
    util_memory: Any = 42  # percent
    memory_used: Any = 50 * 1024**3  # bytes
    memory_total: Any = 141 * 1024**3
    power_mw: Any = 312_500
    energy_mj: Any = 1_234_567
    temperature_c: Any = 61
    sm_clock_mhz: Any = 1980
    memory_clock_mhz: Any = 2619
    pcie_counters: Any = None  # (tx_bytes, rx_bytes) or Err; None = NOT_SUPPORTED
    pcie_rx_kib: Any = 2000
    pcie_tx_kib: Any = 1000
    throttle_current: Any = 0x004 | 0x001  # sw_power_cap + gpu_idle
    throttle_supported: Any = 0x1FF
    gpm: bool = True
    gpm_values: dict[int, Any] = field(default_factory=lambda: dict(GPM_PERCENT))


def _get(value: Any) -> Any:
    if isinstance(value, Err):
        raise NVMLError(value.code)
    return value


class FakePynvml:
    """Stands in for the ``pynvml`` module."""

    NVMLError = NVMLError
    NVML_SUCCESS = NVML_SUCCESS
    NVML_ERROR_UNINITIALIZED = NVML_ERROR_UNINITIALIZED
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_NO_PERMISSION = NVML_ERROR_NO_PERMISSION
    NVML_ERROR_DRIVER_NOT_LOADED = NVML_ERROR_DRIVER_NOT_LOADED
    NVML_ERROR_LIBRARY_NOT_FOUND = NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_FUNCTION_NOT_FOUND = NVML_ERROR_FUNCTION_NOT_FOUND
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    NVML_ERROR_UNKNOWN = NVML_ERROR_UNKNOWN
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1
    NVML_FI_DEV_PCIE_COUNT_TX_BYTES = 197
    NVML_FI_DEV_PCIE_COUNT_RX_BYTES = 198
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_SM_OCCUPANCY = 3
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
    NVML_GPM_METRIC_DRAM_BW_UTIL = 10
    NVML_GPM_METRICS_GET_VERSION = 1

    def __init__(self, devices: list[FakeDevice] | None = None, *, init_error: int | None = None):
        self.devices = devices if devices is not None else [FakeDevice()]
        self.init_error = init_error
        self.fail_all: int | None = None
        self.calls: list[str] = []
        self.initialised = 0
        self.gpm_allocated = 0

    # -- system ----------------------------------------------------------------------------
    def _check(self, name: str) -> None:
        self.calls.append(name)
        if self.fail_all is not None:
            raise NVMLError(self.fail_all)

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check("driver")
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check("cuda")
        return 12040

    def nvmlDeviceGetCount(self) -> int:
        self._check("count")
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        self._check("handle")
        return self.devices[index]

    def nvmlDeviceGetUUID(self, d: FakeDevice) -> str:
        return d.uuid

    def nvmlDeviceGetName(self, d: FakeDevice) -> bytes:
        return d.name.encode()  # older nvidia-ml-py returns bytes

    # -- readings --------------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, d: FakeDevice) -> SimpleNamespace:
        self._check("utilization")
        return SimpleNamespace(gpu=_get(d.util_gpu), memory=_get(d.util_memory))

    def nvmlDeviceGetMemoryInfo(self, d: FakeDevice) -> SimpleNamespace:
        self._check("memory")
        return SimpleNamespace(used=_get(d.memory_used), total=_get(d.memory_total))

    def nvmlDeviceGetPowerUsage(self, d: FakeDevice) -> int:
        self._check("power")
        return _get(d.power_mw)

    def nvmlDeviceGetTotalEnergyConsumption(self, d: FakeDevice) -> int:
        self._check("energy")
        return _get(d.energy_mj)

    def nvmlDeviceGetTemperature(self, d: FakeDevice, sensor: int) -> int:
        self._check("temperature")
        assert sensor == self.NVML_TEMPERATURE_GPU
        return _get(d.temperature_c)

    def nvmlDeviceGetClockInfo(self, d: FakeDevice, kind: int) -> int:
        self._check("clock")
        return _get(d.sm_clock_mhz if kind == self.NVML_CLOCK_SM else d.memory_clock_mhz)

    def nvmlDeviceGetFieldValues(self, d: FakeDevice, ids: list[int]) -> list[SimpleNamespace]:
        self._check("field_values")
        if d.pcie_counters is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        tx, rx = _get(d.pcie_counters)
        by_id = {self.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: tx, self.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: rx}
        return [
            SimpleNamespace(nvmlReturn=NVML_SUCCESS, value=SimpleNamespace(ullVal=by_id[i]))
            for i in ids
        ]

    def nvmlDeviceGetPcieThroughput(self, d: FakeDevice, counter: int) -> int:
        self._check("pcie_throughput")
        return _get(d.pcie_rx_kib if counter == self.NVML_PCIE_UTIL_RX_BYTES else d.pcie_tx_kib)

    def nvmlDeviceGetCurrentClocksEventReasons(self, d: FakeDevice) -> int:
        self._check("throttle")
        return _get(d.throttle_current)

    def nvmlDeviceGetSupportedClocksEventReasons(self, d: FakeDevice) -> int:
        return _get(d.throttle_supported)

    # -- GPM -------------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, d: FakeDevice) -> SimpleNamespace:
        return SimpleNamespace(isSupportedDevice=int(d.gpm))

    def nvmlGpmSampleAlloc(self) -> SimpleNamespace:
        self.gpm_allocated += 1
        return SimpleNamespace(taken=0, device=None)

    def nvmlGpmSampleFree(self, sample: SimpleNamespace) -> None:
        self.gpm_allocated -= 1

    def nvmlGpmSampleGet(self, d: FakeDevice, sample: SimpleNamespace) -> SimpleNamespace:
        self._check("gpm_sample")
        sample.taken += 1
        sample.device = d
        return sample

    def c_nvmlGpmMetricsGet_t(self) -> SimpleNamespace:
        metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(8)]
        return SimpleNamespace(version=0, numMetrics=0, sample1=None, sample2=None, metrics=metrics)

    def nvmlGpmMetricsGet(self, request: SimpleNamespace) -> SimpleNamespace:
        self._check("gpm_metrics")
        assert request.version == self.NVML_GPM_METRICS_GET_VERSION
        assert request.sample1 is not request.sample2, "GPM needs two distinct samples"
        assert request.sample1.taken and request.sample2.taken, "both samples must be taken"
        d = request.sample2.device
        for metric in request.metrics[: request.numMetrics]:
            value = d.gpm_values.get(metric.metricId)
            if isinstance(value, Err) or value is None:
                metric.nvmlReturn = value.code if value is not None else NVML_ERROR_NOT_SUPPORTED
            else:
                metric.value = float(value)
        return request
