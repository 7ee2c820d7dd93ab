"""The capacity search: which load to measure next, and the answer once the boundary is found.

Pure: :class:`CapacitySearch` is fed each finished stage's
:class:`~locust_llm.capacity.measure.StageMeasurement` (:meth:`CapacitySearch.record`) and says
the next load (:meth:`CapacitySearch.next_load`, None once it has the answer). The caller runs
the stages: the simulator on virtual time, the Locust shape on the master.

1. **grow**: from ``start``, multiply the load by ``factor`` until a stage fails: an SLO broken
   (by its interval; an unclear stage by its point estimates), the stage overloaded (the
   caller's reason, e.g. open loop's achieved rate short of the offered one), or (closed loop)
   throughput no longer rising (its upper bound at most ``flat_gain`` times the previous
   stage's while the load doubled: more users only queue);
   ``max_load`` bounds it (all met there: "at least max_load"). A first stage that fails
   halves the load instead, down to ``min_load``.
2. **bisect** between the last load that met every SLO (``lo``) and the first that did not
   (``hi``), judging by the SLOs (and the overload) alone, at their geometric mean, until
   ``hi / lo <= 1 + resolution`` (closed loop: or they are neighbours).
3. **confirm**: measure ``lo`` once more. It holds: the answer. It fails: it becomes ``hi`` and
   the search goes on below it (``max_stages`` bounds the whole search).

A load's verdict is its latest stage's. The answer (:class:`CapacityAnswer`) is ``lo`` with the
bracket ``(lo, hi)``, the SLO closest to its limit there with its interval, and what broke at
``hi``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from locust_llm.capacity.measure import UNCLEAR, Reading, StageMeasurement
from locust_llm.errors import InputError

GROW, BISECT, CONFIRM, DONE = "grow", "bisect", "confirm", "done"


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchSettings:
    """How the search moves (loads are users when ``closed``, else requests/s)."""

    closed: bool
    flat_gain: float  # throughput ratio at most this while the load grew: flat (Thresholds)
    start: float = 1.0
    factor: float = 2.0
    resolution: float = 0.10
    max_load: float = 512.0
    min_load: float = 1.0
    max_stages: int = 24

    def checked(self) -> SearchSettings:
        if not (self.start > 0 and math.isfinite(self.start)):
            raise InputError(f"--capacity-start must be a positive number, got {self.start}")
        if not self.factor > 1:
            raise InputError(f"--capacity-factor must be above 1, got {self.factor}")
        if not 0 < self.resolution < 1:
            raise InputError(
                f"--capacity-resolution must be between 0 and 100%, got {self.resolution}"
            )
        if not self.max_load >= self.start:
            raise InputError(f"--capacity-max {self.max_load:g} is below the start {self.start:g}")
        if self.closed and not float(self.start).is_integer():
            raise InputError(f"--capacity-start: users are whole numbers, got {self.start}")
        return self

    @property
    def unit(self) -> str:
        return "users" if self.closed else "requests/s"


@dataclass(frozen=True, slots=True)
class Step:
    """One stage the search ran and what it made of it."""

    phase: str
    load: float
    passes: bool
    state: str  # met | broken | unclear
    broken_by: tuple[str, ...]
    throughput: float
    requests: int
    stage: int = -1  # the run's stage index, where the caller gave it
    pooled: int = 1  # stages at this load the judgement pooled (an unclear confirmation)


@dataclass(frozen=True, slots=True)
class CapacityAnswer:
    """The largest load measured to meet every SLO, and its bracket."""

    unit: str  # users | requests/s
    capacity: float | None  # None: even the smallest load failed
    above: float | None  # the smallest load that failed (None: none did up to max_load)
    binding: Reading | None  # at ``capacity``: the SLO closest to its limit
    limited_by: tuple[str, ...]  # at ``above``: what failed there
    uncertain: bool  # a stage of the bracket was judged by point estimates (intervals unclear)
    stages: int
    requests: int
    steps: tuple[Step, ...] = field(default=())

    def sentence(self, cause: str = "") -> str:
        """The answer in one line, e.g. ``capacity 40 users (SLOs break between 40 and 45
        users) at P99 TTFT 1.80 s [1.60, 2.00]; limited by KV capacity (see verdict)``."""
        unit = self.unit
        if self.capacity is None:
            return (
                f"capacity below {_load(self.above, unit)} {unit}: no load measured met every "
                f"SLO ({', '.join(self.limited_by) or 'see stages'})"
            )
        if self.above is None:
            head = f"capacity at least {_load(self.capacity, unit)} {unit} (every SLO met up to"
            head += " the search's maximum)"
        else:
            head = (
                f"capacity {_load(self.capacity, unit)} {unit} (SLOs break between "
                f"{_load(self.capacity, unit)} and {_load(self.above, unit)} {unit})"
            )
        if self.binding is not None:
            head += f" at {format_reading(self.binding)}"
        why = cause or ", ".join(self.limited_by)
        if why and self.above is not None:
            head += f"; limited by {why}" + (" (see verdict)" if cause else "")
        if self.uncertain:
            head += "; within the intervals at the boundary (judged by point estimates)"
        return head

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CapacityAnswer:
        """The answer run.json's ``extra.capacity`` holds (its steps left out)."""
        b = data.get("binding")
        binding = None
        if b:
            binding = Reading(
                b["name"], b["label"], b["limit"], _num(b["value"]), _num(b["lo"], 0.0),
                _num(b["hi"], math.inf), b["state"], b.get("unit", "s"),
            )  # fmt: skip
        return cls(
            unit=data["unit"], capacity=data.get("capacity"), above=data.get("above"),
            binding=binding, limited_by=tuple(data.get("limited_by", ())),
            uncertain=bool(data.get("uncertain")), stages=int(data.get("stages", 0)),
            requests=int(data.get("requests", 0)),
        )  # fmt: skip

    def to_dict(self) -> dict[str, object]:
        return {
            "unit": self.unit,
            "capacity": self.capacity,
            "above": self.above,
            "binding": self.binding.to_dict() if self.binding else None,
            "limited_by": list(self.limited_by),
            "uncertain": self.uncertain,
            "stages": self.stages,
            "requests": self.requests,
            "steps": [
                {
                    "phase": s.phase,
                    "load": s.load,
                    "passes": s.passes,
                    "state": s.state,
                    "broken_by": list(s.broken_by),
                    "throughput": _finite(s.throughput),
                    "requests": s.requests,
                    "stage": s.stage,
                    "pooled": s.pooled,
                }
                for s in self.steps
            ],
        }


def _num(value: float | None, missing: float = math.nan) -> float:
    return missing if value is None else float(value)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _load(value: float | None, unit: str) -> str:
    if value is None:
        return "?"
    return f"{value:.0f}" if unit == "users" else f"{value:.3g}"


def format_reading(r: Reading) -> str:
    """``P99 TTFT 1.80 s [1.60, 2.00]`` (``[1.60, inf]`` where the sample cannot bound it)."""
    if r.unit == "share":
        return f"{r.label} {r.value:.1%} [{r.lo:.1%}, {r.hi:.1%}]"
    scale, unit = (1000.0, "ms") if r.limit < 1 else (1.0, "s")

    def num(x: float) -> str:
        return "inf" if math.isinf(x) else f"{x * scale:.3g}"

    return f"{r.label} {num(r.value)} {unit} [{num(r.lo)}, {num(r.hi)}]"


class CapacitySearch:
    """The search's state: feed :meth:`record` each stage, ask :meth:`next_load`."""

    def __init__(self, settings: SearchSettings) -> None:
        self.settings = settings.checked()
        self.phase = GROW
        self.steps: list[Step] = []
        self.results: dict[float, StageMeasurement] = {}  # load -> its latest stage
        self.lo: float | None = None
        self.hi: float | None = None
        self._next: float | None = self._round(self.settings.start)
        self._confirmed: set[float] = set()
        self._failed_by: dict[float, tuple[str, ...]] = {}  # load -> what failed there

    # ---- driving ------------------------------------------------------------------------
    def next_load(self) -> float | None:
        """The load of the next stage, or None once the answer is known."""
        return None if self.phase == DONE else self._next

    def record(self, m: StageMeasurement, stage: int = -1) -> None:
        """The stage at :meth:`next_load` has ended with ``m``."""
        s = self.settings
        load = m.load
        passes = m.passes
        broken_by = tuple(m.broken_by())
        if passes and s.closed and self.phase == GROW and self.lo is not None and load > self.lo:
            before = self.results[self.lo]
            # flat only when even the throughput's upper bound did not rise: a short stage's
            # count is noisy (28 requests: +-37%), and a boundary is never called on a
            # difference smaller than its interval
            bound = m.throughput_hi if math.isfinite(m.throughput_hi) else m.throughput
            flat = (
                math.isfinite(m.throughput)
                and math.isfinite(before.throughput)
                and bound <= before.throughput * s.flat_gain
            )
            if flat:
                passes, broken_by = False, ("throughput flat",)
        step = Step(
            self.phase, load, passes, m.state, broken_by, m.throughput, m.sent, stage, m.pooled
        )
        self.steps.append(step)
        self.results[load] = m
        if not passes:
            self._failed_by[load] = broken_by
        if len(self.steps) >= s.max_stages:
            self.phase = DONE
            if passes and (self.hi is None or load < self.hi):
                self.lo = max(load, self.lo or 0.0)
            elif not passes and (self.hi is None or load < self.hi):
                self.hi = load
            return
        if self.phase == GROW:
            self._grow(load, passes)
        elif self.phase == BISECT:
            if passes:
                self.lo = load
            else:
                self.hi = load
            self._bisect_or_confirm()
        elif self.phase == CONFIRM:
            self._confirmed.add(load)
            if passes:
                self.phase = DONE
            else:
                self.hi = load
                below = [x for x in self.results if x < load and self._passed(x)]
                self.lo = max(below) if below else None
                if self.lo is None:
                    self._grow_down(load)
                else:
                    self._bisect_or_confirm()

    def _passed(self, load: float) -> bool:
        """The latest stage at ``load`` passed."""
        return next(st for st in reversed(self.steps) if st.load == load).passes

    def _grow(self, load: float, passes: bool) -> None:
        s = self.settings
        if passes:
            self.lo = load
            if self.hi is not None:  # growing back up after a failing first stage
                self._bisect_or_confirm()
                return
            if load >= s.max_load:
                self.phase = DONE
                return
            nxt = min(self._round(load * s.factor), s.max_load)
            self._next = nxt if nxt > load else self._round(load + 1)
            return
        self.hi = load
        if self.lo is None:
            self._grow_down(load)
        else:
            self._bisect_or_confirm()

    def _grow_down(self, load: float) -> None:
        s = self.settings
        lower = self._round(max(load / s.factor, s.min_load))
        if lower >= load:
            self.phase = DONE  # the smallest load fails: no capacity
            return
        self.phase = GROW
        self._next = lower

    def _resolved(self, lo: float, hi: float) -> bool:
        s = self.settings
        if s.closed and hi - lo <= 1:
            return True
        return hi / lo <= 1 + s.resolution

    def _bisect_or_confirm(self) -> None:
        assert self.lo is not None and self.hi is not None
        if self._resolved(self.lo, self.hi):
            if self.lo in self._confirmed:
                self.phase = DONE
            else:
                self.phase = CONFIRM
                self._next = self.lo
            return
        self.phase = BISECT
        mid = self._round(math.sqrt(self.lo * self.hi))
        if self.settings.closed:
            mid = min(max(mid, self.lo + 1), self.hi - 1)
        self._next = mid

    def _round(self, load: float) -> float:
        if self.settings.closed:
            return float(max(1, round(load)))
        return float(f"{load:.4g}")

    # ---- the answer ---------------------------------------------------------------------
    def answer(self) -> CapacityAnswer:
        """What the search found so far (final once :meth:`next_load` is None)."""
        lo_m = self.results.get(self.lo) if self.lo is not None else None
        hi_m = self.results.get(self.hi) if self.hi is not None else None
        limited = self._failed_by.get(self.hi, ()) if self.hi is not None else ()
        uncertain = any(m is not None and m.state == UNCLEAR for m in (lo_m, hi_m))
        return CapacityAnswer(
            unit=self.settings.unit,
            capacity=self.lo,
            above=self.hi,
            binding=lo_m.binding() if lo_m is not None else None,
            limited_by=limited,
            uncertain=uncertain,
            stages=len(self.steps),
            requests=sum(st.requests for st in self.steps),
            steps=tuple(self.steps),
        )
