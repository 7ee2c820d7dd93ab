"""Open-loop arrival processes: how long until the next scheduled request (pure).

Each process is a small strategy with one method, ``gap_s(rate_per_s, rng)``; ``--llm-burstiness``
picks one through :func:`arrival_process`. The random generator is passed in, so each worker
keeps its own seeded stream and tests can replay one.

:class:`ArrivalSchedule` draws one process's send times stage by stage and accounts for every
arrival it drew: sent, or never sent with a reason (:data:`UNSENT_REASONS`: the user pool ran
dry, the stage ended before its time, the run stopped), in :class:`ArrivalCounts` per stage. An
arrival belongs to the stage whose window holds its time: one a user claimed for after its stage
ended is not that stage's (nor counted unsent).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Protocol


class ArrivalProcess(Protocol):
    """Inter-arrival times of an open-loop load."""

    def gap_s(self, rate_per_s: float, rng: random.Random) -> float:
        """Seconds from one scheduled send to the next at ``rate_per_s`` (> 0)."""
        ...


@dataclass(frozen=True, slots=True)
class Poisson:
    """Exponential gaps (a Poisson process): burstiness 1."""

    def gap_s(self, rate_per_s: float, rng: random.Random) -> float:
        return rng.expovariate(rate_per_s)


@dataclass(frozen=True, slots=True)
class Gamma:
    """Gamma-distributed gaps with mean 1/rate: ``shape`` < 1 burstier, > 1 more regular."""

    shape: float

    def gap_s(self, rate_per_s: float, rng: random.Random) -> float:
        return rng.gammavariate(self.shape, 1.0 / (self.shape * rate_per_s))


@dataclass(frozen=True, slots=True)
class Constant:
    """Evenly spaced sends: burstiness 0."""

    def gap_s(self, rate_per_s: float, rng: random.Random) -> float:
        return 1.0 / rate_per_s


def arrival_process(burstiness: float) -> ArrivalProcess:
    """The process ``--llm-burstiness`` names: 0 constant, 1 Poisson, otherwise gamma."""
    if burstiness <= 0:
        return Constant()
    if burstiness == 1.0:
        return Poisson()
    return Gamma(burstiness)


#: why a drawn arrival was never sent (the keys of :attr:`ArrivalCounts.unsent`)
POOL_RAN_DRY = "pool_ran_dry"  # it came due while every user was busy, and none was free
#                                before its stage ended (more users: --llm-max-users)
STAGE_ENDED = "stage_ended"  # a user held it, but the stage ended before its time
RUN_STOPPED = "run_stopped"  # the run stopped while a user held it, or before one was free
UNSENT_REASONS: tuple[str, ...] = (POOL_RAN_DRY, STAGE_ENDED, RUN_STOPPED)


@dataclass(slots=True)
class ArrivalCounts:
    """One stage's arrivals on one process: how many the schedule drew, how many were never
    sent and why. Every drawn arrival is either sent (one record, with its scheduled time) or
    counted here, so drawn = sent + sum(unsent)."""

    drawn: int = 0
    unsent: dict[str, int] = field(default_factory=lambda: dict.fromkeys(UNSENT_REASONS, 0))

    @property
    def unsent_total(self) -> int:
        return sum(self.unsent.values())

    def to_list(self) -> list[int]:
        """``[drawn, pool_ran_dry, stage_ended, run_stopped]`` (what travels to the master)."""
        return [self.drawn, *(self.unsent[r] for r in UNSENT_REASONS)]

    @classmethod
    def from_list(cls, values: list[int]) -> ArrivalCounts:
        drawn, *unsent = (int(v) for v in values)
        return cls(drawn, dict(zip(UNSENT_REASONS, unsent, strict=True)))

    def add(self, other: ArrivalCounts) -> None:
        self.drawn += other.drawn
        for reason, n in other.unsent.items():
            self.unsent[reason] += n


class ArrivalSchedule:
    """The open-loop send times of one process, stage by stage, with every arrival accounted.

    :meth:`claim` draws the next send time (a user takes it and waits for it, or sends at once
    when it is already due); an arrival that is not sent after all is counted with its reason
    (:meth:`drop`); :meth:`close` ends a stage and counts the arrivals that came due before
    ``end_s`` that no user claimed (the user pool ran dry). Pure: the random generator and the
    times come from the caller.
    """

    def __init__(self, process: ArrivalProcess, rng: random.Random) -> None:
        self.process = process
        self.rng = rng
        self.stage = -1
        self.rate_per_s = 0.0
        self.next_s = math.nan
        self.counts: dict[int, ArrivalCounts] = {}
        self.ends: dict[int, float] = {}  # stage -> when it ended (closed)

    def open(self, stage: int, rate_per_s: float, start_s: float) -> None:
        """Start drawing ``stage``'s arrivals at ``rate_per_s`` from ``start_s``."""
        self.stage, self.rate_per_s, self.next_s = stage, rate_per_s, start_s

    def claim(self, now_s: float) -> float:
        """The next arrival's time (counted as drawn in the current stage)."""
        when = self.next_s if not math.isnan(self.next_s) else now_s
        self.next_s = when + self.process.gap_s(self.rate_per_s, self.rng)
        self._counts(self.stage).drawn += 1
        return when

    def drop(self, stage: int, reason: str, when_s: float = math.nan) -> None:
        """An arrival of ``stage`` a user claimed (for ``when_s``) will not be sent, for
        ``reason``. One drawn for the stage's end or later was never due in its window: it is
        taken back out of the stage's drawn count, not counted unsent (a user claims its next
        arrival ahead of time, so at a stage's end the idle users hold arrivals past it)."""
        counts = self._counts(stage)
        if when_s >= self.ends.get(stage, math.inf):
            counts.drawn -= 1
            return
        counts.unsent[reason] += 1

    def close(self, end_s: float, reason: str = POOL_RAN_DRY) -> None:
        """End the current stage at ``end_s``: arrivals due before it that no user claimed are
        drawn and counted unsent (``pool_ran_dry``: every user was busy until the stage ended;
        ``run_stopped`` at a stop); nothing more is drawn until :meth:`open`."""
        if self.stage >= 0 and self.stage not in self.ends:
            self.ends[self.stage] = end_s
        if self.rate_per_s > 0 and self.stage >= 0 and not math.isnan(self.next_s):
            counts = self._counts(self.stage)
            while self.next_s < end_s:
                counts.drawn += 1
                counts.unsent[reason] += 1
                self.next_s += self.process.gap_s(self.rate_per_s, self.rng)
        self.rate_per_s, self.next_s = 0.0, math.nan

    def tally(self) -> int:
        """Arrivals drawn plus unsent so far, all stages (changes whenever a count does, but
        for a claim taken back: then the counts are what they were)."""
        return sum(c.drawn + c.unsent_total for c in self.counts.values())

    def _counts(self, stage: int) -> ArrivalCounts:
        return self.counts.setdefault(stage, ArrivalCounts())
