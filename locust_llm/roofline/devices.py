"""The roofline device a command's flags describe: a GPU preset, ``cpu``, or one given by hand.

One resolution for ``locust-llm roofline``, ``run`` and ``report`` and for run.json's
``roofline`` entry (which ``run`` fills from the same flags, so a later report uses the same
device without being told again). A device is

- a GPU preset (``--gpu rtx4090``: :data:`locust_llm.roofline.floors.GPU_PRESETS`),
- ``cpu``: this host, measured by a short probe (:mod:`locust_llm.roofline.cpu_device`) when
  the report runs, or as ``run`` measured it when the run started (``cpu`` with the figures:
  :func:`measured_cpu`), so every report of that run dir uses the same figures,
- or a custom device: all three of bandwidth, FLOP/s and memory (``40GB/s``, ``1.2TFLOPS``,
  ``64GiB``), never together with a preset.

Bad values are one-line ``InputError``s naming the flag as the command spells it
(:class:`DeviceFlags` holds those names, :class:`DeviceArgs` the values). :func:`is_gpu` says
whether the device is a GPU, which decides the report's wording ("GPU", or "CPU" / "device")
and its GPU-only alerts and actions. Pure except :meth:`DeviceArgs.resolve` of ``cpu``, which
runs the probe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from locust_llm.errors import InputError
from locust_llm.roofline.floors import GPU_PRESETS, GpuSpec, custom_gpu, get_gpu, parse_quantity

#: the ``--gpu`` value that means this host's CPU, measured
CPU = "cpu"


@dataclass(frozen=True)
class DeviceFlags:
    """The names a command gives its device flags (for its error messages)."""

    gpu: str = "--gpu"
    bandwidth: str = "--bandwidth"
    flops: str = "--flops"
    memory: str = "--memory"
    tp: str = "--tp"


REPORT_FLAGS = DeviceFlags()
RUN_FLAGS = DeviceFlags(gpu="--roofline-gpu")
PLUGIN_FLAGS = DeviceFlags(
    gpu="--llm-roofline-gpu",
    bandwidth="--llm-roofline-bandwidth",
    flops="--llm-roofline-flops",
    memory="--llm-roofline-memory",
    tp="--llm-roofline-tp",
)


@dataclass(frozen=True)
class DeviceArgs:
    """A device as a command was told it (strings as written; "" = not given)."""

    gpu: str = ""
    bandwidth: str = ""
    flops: str = ""
    memory: str = ""

    @classmethod
    def from_entry(cls, roofline: Mapping[str, Any]) -> DeviceArgs:
        """From run.json's ``roofline`` entry (see :meth:`entry`)."""
        return cls(*(str(roofline.get(k) or "") for k in ("gpu", "bandwidth", "flops", "memory")))

    def check(self, flags: DeviceFlags = REPORT_FLAGS) -> None:
        """Raise InputError unless this describes at most one device (nothing is measured)."""
        custom = {
            flags.bandwidth: self.bandwidth,
            flags.flops: self.flops,
            flags.memory: self.memory,
        }
        given = [flag for flag, value in custom.items() if value]
        if given and self.gpu and self.gpu.lower() != CPU:  # cpu + figures: a CPU as measured
            raise InputError(
                f"give either {flags.gpu} or {flags.bandwidth}/{flags.flops}/{flags.memory}, "
                f"not both ({flags.gpu} {self.gpu} and {given[0]})"
            )
        if given and len(given) < len(custom):
            missing = [flag for flag in custom if flag not in given]
            raise InputError(
                f"a custom device needs all of {flags.bandwidth}, {flags.flops} and "
                f"{flags.memory} ({', '.join(missing)} missing)"
            )
        kinds = ("bandwidth", "flops", "memory")
        for (flag, value), kind in zip(custom.items(), kinds, strict=True):
            if value:
                parse_quantity(value, kind, flag=flag)
        if self.gpu and self.gpu.lower() != CPU:
            try:
                get_gpu(self.gpu)
            except InputError as exc:
                raise InputError(f"{flags.gpu}: {exc}") from None

    def resolve(self, flags: DeviceFlags = REPORT_FLAGS) -> GpuSpec | None:
        """The device (``cpu`` is measured now), or None when none is given."""
        self.check(flags)
        if self.bandwidth and self.gpu.lower() == CPU:
            spec = custom_gpu(self.bandwidth, self.flops, self.memory, name=CPU)
            return replace(spec, source=f"a CPU: {self.bandwidth}, {self.flops}, {self.memory}")
        if self.bandwidth:
            return custom_gpu(self.bandwidth, self.flops, self.memory)
        if not self.gpu:
            return None
        if self.gpu.lower() == CPU:
            from locust_llm.roofline.cpu_device import cpu_device

            return cpu_device()
        return get_gpu(self.gpu)

    def entry(self, tp: int = 0) -> dict[str, str | int]:
        """run.json's ``roofline`` keys (only those given): gpu, or bandwidth, flops and memory
        as written; tp when given."""
        keys = {**asdict(self), "tp": tp}
        return {k: v for k, v in keys.items() if v}


def measured_on_a_host(spec: GpuSpec) -> bool:
    """Whether a device's figures are rates a host achieved, not a datasheet's peaks: the
    ``cpu`` probe's (:mod:`locust_llm.roofline.cpu_device`, taken now or when ``run`` started
    and recorded as a CPU's figures), or a CPU described by hand with figures measured on it.
    The resource model does not derate them again."""
    from locust_llm.roofline.cpu_device import PROBED

    return spec.name == CPU or spec.source.startswith(PROBED)


def measured_cpu(args: DeviceArgs) -> DeviceArgs:
    """``cpu`` with this host's figures measured now (what ``run`` records); other devices, and
    a CPU whose figures were given, as they are."""
    if args.gpu.lower() != CPU or args.bandwidth:
        return args
    from locust_llm.roofline.cpu_device import cpu_device

    spec = cpu_device()
    return DeviceArgs(
        CPU,
        f"{spec.memory_bandwidth_bytes_s / 1e9:.2f}GB/s",
        f"{spec.peak_flops() / 1e9:.1f}GFLOPS",
        f"{spec.memory_bytes / 2**30:.1f}GiB",
    )


def check_tp(
    tp: int | None, *, flags: DeviceFlags = REPORT_FLAGS, unset: int | None = None
) -> None:
    """A tensor-parallel degree is a whole number >= 1 (``unset``, e.g. None or 0: not given)."""
    if tp is not None and tp != unset and tp < 1:
        raise InputError(
            f"{flags.tp} {tp}: expected the number of devices the model is split over (>= 1)"
        )


def is_gpu(device: GpuSpec | None) -> bool:
    """Whether the device is a GPU: a preset (or no device given: the wording stays the GPU
    field's); ``cpu`` and a device described by hand are not."""
    return device is None or any(device == preset for preset in GPU_PRESETS.values())


def device_noun(device: GpuSpec | None) -> str:
    """What the report calls the device: "GPU", "CPU" (``cpu``) or "device" (by hand)."""
    if is_gpu(device):
        return "GPU"
    assert device is not None
    return "CPU" if device.name == CPU else "device"
