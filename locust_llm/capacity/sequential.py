"""The tails each look at a stage must use so that the stage's decision keeps its stated confidence.

A stage is not judged once: its stop rule looks at it each time its records have grown by
``LOOK_GROWTH`` (5%), from ``first`` to ``last`` requests, and ends it at the first look whose
interval lies wholly below a limit (met) or above it (broken). Each look with a 95% interval
errs on a side 2.5% of the time, but a stage whose percentile sits at its limit gets dozens of
looks: with 5% growth from 20 to 2000 requests and independent samples, the rule called such a
stage met 15.9% of the time at P90 and 8.1% at P99, broken 16.9% and 12.5% (exact, by
:func:`crossings`; ``bench/interval_coverage.py``).

:func:`look_tails` gives each look's interval its lower and upper tails so that, for independent
samples, the chance that any look's interval lies wholly on one side of the true quantile is at
most ``(1 - confidence) / 2`` per side. For a q-quantile ``xi`` the count of samples below it
after ``n`` samples is a random walk with Binomial(1, q) steps, and the order-statistic
interval ``[x_(r), x_(s)]`` lies above ``xi`` exactly when the count is below ``r``, below it
exactly when the count reaches ``s``. The walk's distribution is carried from look to look
(a convolution with the binomial of the samples in between), the mass past either rank at a
look is taken out as that side's crossing, and each side's per-look tail is bisected until its
total is within its budget. The ranks are those of
:func:`~locust_llm.capacity.intervals.rank_interval` at those tails.

Correlated samples (a queue's) are handled as each look handles them (the effective sample
size); the looks' calibration is the independent walk's. Calibrated up to ``MAX_CALIBRATED``
requests: a stage capped higher reuses that calibration for its later looks.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from locust_llm.capacity.intervals import Tails

#: a stage's stop rule looks at it each time its records have grown by this factor
LOOK_GROWTH = 1.05
#: the walk is carried this far at most; later looks reuse the calibration
MAX_CALIBRATED = 4000


def look_sizes(first: int, last: int, growth: float = LOOK_GROWTH) -> list[int]:
    """The sample counts at which a stage is looked at: ``first``, then each ``growth`` times
    (at least one more) up to ``last``."""
    sizes, n = [], max(1, first)
    while n <= last:
        sizes.append(n)
        n = max(n + 1, math.ceil(n * growth))
    return sizes


@functools.lru_cache(maxsize=1024)
def _binomial_pmf(n: int, q: float) -> np.ndarray:
    """Binomial(n, q)'s probabilities (cached: read only)."""
    k = np.arange(n + 1, dtype=float)
    log_choose = np.array(
        [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in range(n + 1)]
    )
    return np.exp(log_choose + k * math.log(q) + (n - k) * math.log1p(-q))


def _ranks(pmf: np.ndarray, tails: Tails) -> tuple[int, int]:
    """The ranks ``(r, s)`` of the binomial whose pmf is given, at the lower and upper tails (as
    :func:`~locust_llm.capacity.intervals.rank_interval` picks them)."""
    lower, upper = tails
    n = len(pmf) - 1
    cdf = np.cumsum(pmf)
    survival = np.cumsum(pmf[::-1])[::-1]  # survival[k] = P(B >= k)
    r = int(np.searchsorted(cdf, lower, side="right"))  # the largest r with P(B <= r-1) <= lower
    within = np.nonzero(survival[1:] <= upper)[0]  # the smallest s in 1..n with P(B >= s) <= upper
    s = int(within[0]) + 1 if len(within) else n + 1
    return min(r, n), s


def crossings(q: float, tails: Tails, sizes: list[int]) -> tuple[float, float]:
    """For independent samples with the true q-quantile as the limit: the chance that some look
    (at ``sizes``, each interval at the lower and upper ``tails``) has its interval wholly
    below the quantile (called met), and wholly above it (called broken). A side whose tail is
    0 never decides."""
    walk = _binomial_pmf(sizes[0], q).copy()
    met = broken = 0.0
    for i, n in enumerate(sizes):
        r, s = _ranks(_binomial_pmf(n, q), tails)
        if s <= n:
            met += float(walk[s:].sum())
            walk[s:] = 0.0
        if r >= 1:
            broken += float(walk[:r].sum())
            walk[:r] = 0.0
        if i + 1 < len(sizes):
            walk = np.convolve(walk, _binomial_pmf(sizes[i + 1] - n, q))
    return met, broken


def _side_tail(q: float, budget: float, sizes: list[int], upper: bool) -> float:
    """The largest tail (to 24 bisections of its log) of one side, the other never deciding,
    whose wrong decisions over the looks stay within ``budget``."""

    def wrong(tail: float) -> float:
        met, broken = crossings(q, (0.0, tail) if upper else (tail, 0.0), sizes)
        return met if upper else broken

    if wrong(budget) <= budget:
        return budget
    lo, hi = math.log(budget / len(sizes)), math.log(budget)  # Bonferroni holds at lo
    for _ in range(24):
        mid = (lo + hi) / 2
        if wrong(math.exp(mid)) <= budget:
            lo = mid
        else:
            hi = mid
    return math.exp(lo)


@functools.lru_cache(maxsize=256)
def look_tails(
    q: float, confidence: float, first: int, last: int, growth: float = LOOK_GROWTH
) -> Tails:
    """Each look's lower and upper tails for the q-quantile (0 < q < 1) so that a stage looked
    at from ``first`` to ``last`` samples (each ``growth``) is wrongly called broken, and
    wrongly called met, each with at most ``(1 - confidence) / 2`` (independent samples): each
    side spends its own budget, so a P99's upper side, which cannot decide before 368 samples,
    spends it on fewer looks. Both ``(1 - confidence) / 2`` for a single look."""
    budget = (1.0 - confidence) / 2.0
    sizes = look_sizes(first, min(last, MAX_CALIBRATED), growth)
    if len(sizes) <= 1:
        return budget, budget
    return _side_tail(q, budget, sizes, upper=False), _side_tail(q, budget, sizes, upper=True)
