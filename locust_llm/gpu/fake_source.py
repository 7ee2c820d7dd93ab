"""A deterministic, scriptable GPU source for tests and demos (``--source fake``).

The fake walks a *profile*: a cycle of phases (``idle``, ``compute``, ``copy``), each with
plausible H200-like readings: compute shows utilization and tensor activity near 1, copy shows
DRAM bandwidth near its peak, idle shows the ``gpu_idle`` throttle reason. Any field can be
overridden by a constant or by a function ``f(t_s, gpu_index)`` of time since start, and any
field can be marked unsupported (left ``None``, as an older GPU would). Energy integrates power
over the source's clock, so values depend only on the clock: inject one for exact tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import fields
from typing import Any, Union

from locust_llm.errors import InputError
from locust_llm.gpu.source import GpuSample, HostSample

GIB = 1024**3
Value = Union[float, None, Callable[[float, int], Union[float, None]]]  # noqa: UP007

#: phase name -> readings (GpuSample field -> value in base units); memory_used is a fraction
PHASES: dict[str, dict[str, float]] = {
    "idle": {
        "utilization_ratio": 0.0,
        "memory_utilization_ratio": 0.0,
        "dram_bandwidth_utilization_ratio": 0.0,
        "sm_activity_ratio": 0.0,
        "sm_occupancy_ratio": 0.0,
        "tensor_activity_ratio": 0.0,
        "power_watts": 75.0,
        "temperature_celsius": 32.0,
        "sm_clock_hertz": 345e6,
        "memory_clock_hertz": 2619e6,
        "memory_used_fraction": 0.004,
        "pcie_rx_bytes_per_second": 0.0,
        "pcie_tx_bytes_per_second": 0.0,
    },
    "compute": {
        "utilization_ratio": 1.0,
        "memory_utilization_ratio": 0.25,
        "dram_bandwidth_utilization_ratio": 0.2,
        "sm_activity_ratio": 0.95,
        "sm_occupancy_ratio": 0.5,
        "tensor_activity_ratio": 0.85,
        "power_watts": 650.0,
        "temperature_celsius": 65.0,
        "sm_clock_hertz": 1980e6,
        "memory_clock_hertz": 2619e6,
        "memory_used_fraction": 0.6,
        "pcie_rx_bytes_per_second": 1e6,
        "pcie_tx_bytes_per_second": 1e6,
    },
    "copy": {
        "utilization_ratio": 1.0,
        "memory_utilization_ratio": 0.9,
        "dram_bandwidth_utilization_ratio": 0.9,
        "sm_activity_ratio": 0.3,
        "sm_occupancy_ratio": 0.2,
        "tensor_activity_ratio": 0.0,
        "power_watts": 450.0,
        "temperature_celsius": 55.0,
        "sm_clock_hertz": 1980e6,
        "memory_clock_hertz": 2619e6,
        "memory_used_fraction": 0.6,
        "pcie_rx_bytes_per_second": 1e6,
        "pcie_tx_bytes_per_second": 1e6,
    },
}
DEFAULT_PROFILE: tuple[tuple[str, float], ...] = (("idle", 5.0), ("compute", 10.0), ("copy", 5.0))
GPM_FIELDS = frozenset(
    {
        "dram_bandwidth_utilization_ratio",
        "sm_activity_ratio",
        "sm_occupancy_ratio",
        "tensor_activity_ratio",
    }
)
SAMPLE_FIELDS = frozenset(f.name for f in fields(GpuSample)) - {"index", "uuid", "name"}


def parse_profile(text: str) -> list[tuple[str, float]]:
    """``"idle:5,compute:10,copy:5"`` -> ``[("idle", 5.0), ...]``; bad text is an InputError."""
    profile = []
    for item in text.split(","):
        phase, sep, seconds = item.strip().partition(":")
        if phase not in PHASES or not sep:
            raise InputError(
                f"--fake-profile: {item.strip()!r} is not PHASE:SECONDS with PHASE one of "
                f"{', '.join(PHASES)}"
            )
        try:
            duration = float(seconds)
        except ValueError:
            duration = float("nan")
        if not duration > 0:
            raise InputError(f"--fake-profile: {item.strip()!r} needs a positive number of seconds")
        profile.append((phase, duration))
    return profile


class FakeSource:
    """``gpus`` identical fake devices walking ``profile`` in a loop.

    ``overrides``: field -> constant or ``f(t_s, gpu_index)``; ``unsupported``: fields left
    ``None``; ``gpm=False`` drops the GPM fields (a pre-Hopper GPU); ``clock`` returns seconds.
    """

    def __init__(
        self,
        gpus: int = 1,
        *,
        profile: Sequence[tuple[str, float]] = DEFAULT_PROFILE,
        overrides: Mapping[str, Value] | None = None,
        unsupported: Iterable[str] = (),
        gpm: bool = True,
        name: str = "NVIDIA H200 (fake)",
        memory_total_bytes: float = 141 * 1e9,
        driver_version: str = "fake",
        cuda_version: str = "12.4",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if gpus < 0:
            raise InputError(f"--fake-gpus: expected 0 or more GPUs, got {gpus}")
        for phase, duration in profile:
            if phase not in PHASES or not duration > 0:
                raise InputError(f"fake profile: bad phase {phase!r} of {duration} s")
        self.overrides = dict(overrides or {})
        self.unsupported = set(unsupported) | (set() if gpm else set(GPM_FIELDS))
        for field_name in (*self.overrides, *self.unsupported):
            if field_name not in SAMPLE_FIELDS:
                raise InputError(f"fake source: unknown field {field_name!r}")
        self.gpus, self.profile, self.name = gpus, list(profile), name
        self.memory_total_bytes = memory_total_bytes
        self.driver_version, self.cuda_version = driver_version, cuda_version
        self._clock = clock
        self._start = clock()
        self._last_t = 0.0
        self._energy = [0.0] * gpus
        self._cycle = sum(duration for _, duration in self.profile)

    def phase_at(self, t_s: float) -> str:
        """The profile phase in force ``t_s`` seconds after start (the profile loops)."""
        if not self.profile:
            return "idle"
        t = t_s % self._cycle
        for phase, duration in self.profile:
            if t < duration:
                return phase
            t -= duration
        return self.profile[-1][0]

    def read(self) -> HostSample:
        """One sample of every fake GPU at the clock's current time."""
        t = self._clock() - self._start
        dt = max(0.0, t - self._last_t)
        self._last_t = t
        phase = self.phase_at(t)
        readings = PHASES[phase]
        gpus = [self._gpu(i, t, dt, phase, readings) for i in range(self.gpus)]
        return HostSample(
            gpus=gpus, driver_version=self.driver_version, cuda_version=self.cuda_version
        )

    def _gpu(self, i: int, t: float, dt: float, phase: str, readings: dict) -> GpuSample:
        values: dict[str, float | None] = {
            k: v for k, v in readings.items() if k != "memory_used_fraction"
        }
        values["memory_total_bytes"] = self.memory_total_bytes
        values["memory_used_bytes"] = readings["memory_used_fraction"] * self.memory_total_bytes
        for field_name, value in self.overrides.items():
            values[field_name] = value(t, i) if callable(value) else value
        power = values.get("power_watts")
        if power is not None:
            self._energy[i] += power * dt
        values["energy_joules_total"] = self._energy[i]
        if "throttle_reasons" not in self.overrides:
            values["throttle_reasons"] = {  # type: ignore[assignment]
                "gpu_idle": phase == "idle",
                "sw_power_cap": False,
                "hw_slowdown": False,
                "sw_thermal_slowdown": False,
                "hw_thermal_slowdown": False,
            }
        for field_name in self.unsupported:
            values[field_name] = None
        return GpuSample(
            index=i,
            uuid=f"GPU-fake-{i:04d}",
            name=self.name,
            **values,  # type: ignore[arg-type]
        )


def from_args(args: Any, *, nvml: Any = None) -> FakeSource:
    """``--source fake``: the exporter's ``--fake-*`` flags (``nvml`` is unused)."""
    return FakeSource(
        args.fake_gpus, profile=parse_profile(args.fake_profile), gpm=not args.fake_no_gpm
    )
