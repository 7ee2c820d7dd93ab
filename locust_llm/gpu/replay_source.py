"""The replay source (``--source replay --replay-file F.csv``): serve a recorded CSV timeline.

One row per GPU per instant. Columns: ``t_s`` (seconds from the start of the recording) and
``gpu`` (index) are required; ``uuid``, ``name`` and any :class:`GpuSample` field in base units
(``utilization_ratio``, ``memory_used_bytes``, ...) or host field (``host_cpu_utilization_ratio``,
``host_memory_used_bytes``, ``host_memory_total_bytes``) are optional; ``throttle_reasons`` lists
the active reasons separated by ``;``. An empty cell is missing data (left out, never 0). A read
at time t serves, for each GPU, the last row at or before t (step interpolation); with
``loop=True`` the timeline repeats.
"""

from __future__ import annotations

import bisect
import csv
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from locust_llm.errors import InputError
from locust_llm.gpu.names import THROTTLE_REASON_BITS
from locust_llm.gpu.source import GpuSample, HostSample

GPU_FIELDS = tuple(
    f.name for f in fields(GpuSample) if f.name not in {"index", "uuid", "name", "throttle_reasons"}
)
HOST_FIELDS = ("host_cpu_utilization_ratio", "host_memory_used_bytes", "host_memory_total_bytes")
KNOWN_COLUMNS = {"t_s", "gpu", "uuid", "name", "throttle_reasons", *GPU_FIELDS, *HOST_FIELDS}


@dataclass(slots=True)
class _Row:
    t_s: float
    gpu: GpuSample
    host: dict[str, float | None]


def load_timeline(path: str | Path) -> dict[int, list[_Row]]:
    """Parse the CSV into ``gpu index -> rows sorted by time``; bad input is an InputError."""
    path = Path(path)
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"--replay-file {path}: cannot open ({exc.strerror})") from exc
    with handle:
        reader = csv.DictReader(handle)
        columns = set(reader.fieldnames or ())
        if not {"t_s", "gpu"} <= columns:
            raise InputError(
                f"--replay-file {path}: needs columns t_s and gpu, has {sorted(columns)}"
            )
        unknown = columns - KNOWN_COLUMNS
        if unknown:
            raise InputError(
                f"--replay-file {path}: unknown column(s) {', '.join(sorted(unknown))}; "
                f"expected t_s, gpu, uuid, name, throttle_reasons or a sample field"
            )
        timeline: dict[int, list[_Row]] = {}
        for line, record in enumerate(reader, start=2):
            row = _parse_row(record, f"--replay-file {path} line {line}")
            timeline.setdefault(row.gpu.index, []).append(row)
    if not timeline:
        raise InputError(f"--replay-file {path}: no rows")
    for rows in timeline.values():
        rows.sort(key=lambda r: r.t_s)
    return timeline


def _parse_row(record: dict[str, str], where: str) -> _Row:
    def number(column: str) -> float | None:
        text = (record.get(column) or "").strip()
        if not text:
            return None
        try:
            value = float(text)
        except ValueError:
            raise InputError(f"{where}: column {column} is {text!r}, expected a number") from None
        return None if math.isnan(value) else value

    t_s, index = number("t_s"), number("gpu")
    if t_s is None or index is None or index < 0 or index != int(index):
        raise InputError(f"{where}: t_s and gpu (an index >= 0) are required")
    gpu = GpuSample(
        index=int(index),
        uuid=(record.get("uuid") or "").strip() or f"GPU-replay-{int(index)}",
        name=(record.get("name") or "").strip(),
        **{name: number(name) for name in GPU_FIELDS},  # type: ignore[arg-type]
    )
    reasons = record.get("throttle_reasons")
    if reasons is not None:
        active = {r.strip() for r in reasons.split(";") if r.strip()}
        bad = active - set(THROTTLE_REASON_BITS.values())
        if bad:
            raise InputError(f"{where}: unknown throttle reason(s) {', '.join(sorted(bad))}")
        gpu.throttle_reasons = {r: r in active for r in THROTTLE_REASON_BITS.values()}
    return _Row(t_s, gpu, {name: number(name) for name in HOST_FIELDS})


class ReplaySource:
    """Serve ``path``'s timeline against ``clock`` (seconds); see the module docstring."""

    def __init__(
        self, path: str | Path, *, loop: bool = False, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.timeline = load_timeline(path)
        self._times = {gpu: [r.t_s for r in rows] for gpu, rows in self.timeline.items()}
        self.duration_s = max(rows[-1].t_s for rows in self.timeline.values())
        self.loop = loop
        self._clock = clock
        self._start = clock()

    def read(self) -> HostSample:
        """The rows in force now; a GPU whose first row is still in the future is left out."""
        t = self._clock() - self._start
        if self.loop and self.duration_s > 0:
            t %= self.duration_s
        sample = HostSample()
        for gpu in sorted(self.timeline):
            i = bisect.bisect_right(self._times[gpu], t) - 1
            if i < 0:
                continue
            row = self.timeline[gpu][i]
            sample.gpus.append(_copy(row.gpu))
            for name, value in row.host.items():
                if value is not None and getattr(sample, name) is None:
                    setattr(sample, name, value)
        return sample


def _copy(gpu: GpuSample) -> GpuSample:
    copy = GpuSample(**{f.name: getattr(gpu, f.name) for f in fields(GpuSample)})
    if gpu.throttle_reasons is not None:
        copy.throttle_reasons = dict(gpu.throttle_reasons)
    return copy


def from_args(args: Any, *, nvml: Any = None) -> ReplaySource:
    """``--source replay``: the exporter's ``--replay-*`` flags (``nvml`` is unused)."""
    if not args.replay_file:
        raise InputError("--source replay needs --replay-file CSV")
    return ReplaySource(args.replay_file, loop=args.replay_loop)
