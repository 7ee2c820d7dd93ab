"""A sweep's stages: one frozen :class:`StagePlan` per stage, and the one parser of the flags.

Pure (no locust, no gevent). A stage holds ``concurrency`` closed-loop users or sends ``rate``
requests/s open loop, and ends after ``requests`` completed requests of its own or
``duration_s`` seconds, whichever comes first. :func:`parse_stages` reads the sweep's flags:

- the loads, ``1,10,50`` users (``--llm-concurrency``) or ``1,2.5,4`` requests/s
  (``--llm-rate``), one stage each;
- ``--llm-stage-requests`` and ``--llm-stage-duration``: one value for every stage or one per
  stage (at least one of the two); a duration is seconds, or ``500ms``, ``90s``, ``30m``,
  ``1.5h`` (:func:`parse_duration`);
- ``--llm-soak DURATION[@CONCURRENCY]``: a last, long stage of kind ``soak`` (at the last
  stage's concurrency when none is given).

Bad input is one :class:`~locust_llm.errors.InputError` line naming the flag, the value and what
was expected. The same parser serves the Locust shape (:mod:`locust_llm.client.shapes`, with the
``--llm-*`` flag names), ``locust-llm virtual`` (:mod:`locust_llm.sim.virtual`), and ``run`` /
``demo``'s progress line (:mod:`locust_llm.launch.sweep`, with their short flag names:
``locust_llm.options.table.SWEEP_FLAGS``, derived from the option spec). A stage begun becomes
run.json's record of it with :meth:`StagePlan.window` (:class:`~locust_llm.rundir.layout.Stage`,
whose format this module leaves as it is).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from locust_llm.errors import InputError
from locust_llm.rundir.layout import Stage

#: what a stage is for: a step of the sweep, a long soak, a baseline measurement
KINDS: tuple[str, ...] = ("step", "soak", "baseline")


@dataclass(frozen=True, slots=True, kw_only=True)
class StagePlan:
    """One planned stage: ``concurrency`` users or ``rate`` requests/s (exactly one of the two),
    ending after ``requests`` completed requests or ``duration_s`` seconds (at least one).

    ``max_sends`` (closed loop) caps the requests the stage sends, as ``vllm bench serve
    --num-prompts`` does. ``name`` defaults to ``c=N``, ``rate R/s`` or ``soak c=N``. Invalid
    combinations raise InputError when the plan is made.
    """

    concurrency: int | None = None
    rate: float | None = None
    requests: int | None = None
    duration_s: float | None = None
    max_sends: int | None = None
    kind: str = "step"
    name: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self._default_name())
        if (self.concurrency is None) == (self.rate is None):
            raise InputError(f"stage {self.name}: give a concurrency or a rate (one of the two)")
        if self.concurrency is not None and not _whole_at_least(self.concurrency):
            raise InputError(f"stage concurrency must be >= 1, got {self.concurrency}")
        if self.rate is not None and not (math.isfinite(self.rate) and self.rate > 0):
            raise InputError(f"stage rate must be a positive number, got {self.rate}")
        if self.requests is None and self.duration_s is None:
            raise InputError(f"stage {self.name} needs a request count or a duration")
        if self.requests is not None and not _whole_at_least(self.requests):
            raise InputError(f"stage {self.name}: requests must be >= 1, got {self.requests}")
        if self.duration_s is not None and not self.duration_s > 0:
            raise InputError(f"stage {self.name}: duration must be > 0 s, got {self.duration_s}")
        if self.max_sends is not None and (
            self.rate is not None or self.max_sends < (self.requests or 1)
        ):
            raise InputError(
                f"stage {self.name}: max sends is for closed loop, at least the request count"
            )
        if self.kind not in KINDS:
            raise InputError(f"stage {self.name}: kind {self.kind!r} is not one of {KINDS}")

    def _default_name(self) -> str:
        if self.rate is not None and self.concurrency is None:
            return f"rate {self.rate:g}/s"
        prefix = "soak " if self.kind == "soak" else ""
        return f"{prefix}c={self.concurrency}"

    @property
    def open_loop(self) -> bool:
        """True for a rate stage (requests sent at scheduled times)."""
        return self.rate is not None

    def window(self, index: int, start_wall_s: float, *, warmup_s: float = 0.0) -> Stage:
        """run.json's record of this stage, the ``index``-th, begun at ``start_wall_s``."""
        return Stage(
            index=index,
            name=self.name,
            start_wall_s=start_wall_s,
            concurrency=self.concurrency,
            rate=self.rate,
            warmup_s=warmup_s,
            target_requests=self.requests,
            kind=self.kind,
        )


@dataclass(frozen=True, slots=True)
class StageFlags:
    """The flag names errors give for each input of :func:`parse_stages`."""

    concurrency: str
    rate: str
    requests: str
    duration: str
    soak: str


#: the Locust plugin's options (``locust --llm-concurrency ...``), the default; ``run``, ``demo``
#: and ``virtual`` name their own flags (``locust_llm.options.table.SWEEP_FLAGS``, from the spec)
LOCUST_FLAGS = StageFlags(
    "--llm-concurrency", "--llm-rate", "--llm-stage-requests", "--llm-stage-duration", "--llm-soak"
)

_DURATION = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)?$")
_UNIT_S = {"ms": 1e-3, "s": 1.0, None: 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str, flag: str = "duration") -> float:
    """``90``, ``2.5``, ``500ms``, ``90s``, ``30m``, ``1.5h`` -> seconds (> 0)."""
    m = _DURATION.match(str(text).strip())
    if not m:
        raise InputError(f"{flag} {text!r}: expected a duration such as 90s, 30m or 1h")
    seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
    if seconds <= 0:
        raise InputError(f"{flag} {text!r}: expected a duration > 0")
    return seconds


def parse_stages(
    *,
    concurrency: str = "",
    rate: str = "",
    requests: str = "",
    duration: str = "",
    soak: str = "",
    flags: StageFlags = LOCUST_FLAGS,
) -> tuple[StagePlan, ...]:
    """The stages the flags ask for (see the module docstring); ``()`` when none is asked."""
    if concurrency and rate:
        raise InputError(
            f"give {flags.concurrency} (closed loop) or {flags.rate} (open loop), one of the two"
        )
    plans: list[StagePlan] = []
    if concurrency or rate:
        levels = _rates(rate, flags.rate) if rate else _counts(concurrency, flags.concurrency)
        n = len(levels)
        counts = _per_stage(
            _counts(requests, flags.requests) if requests else [], n, flags.requests
        )
        durations = _per_stage(
            [parse_duration(x, flags.duration) for x in _items(duration)], n, flags.duration
        )
        if not counts and not durations:
            raise InputError(f"a sweep needs {flags.requests} or {flags.duration}")
        plans = [
            StagePlan(
                concurrency=None if rate else int(level),
                rate=float(level) if rate else None,
                requests=int(counts[i]) if counts else None,
                duration_s=durations[i] if durations else None,
            )
            for i, level in enumerate(levels)
        ]
    if soak:
        plans.append(_soak(soak, plans, flags.soak))
    return tuple(plans)


def _soak(text: str, before: list[StagePlan], flag: str) -> StagePlan:
    spec, _, conc = text.partition("@")
    duration = parse_duration(spec, flag)
    if conc:
        users = int(_counts(conc, f"{flag} concurrency")[0])
    elif before and before[-1].concurrency is not None:
        users = before[-1].concurrency
    else:
        raise InputError(f"{flag} needs DURATION@CONCURRENCY, e.g. 30m@50")
    return StagePlan(concurrency=users, duration_s=duration, kind="soak")


def _items(text: str) -> list[str]:
    return [x for x in str(text).replace(" ", "").split(",") if x]


def _rates(text: str, flag: str) -> list[float]:
    """Comma-separated positive numbers (at least one)."""
    try:
        values = [float(x) for x in _items(text)]
    except ValueError:
        raise InputError(f"{flag} {text!r}: expected comma-separated numbers") from None
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise InputError(f"{flag} {text!r}: expected positive numbers")
    return values


def _counts(text: str, flag: str) -> list[float]:
    """Comma-separated whole numbers >= 1 (``4``, ``4.0`` and ``1e2`` are whole)."""
    values = _rates(text, flag)
    if not all(v.is_integer() for v in values):
        raise InputError(f"{flag} {text!r}: expected whole numbers")
    return values


def _per_stage(values: list[float], stages: int, flag: str) -> list[float]:
    """One value for every stage, or one per stage; ``[]`` stays ``[]`` (not given)."""
    if len(values) == 1:
        return values * stages
    if values and len(values) != stages:
        raise InputError(f"{flag}: give one value or one per stage ({stages}), got {len(values)}")
    return values


def _whole_at_least(value: float, low: int = 1) -> bool:
    return float(value).is_integer() and value >= low
