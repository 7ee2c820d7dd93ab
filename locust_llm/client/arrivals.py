"""Open-loop arrival processes: how long until the next scheduled request (pure).

Each process is a small strategy with one method, ``gap_s(rate_per_s, rng)``; ``--llm-burstiness``
picks one through :func:`arrival_process`. The random generator is passed in, so each worker
keeps its own seeded stream and tests can replay one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
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
