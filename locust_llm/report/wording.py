"""The report's words for its device: a run on a CPU or on a device described by hand makes no
GPU claims.

The device is what ``report`` or ``run`` was told (``--gpu``, ``--bandwidth/--flops/--memory``,
run.json's roofline entry; :mod:`locust_llm.roofline.devices`). A GPU preset, or no device at all,
keeps
the GPU field's words. Otherwise (:class:`DeviceWords` with noun "CPU" or "device"):

- GPU telemetry (NVML / DCGM figures: :data:`GPU_COLUMNS`) does not describe the device, so the
  stage table leaves it out (:func:`without_gpu_telemetry`, with a warning naming what was
  dropped): no verdict rests on it and no GPU-only alert (GPU utilization, NVML memory) fires.
  Memory pressure still reads the server's KV cache.
- Text (the document's sections, the verdicts' evidence and actions, the warnings) says the
  noun instead of "GPU"; a clause ("; "-separated) that is only true of GPUs
  (:data:`GPU_ONLY`: tensor cores, NVML, DCGM, the GPU exporter) or names a GPU figure
  (:data:`GPU_HEADERS`) is left out, and so are the tables' GPU columns and the charts' GPU
  series.

Pure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from locust_llm.roofline.devices import device_noun

if TYPE_CHECKING:
    import pandas as pd

    from locust_llm.report.diagnosis.verdict import Verdict
    from locust_llm.roofline.floors import GpuSpec

#: stage-table columns that only a GPU's telemetry fills (NVML, DCGM / NVML GPM)
GPU_COLUMNS: tuple[str, ...] = (
    "gpu_util",
    "gpu_util_max",
    "gpu_mem_util",
    "gpu_mem_util_max",
    "dram_bw_util",
)
#: table headers and chart series of those columns
GPU_HEADERS: frozenset[str] = frozenset(
    {"GPU util", "GPU util max", "GPU mem used", "GPU mem used max", "DRAM BW util"}
)
#: words that make a clause true of GPUs only
GPU_ONLY: tuple[str, ...] = ("tensor core", "NVML", "DCGM", "GPU exporter", "gpu-exporter")

_GPU_CLAIMS = (*GPU_ONLY, *GPU_HEADERS)  # a clause naming a GPU figure is about a GPU too
_GPU = re.compile(r"\bGPU(s?)\b")
_QUOTED = re.compile(r'"[^"]*"')
_HOLE = re.compile(r"\0(\d+)\0")


@dataclass(frozen=True)
class DeviceWords:
    """How the report names its device: "GPU" (the default), "CPU" or "device"."""

    noun: str = "GPU"

    @classmethod
    def of(cls, device: GpuSpec | None) -> DeviceWords:
        return cls(device_noun(device))

    @property
    def is_gpu(self) -> bool:
        return self.noun == "GPU"

    def say(self, text: str) -> str:
        """``text`` in this device's words ("" when every clause of it is GPU-only); a
        "double-quoted" span (a server's message the verdict quotes) is kept as it came."""
        if self.is_gpu:
            return text
        quoted: list[str] = []

        def hold(match: re.Match[str]) -> str:
            quoted.append(match.group())
            return f"\0{len(quoted) - 1}\0"

        masked = _QUOTED.sub(hold, text)
        clauses = [c for c in masked.split("; ") if not any(m in c for m in _GPU_CLAIMS)]
        said = _GPU.sub(lambda m: self.noun + m.group(1), "; ".join(clauses))
        return _HOLE.sub(lambda m: quoted[int(m.group(1))], said)

    def say_all(self, texts: Iterable[str]) -> tuple[str, ...]:
        """Each text in this device's words; those left empty are dropped."""
        return tuple(t for t in (self.say(x) for x in texts) if t)

    def verdict(self, verdict: Verdict) -> Verdict:
        """A verdict whose evidence and actions say this device's words."""
        if self.is_gpu:
            return verdict
        return replace(
            verdict, evidence=self.say_all(verdict.evidence), actions=self.say_all(verdict.actions)
        )

    def keeps_header(self, header: str) -> bool:
        """Whether a table column or chart series with this header is shown."""
        return self.is_gpu or header not in GPU_HEADERS


def without_gpu_telemetry(table: pd.DataFrame, words: DeviceWords) -> list[str]:
    """Blank the GPU columns of a stage table (in place) when the device is no GPU; returns
    the warning naming what was left out (none when nothing was)."""
    if words.is_gpu:
        return []
    present = [c for c in GPU_COLUMNS if c in table.columns]
    dropped = [c for c in present if pd_to_float(table[c]).notna().any()]
    for column in present:
        table[column] = math.nan
    if not dropped:
        return []
    what = "a CPU" if words.noun == "CPU" else "one described by bandwidth, FLOP/s and memory"
    return [
        f"the device is {what}, not a GPU: the GPU telemetry in the run dir ({', '.join(dropped)}) "
        "does not describe it and is left out of the tables, the verdicts and the alerts"
    ]


def pd_to_float(column: pd.Series) -> pd.Series:
    """A column as floats (anything that is no number becomes NaN)."""
    import pandas as pd

    return pd.to_numeric(column, errors="coerce")
