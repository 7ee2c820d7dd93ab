"""Injected faults: what can go wrong with a request, how often, seeded.

Syntax (``--fault``, repeatable): ``KIND:RATE[:ARG]``, RATE a probability in [0, 1] per
request. The rates of all faults together must not exceed 1; each request gets at most one
fault, drawn from a seeded generator in arrival order, so ``--seed`` replays the same faults.

==================  ==========================================  ====================
kind                what the client sees                        ARG (default)
==================  ==========================================  ====================
``http500``         500 with an OpenAI-style error body          -
``http503``         503 with an OpenAI-style error body          -
``http429``         429 with ``Retry-After: ARG``                seconds (1)
``disconnect``      connection closed after ARG streamed tokens  tokens (1)
``malformed``       the ARG-th chunk is not valid JSON           chunk number (1)
``stall``           no bytes for ARG s after the first token     seconds (5)
``slow_first_byte`` nothing at all (not even headers) for ARG s  seconds (2)
==================  ==========================================  ====================
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from locust_llm.errors import InputError

#: kind -> default argument
FAULT_KINDS: dict[str, float] = {
    "http500": 0.0,
    "http503": 0.0,
    "http429": 1.0,
    "disconnect": 1.0,
    "malformed": 1.0,
    "stall": 5.0,
    "slow_first_byte": 2.0,
}
_ALIASES = {"500": "http500", "503": "http503", "429": "http429"}


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault kind with its per-request probability and argument."""

    kind: str
    rate: float
    arg: float


def parse_fault(text: str) -> Fault:
    """``"http429:0.1:2"`` -> ``Fault("http429", 0.1, 2.0)``; InputError when malformed."""
    parts = str(text).split(":")
    kind = _ALIASES.get(parts[0], parts[0].replace("-", "_"))
    if kind not in FAULT_KINDS or len(parts) not in (2, 3):
        raise InputError(
            f"--fault: cannot read {text!r}; expected KIND:RATE[:ARG] with KIND one of "
            f"{', '.join(FAULT_KINDS)}"
        )
    try:
        rate = float(parts[1])
        arg = float(parts[2]) if len(parts) == 3 else FAULT_KINDS[kind]
    except ValueError:
        raise InputError(f"--fault: {text!r} has a non-numeric rate or argument") from None
    if not 0 <= rate <= 1:
        raise InputError(f"--fault: rate in {text!r} must be in [0, 1]")
    if arg < 0:
        raise InputError(f"--fault: argument in {text!r} must be >= 0")
    return Fault(kind, rate, arg)


class FaultPlan:
    """Draws at most one fault per request from the configured rates, seeded."""

    def __init__(self, specs: tuple[str, ...] | list[str], seed: int = 0) -> None:
        self.faults = [parse_fault(s) for s in specs]
        total = sum(f.rate for f in self.faults)
        if total > 1 + 1e-9:
            raise InputError(f"--fault: rates add up to {total:g}; they must not exceed 1")
        self._rng = random.Random(f"faults:{seed}")

    def draw(self) -> Fault | None:
        """The fault for the next request, or None."""
        if not self.faults:
            return None
        u = self._rng.random()
        for fault in self.faults:
            if u < fault.rate:
                return fault
            u -= fault.rate
        return None
