"""Service-level objectives: the one :class:`Slo` and the one parser of ``--slo``.

``--slo`` takes comma-separated terms (``report``, ``run`` and ``virtual`` read the same text):

- ``ttft_p99=2s``, ``tpot_p90=50ms``, ``e2e_p95=10``: a percentile of a latency over a stage's
  completed requests must not exceed the limit (metrics ``ttft``, ``tpot``, ``e2e``; any
  percentile ``pNN`` or ``pNN.N`` strictly between 0 and 100);
- ``errors=1%`` (or ``0.01``): the share of failed requests must not exceed it;
- ``ttft=0.5``, ``tpot=50ms``, ``e2e=10``: per-request bounds; a request within all of them
  counts toward goodput (the report's goodput columns and the cap);
- ``goodput=90%``: the share of completed requests within the per-request bounds must be at
  least this (needs one of them).

Durations are seconds or ``500ms`` / ``2s`` / ``1m`` (:func:`~locust_llm.workloads.stages.
parse_duration`). Bad input is one :class:`~locust_llm.errors.InputError` line naming the term.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from locust_llm.errors import InputError
from locust_llm.workloads.stages import parse_duration

#: a metric's SLO name -> the record field it reads and its label
METRICS: dict[str, tuple[str, str]] = {
    "ttft": ("ttft_s", "TTFT"),
    "tpot": ("tpot_s", "TPOT"),
    "e2e": ("e2e_s", "E2E"),
}
_PERCENTILE = re.compile(r"^(ttft|tpot|e2e)_p(\d+(?:\.\d+)?)$")
_EXPECTED = (
    "expected terms such as ttft_p99=2s, tpot_p90=50ms, e2e_p95=10s, errors=1%, "
    "ttft=0.5 (per request), goodput=90%"
)


@dataclass(frozen=True, slots=True)
class PercentileSlo:
    """``metric``'s ``q``-th percentile (0 < q < 100) at most ``limit_s`` seconds."""

    metric: str
    q: float
    limit_s: float

    @property
    def name(self) -> str:
        """As written in ``--slo``: ``ttft_p99``."""
        return f"{self.metric}_p{self.q:g}"

    @property
    def field(self) -> str:
        """The record field it reads (``ttft_s``)."""
        return METRICS[self.metric][0]

    @property
    def label(self) -> str:
        """As the report prints it: ``P99 TTFT``."""
        return f"P{self.q:g} {METRICS[self.metric][1]}"


@dataclass(frozen=True, kw_only=True)
class Slo:
    """Service-level objectives (seconds and shares 0..1; None = not given).

    ``ttft_s`` / ``tpot_s`` / ``e2e_s`` bound each request (goodput); ``percentiles``,
    ``errors`` and ``goodput`` bound a stage (what the capacity search holds every stage to).
    """

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    percentiles: tuple[PercentileSlo, ...] = ()
    errors: float | None = None
    goodput: float | None = None

    @property
    def given(self) -> bool:
        """A per-request bound is given (goodput can be counted)."""
        return any(v is not None for v in (self.ttft_s, self.tpot_s, self.e2e_s))

    @property
    def stage_given(self) -> bool:
        """A stage objective is given (the capacity search has something to hold)."""
        return bool(self.percentiles) or self.errors is not None or self.goodput is not None

    def describe(self) -> str:
        """The objectives as ``--slo`` text (canonical order)."""
        terms = [f"{p.name}={_seconds(p.limit_s)}" for p in self.percentiles]
        if self.errors is not None:
            terms.append(f"errors={self.errors * 100:g}%")
        for name in ("ttft", "tpot", "e2e"):
            value = getattr(self, f"{name}_s")
            if value is not None:
                terms.append(f"{name}={_seconds(value)}")
        if self.goodput is not None:
            terms.append(f"goodput={self.goodput * 100:g}%")
        return ",".join(terms)


def _seconds(value: float) -> str:
    return f"{value * 1000:g}ms" if value < 1 else f"{value:g}s"


def parse_share(text: str, what: str) -> float:
    """``1%``, ``0.5%`` or ``0.01`` -> a share in [0, 1]."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise InputError(f"{what}={raw!r}: expected a share such as 1% or 0.01") from None
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise InputError(f"{what}={raw!r}: expected a share between 0 and 100%")
    return value


def parse_slo(spec: str | None, flag: str = "--slo") -> Slo:
    """``--slo`` text -> :class:`Slo` (see the module docstring); ``""`` -> no objectives."""
    if not spec:
        return Slo()
    bounds: dict[str, float] = {}
    percentiles: dict[str, PercentileSlo] = {}
    errors = goodput = None
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, text = item.partition("=")
        name, text = name.strip().lower(), text.strip()
        if not sep or not text:
            raise InputError(f"{flag}: cannot read {item!r}; {_EXPECTED}")
        match = _PERCENTILE.match(name)
        if match:
            q = float(match.group(2))
            if not 0 < q < 100:
                raise InputError(f"{flag} {name}: the percentile must be between 0 and 100")
            limit = _duration(text, f"{flag} {name}")
            slo_term = PercentileSlo(match.group(1), q, limit)
            percentiles[slo_term.name] = slo_term
        elif name in METRICS:
            bounds[f"{name}_s"] = _duration(text, f"{flag} {name}")
        elif name in ("errors", "error_rate"):
            errors = parse_share(text, f"{flag} {name}")
        elif name == "goodput":
            goodput = parse_share(text, f"{flag} {name}")
        else:
            raise InputError(f"{flag}: unknown objective {name!r}; {_EXPECTED}")
    slo = Slo(percentiles=tuple(percentiles.values()), errors=errors, goodput=goodput, **bounds)
    if slo.goodput is not None and not slo.given:
        raise InputError(
            f"{flag} goodput: needs a per-request bound to count goodput by, e.g. ttft=1s"
        )
    return slo


def _duration(text: str, what: str) -> float:
    value = parse_duration(text.lower(), what)
    if not math.isfinite(value):
        raise InputError(f"{what}: expected a finite duration")
    return value
