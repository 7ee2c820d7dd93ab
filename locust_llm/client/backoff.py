"""Per-user back-off after connection errors: exponential, jittered, capped (pure).

A server that is down answers every connect at once with a refusal; without a pause each user
would turn an outage into tens of thousands of ``connect`` records (and burn a request-count
stage's quota in milliseconds). After the n-th connection error in a row a user waits a
random time between half and all of ``min(cap, base * 2**(n-1))`` ("equal jitter", so users
do not retry in lock step) before its next request; any answer from the server resets it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

#: error kinds that mean the server could not be reached at all
UNREACHABLE_KINDS: frozenset[str] = frozenset({"connect"})
#: kinds that say nothing about the server (the load test's own): they leave the count alone
NEUTRAL_KINDS: frozenset[str] = frozenset({"cancelled", "client_error"})

BACKOFF_BASE_S = 0.1


@dataclass(slots=True)
class Backoff:
    """One user's back-off state."""

    cap_s: float = 5.0  # 0: no back-off
    base_s: float = BACKOFF_BASE_S
    failures: int = 0  # connection errors in a row

    def after(self, error_kind: str, rng: random.Random) -> float:
        """Seconds to wait after a request that ended with ``error_kind`` ("" = success)."""
        if error_kind in NEUTRAL_KINDS:
            return 0.0
        if error_kind not in UNREACHABLE_KINDS:
            self.failures = 0
            return 0.0
        self.failures += 1
        if self.cap_s <= 0:
            return 0.0
        ceiling = min(self.cap_s, self.base_s * 2.0 ** min(self.failures - 1, 30))
        return rng.uniform(ceiling / 2.0, ceiling)
