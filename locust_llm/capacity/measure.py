"""One stage's figures against the SLOs, with intervals, and when the stage has run long enough.

A stage is measured from its :class:`Sample` s (one per request it sent, in any order):

- **warm-up**: the first requests, while the batch fills, are left out: those sent in the
  stage's first median E2E (one cycle of a closed loop's users; at most half the stage so far),
  those sent before the last request of an earlier stage ended (its backlog; the caller
  says when), and more where :func:`warmup_cut` says so. It is
  MSER-5 (White's marginal standard error rule) on the TTFTs in start order: it cuts the prefix
  whose removal makes the standard error of the rest's mean (in batches of 5) smallest, at most
  half the sample. The stage's ``warmup_s`` (run.json) is the start of the first request kept,
  so the report leaves the same requests out;
- **settled**: only requests started at least the longest E2E seen before "now" count, so the
  long requests still in flight do not bias the percentiles low (a record exists only once its
  request ended);
- throughput: the completions that ended after the warm-up, per second up to "now";
- each percentile SLO is read with its order-statistic interval
  (:mod:`locust_llm.capacity.intervals`) and is *met* when the interval's top is within the
  limit, *broken* when its bottom is above, *unclear* otherwise; the error share and goodput
  have Wilson intervals and are *broken* when the interval lies past the limit, *met* when the
  value is within it (a stage is not held open to bound 0 errors below 1%: ~370 requests).

:func:`stop_reason` ends a stage when one SLO is broken; else, while the TTFT is not drifting
up (the later half's median interval above the earlier half's), when every percentile SLO is
decided or every undecided one's precision (its one-look interval) is within
:attr:`StageRule.width`, or at the stage's time or request cap; an unclear stage is then
judged by its point estimates and says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from locust_llm.capacity.intervals import (
    CONFIDENCE,
    ShareInterval,
    Tails,
    equal_tails,
    percentile_interval,
    percentile_intervals,
    share_interval,
)
from locust_llm.capacity.sequential import look_tails
from locust_llm.capacity.slo import PercentileSlo, Slo

MET, BROKEN, UNCLEAR = "met", "broken", "unclear"
#: how many time caps a confirmation may run while a percentile has no upper bound yet
CONFIRM_TIME_CAPS = 4
#: a steering stage's request cap over the fewest samples that can bound its highest
#: percentile from above at a look: room for the warm-up and the requests not yet settled (the
#: default cap, 500, is this times a P99's 368 at a single 95% look)
PROBE_ROOM = 1.36


class Sample(NamedTuple):
    """One request as the stage measurement needs it (times in seconds, NaN = none)."""

    start_s: float
    ok: bool
    ttft_s: float
    tpot_s: float
    e2e_s: float


@dataclass(frozen=True, slots=True)
class StageRule:
    """When a stage has run long enough (see :func:`stop_reason`)."""

    #: an undecided percentile is measured when its precision, (hi - lo) / value of its interval
    #: at ``confidence`` (one look's: a precision reached, not a decision), is within this
    width: float = 0.25
    min_requests: int = 20  # settled requests before any decision
    max_requests: int = 2000  # the request cap of a stage (all its samples)
    #: the request cap of a stage that only steers the search (growing, bisecting): one still
    #: unclear there is within its intervals of the boundary, and is judged by its point
    #: estimates; the confirmation of the answer runs to ``max_requests``
    probe_max_requests: int = 500
    max_duration_s: float = 300.0  # the time cap of a stage
    confidence: float = CONFIDENCE
    #: a screening stage (growing, bisecting: not the confirmation) ends once every percentile
    #: is at most this share of its limit, clearly below the boundary (0 = never)
    screen: float = 0.8

    def look_tails(self, q: float) -> Tails:
        """Each look's lower and upper tails for a q-quantile (0 < q < 1) so that the stage's
        decision over all its looks, from ``min_requests`` to ``max_requests``, keeps
        ``confidence`` on each side (:mod:`locust_llm.capacity.sequential`)."""
        if not 0.0 < q < 1.0:
            return equal_tails(self.confidence)
        return look_tails(round(q, 6), self.confidence, self.min_requests, self.max_requests)

    def steering(self, slo: Slo) -> StageRule:
        """This rule with its steering stages' cap (``probe_max_requests``) raised where a
        percentile objective could not be bounded from above within it at a look's tail (a
        P99: 490 samples at the default looks, so 667 requests)."""
        fewest = [
            math.ceil(math.log(self.look_tails(p.q / 100.0)[1]) / math.log(p.q / 100.0))
            for p in slo.percentiles
            if 0.0 < p.q < 100.0
        ]
        cap = max([self.probe_max_requests, *(math.ceil(PROBE_ROOM * n) for n in fewest)])
        return replace(self, probe_max_requests=min(cap, self.max_requests))

    def look_share_confidence(self, limit: float) -> float:
        """A share's (Wilson) interval at a look: the narrower of the two tails of its limit
        taken as the quantile (the count within it is the same binomial walk), on both sides."""
        return 1.0 - 2.0 * min(self.look_tails(limit))


@dataclass(frozen=True, slots=True)
class Reading:
    """One SLO read on a stage: its value, interval and state against the limit."""

    name: str  # as --slo writes it: ttft_p99, errors, goodput
    label: str  # as the report prints it: P99 TTFT, errors, goodput
    limit: float
    value: float
    lo: float
    hi: float
    state: str  # met | broken | unclear
    unit: str = "s"  # s | share
    at_least: bool = False  # goodput: the value must reach the limit
    #: a percentile's precision: its equal-tailed interval at the rule's confidence (one look's,
    #: not the looks' wider one), (hi - lo) / value; NaN for a share
    precision: float = math.nan

    @property
    def passes(self) -> bool:
        """The point estimate meets the objective (what an unclear reading is judged by)."""
        if math.isnan(self.value):
            return False
        return self.value >= self.limit if self.at_least else self.value <= self.limit

    @property
    def load_ratio(self) -> float:
        """How close to its limit (1 = at it; higher = worse)."""
        if math.isnan(self.value) or self.limit == 0:
            return math.inf
        return self.limit / self.value if self.at_least else self.value / self.limit

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name, "label": self.label, "limit": self.limit,
            "value": _json(self.value), "lo": _json(self.lo), "hi": _json(self.hi),
            "state": self.state, "unit": self.unit,
        }  # fmt: skip


def _json(value: float) -> float | None:
    return value if math.isfinite(value) else None


@dataclass(frozen=True, slots=True)
class StageMeasurement:
    """A stage's load and SLO readings (what the search decides by)."""

    load: float
    readings: tuple[Reading, ...]
    requests: int  # settled requests after the warm-up (the readings' sample)
    sent: int  # every request of the stage
    throughput: float  # completions per second after the warm-up
    warmup_s: float  # seconds from the stage's start to the first request kept
    warmup_requests: int
    throughput_hi: float = math.nan  # the throughput's upper bound (Poisson, 95%)
    #: the later half's median TTFT interval above the earlier half's: still climbing (an open
    #: loop's queue growing), so the stage may not end as met yet
    drifting: bool = False
    overload: str = ""  # why the stage is past capacity apart from the SLOs ("" = it is not)
    #: the start times (s) of the requests the readings kept: after the warm-up, settled
    kept_from_s: float = math.nan
    kept_to_s: float = math.nan
    pooled: int = 1  # stages at this load whose kept requests the readings pool

    @property
    def state(self) -> str:
        """broken if any reading is (or the stage is overloaded), met if all are, else unclear."""
        if self.overload or any(r.state == BROKEN for r in self.readings):
            return BROKEN
        if all(r.state == MET for r in self.readings):
            return MET
        return UNCLEAR

    @property
    def passes(self) -> bool:
        """Meets every SLO: by the intervals when decided, else by the point estimates."""
        state = self.state
        if state != UNCLEAR:
            return state == MET
        return all(r.passes for r in self.readings)

    def broken_by(self) -> list[str]:
        """What fails at this stage: the readings that do (by the rule :attr:`passes` uses) and
        the overload."""
        failing = [r.label for r in self.readings if r.state == BROKEN]
        if not failing and self.state == UNCLEAR:
            failing = [r.label for r in self.readings if not r.passes]
        return failing + ([self.overload] if self.overload else [])

    def binding(self) -> Reading | None:
        """The reading closest to (or furthest past) its limit."""
        return max(self.readings, key=lambda r: r.load_ratio, default=None)


def warmup_cut(values: Sequence[float], batch: int = 5) -> int:
    """MSER-``batch``: how many leading values to drop (a multiple of ``batch``, at most half)."""
    n_batches = len(values) // batch
    if n_batches < 4:
        return 0
    means = [sum(values[i * batch : (i + 1) * batch]) / batch for i in range(n_batches)]
    best, best_d = math.inf, 0
    suffix_sum = suffix_sq = 0.0
    stats: list[tuple[float, float]] = [(0.0, 0.0)] * (n_batches + 1)
    for i in range(n_batches - 1, -1, -1):
        suffix_sum += means[i]
        suffix_sq += means[i] * means[i]
        stats[i] = (suffix_sum, suffix_sq)
    for d in range(0, n_batches // 2 + 1):
        k = n_batches - d
        total, squares = stats[d]
        var = max(squares / k - (total / k) ** 2, 0.0)
        score = var / k
        if score < best - 1e-15:
            best, best_d = score, d
    return best_d * batch


def measure(
    samples: Iterable[Sample],
    slo: Slo,
    *,
    load: float,
    stage_start_s: float,
    now_s: float,
    rule: StageRule | None = None,
    overload: str = "",
    not_before_s: float = 0.0,
) -> StageMeasurement:
    """The stage's readings at ``now_s`` from its samples so far (see the module docstring),
    each interval at the tails of one of the ``rule``'s looks."""
    rule = rule or StageRule()
    confidence = rule.confidence
    ordered = sorted(samples, key=lambda s: s.start_s)
    sent = len(ordered)
    ok_ttfts = [s.ttft_s for s in ordered if s.ok and math.isfinite(s.ttft_s)]
    cut = warmup_cut(ok_ttfts)
    # at least one cycle: the requests sent in the stage's first median E2E (at most half the
    # time so far) met a batch still filling with the stage's new users or arrivals
    e2es = sorted(s.e2e_s for s in ordered if s.ok and math.isfinite(s.e2e_s))
    cycle = e2es[len(e2es) // 2] if e2es else 0.0
    warm_start = stage_start_s + min(cycle, max(now_s - stage_start_s, 0.0) / 2)
    if cut:
        # the start of the first completed request kept (ok requests in start order)
        ok_starts = [s.start_s for s in ordered if s.ok and math.isfinite(s.ttft_s)]
        warm_start = max(warm_start, ok_starts[cut])
    # an earlier stage's requests served into this one (the caller says until when)
    warm_start = max(warm_start, min(not_before_s, now_s))
    longest = max((s.e2e_s for s in ordered if math.isfinite(s.e2e_s)), default=0.0)
    settle_by = now_s - longest
    kept = [s for s in ordered if warm_start <= s.start_s <= settle_by]
    warm_count = sum(1 for s in ordered if s.start_s < warm_start)
    completed = [s for s in kept if s.ok]
    # completions that ended after the warm-up, per second since (a server that falls behind
    # an open loop completes fewer than were sent)
    span = now_s - warm_start
    ended = sum(1 for s in ordered if s.ok and warm_start <= s.start_s + s.e2e_s <= now_s)
    throughput = ended / span if span > 0 and ended else math.nan
    # the rate's upper bound (a Poisson count's, normal approximation): what an open loop's
    # achieved rate is held to before the stage is called overloaded
    throughput_hi = (ended + 1 + 1.96 * math.sqrt(ended + 1)) / span if span > 0 else math.nan
    ttfts = [s.ttft_s for s in completed if math.isfinite(s.ttft_s)]
    half = len(ttfts) // 2
    drifting = half >= 10 and (
        percentile_interval(ttfts[half:], 50, confidence).lo
        > percentile_interval(ttfts[:half], 50, confidence).hi
    )
    return StageMeasurement(
        load=load,
        readings=_readings(kept, slo, rule),
        kept_from_s=warm_start,
        kept_to_s=settle_by,
        requests=len(kept),
        sent=sent,
        throughput=throughput,
        throughput_hi=throughput_hi,
        drifting=drifting,
        warmup_s=max(warm_start - stage_start_s, 0.0),
        warmup_requests=warm_count,
        overload=overload,
    )


def _readings(kept: Sequence[Sample], slo: Slo, rule: StageRule) -> tuple[Reading, ...]:
    """The SLO readings of the kept requests (in start order), each interval at the tails of
    one of the rule's looks at its quantile (a share's limit is its quantile: the count within
    it is the same binomial walk)."""
    completed = [s for s in kept if s.ok]
    readings = [
        _percentile_reading(p, completed, rule.look_tails(p.q / 100.0), rule.confidence)
        for p in slo.percentiles
    ]
    if slo.errors is not None:
        failed = sum(1 for s in kept if not s.ok)
        share = share_interval(failed, len(kept), rule.look_share_confidence(slo.errors))
        readings.append(_share_reading("errors", "errors", slo.errors, share, at_least=False))
    if slo.goodput is not None:
        good = sum(1 for s in completed if _within(s, slo))
        share = share_interval(good, len(completed), rule.look_share_confidence(slo.goodput))
        readings.append(_share_reading("goodput", "goodput", slo.goodput, share, at_least=True))
    return tuple(readings)


def pool(
    parts: Sequence[tuple[StageMeasurement, Iterable[Sample]]],
    slo: Slo,
    rule: StageRule | None = None,
) -> StageMeasurement:
    """The last part's measurement with its readings taken over the kept requests of every part
    (stages at the same load, each with its own warm-up and settled window): an unclear
    confirmation is judged on every stage that measured its load, not on its own sample alone.
    """
    kept: list[Sample] = []
    for m, samples in parts:
        kept += sorted(
            (s for s in samples if m.kept_from_s <= s.start_s <= m.kept_to_s),
            key=lambda s: s.start_s,
        )
    last = parts[-1][0]
    return replace(
        last,
        readings=_readings(kept, slo, rule or StageRule()),
        requests=len(kept),
        pooled=len(parts),
    )


def _within(s: Sample, slo: Slo) -> bool:
    for bound, value in ((slo.ttft_s, s.ttft_s), (slo.tpot_s, s.tpot_s), (slo.e2e_s, s.e2e_s)):
        if bound is not None and not (value <= bound):
            return False
    return True


def _percentile_reading(
    p: PercentileSlo, completed: list[Sample], tails: Tails, confidence: float
) -> Reading:
    values = [getattr(s, p.field) for s in completed]  # in start order
    # the look's interval decides; the one-look interval at ``confidence`` is its precision
    iv, one_look = percentile_intervals(
        values, p.q, (tails, equal_tails(confidence)), in_order=True
    )
    if iv.n == 0:
        state = UNCLEAR
    elif iv.hi <= p.limit_s:
        state = MET
    elif iv.lo > p.limit_s:
        state = BROKEN
    else:
        state = UNCLEAR
    return Reading(
        p.name, p.label, p.limit_s, iv.value, iv.lo, iv.hi, state,
        precision=one_look.relative_width,
    )  # fmt: skip


def _share_reading(
    name: str, label: str, limit: float, share: ShareInterval, *, at_least: bool
) -> Reading:
    # a share fails on evidence (its interval past the limit) and otherwise holds by its
    # value: 0 errors in n bound the share below 1% only from n ~ 370 on, and a stage is not
    # held open for that
    if share.n == 0:
        state = UNCLEAR
    elif at_least:
        state = BROKEN if share.hi < limit else MET if share.value >= limit else UNCLEAR
    else:
        state = BROKEN if share.lo > limit else MET if share.value <= limit else UNCLEAR
    return Reading(name, label, limit, share.value, share.lo, share.hi, state, "share", at_least)


def clearly_below(m: StageMeasurement, screen: float) -> bool:
    """Every objective holds by its value, each percentile at most ``screen`` of its limit."""
    if m.overload or not all(r.passes for r in m.readings):
        return False
    return all(r.value <= screen * r.limit for r in m.readings if r.unit == "s")


def stop_reason(
    m: StageMeasurement,
    rule: StageRule,
    elapsed_s: float,
    *,
    screening: bool = False,
    probe: bool = False,
) -> str:
    """Why the stage may end now ("" = it goes on): ``decided`` (every percentile SLO met, or
    one broken), ``screened`` (a ``screening`` stage whose objectives all hold, every
    percentile at most ``rule.screen`` of its limit), ``measured`` (the undecided ones'
    intervals are within ``rule.width``), ``time cap``, ``request cap`` (a ``probe`` stage's:
    ``rule.probe_max_requests``)."""
    if elapsed_s >= rule.max_duration_s:
        # the answer's confirmation runs on (to CONFIRM_TIME_CAPS time caps) until its
        # intervals can bound every percentile from above: a P99 needs 368 settled requests,
        # more than a slow open loop sends in one time cap (its point estimate then rested on
        # a few: the bench's confirmations at 0.84 requests/s)
        unbounded = any(r.unit == "s" and math.isinf(r.hi) for r in m.readings)
        if probe or not unbounded or elapsed_s >= CONFIRM_TIME_CAPS * rule.max_duration_s:
            return "time cap"
    if m.sent >= (min(rule.max_requests, rule.probe_max_requests) if probe else rule.max_requests):
        return "request cap"
    if m.requests < rule.min_requests:
        return ""
    percentiles = [r for r in m.readings if r.unit == "s"]
    if any(r.state == BROKEN for r in m.readings) or m.overload:
        return "decided"
    if m.drifting:
        return ""
    undecided = [r for r in percentiles if r.state == UNCLEAR]
    if not undecided:
        return "decided"
    if screening and clearly_below(m, rule.screen):
        return "screened"
    if all(r.precision <= rule.width for r in undecided):
        return "measured"
    return ""
