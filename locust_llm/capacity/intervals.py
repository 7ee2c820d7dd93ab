"""Confidence intervals for a percentile from order statistics (distribution-free), and for a
share (Wilson), in one place: the capacity search judges SLOs by them and the report prints them.

For ``n`` samples the number ``B`` of them below the true q-quantile is Binomial(n, q), so the
interval ``[x_(r), x_(s)]`` between the r-th and s-th smallest samples covers the quantile with
probability ``P(r <= B <= s - 1)``. :func:`rank_interval` picks the equal-tailed ranks: the
largest ``r`` with ``P(B <= r - 1) <= alpha / 2`` and the smallest ``s`` with
``P(B >= s) <= alpha / 2``. A rank outside ``1..n`` means the sample cannot bound that side:
P99 from 20 samples has no upper bound (``hi = inf``), which is why a stage must run longer
before a P99 under a limit can be trusted (about 370 samples at 95%).

The ranks assume independent samples. Latencies of a queue are not (a burst slows several
requests in a row): given the values in time order, :func:`percentile_interval` takes the
ranks of the effective sample size of an AR(1) sequence with the values' lag-1
autocorrelation, which widens the interval as the correlation grows.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

#: the default coverage of every interval the search and the report state
CONFIDENCE = 0.95


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(B <= k) for B ~ Binomial(n, p), in log space over the mass that matters."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    mean, sd = n * p, math.sqrt(n * p * (1 - p))
    lo = max(0, int(mean - 12 * sd - 10))
    if k < lo:
        return 0.0
    hi = min(k, n)
    base = math.lgamma(n + 1)
    lp, lq = math.log(p), math.log1p(-p)
    total = 0.0
    for i in range(lo, hi + 1):
        total += math.exp(
            base - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
        )
    return min(total, 1.0)


#: the chance a side of an interval may miss: ``(lower, upper)``. Equal for a fixed-size
#: sample; a stage looked at as it grows spends each side's on its own (capacity/sequential.py)
Tails = tuple[float, float]


def equal_tails(confidence: float) -> Tails:
    """Both sides' tails of an equal-tailed interval at ``confidence``."""
    tail = (1.0 - confidence) / 2.0
    return tail, tail


@functools.lru_cache(maxsize=4096)
def rank_interval(
    n: int, q: float, confidence: float = CONFIDENCE, tails: Tails | None = None
) -> tuple[int, int]:
    """1-based ranks ``(r, s)`` of the order statistics bounding the q-quantile (0 < q < 1)
    with at least ``confidence`` (or the given ``tails``, lower and upper, instead);
    ``r = 0``: no lower bound, ``s = n + 1``: no upper bound."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {q}")
    if n <= 0:
        return 0, 1
    lower, upper = tails if tails is not None else equal_tails(confidence)

    def F(k: int) -> float:
        return binomial_cdf(k, n, q)

    # lower: the largest r (0..n) with P(B <= r - 1) <= the lower tail
    lo_k, hi_k = 0, n  # bisect the monotone CDF for r
    while lo_k < hi_k:
        mid = (lo_k + hi_k + 1) // 2
        if F(mid - 1) <= lower:
            lo_k = mid
        else:
            hi_k = mid - 1
    r = lo_k
    # upper: the smallest s (1..n+1) with P(B >= s) = 1 - F(s - 1) <= the upper tail
    lo_k, hi_k = 1, n + 1
    while lo_k < hi_k:
        mid = (lo_k + hi_k) // 2
        if 1.0 - F(mid - 1) <= upper:
            hi_k = mid
        else:
            lo_k = mid + 1
    return r, lo_k


@dataclass(frozen=True, slots=True)
class PercentileInterval:
    """A percentile of ``n`` samples and its order-statistic interval ``[lo, hi]``.

    ``value`` is the percentile as the report computes it (linear interpolation, numpy's
    default); ``lo = 0`` / ``hi = inf`` where the sample cannot bound that side; NaN when empty.
    """

    q: float  # 0..100
    n: int
    value: float
    lo: float
    hi: float
    confidence: float = CONFIDENCE

    @property
    def bounded(self) -> bool:
        """Both sides bounded by a sample."""
        return self.n > 0 and math.isfinite(self.hi) and self.lo > 0

    @property
    def relative_width(self) -> float:
        """(hi - lo) / value: inf when a side is unbounded, NaN without samples."""
        if self.n == 0 or not self.value > 0:
            return math.nan if self.n == 0 else math.inf
        return (self.hi - self.lo) / self.value


def _linear(sorted_values: Sequence[float], q: float) -> float:
    n = len(sorted_values)
    pos = (n - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, n - 1)
    frac = pos - low
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * frac


def lag1_correlation(values: Sequence[float]) -> float:
    """The lag-1 autocorrelation of ``values`` in their order (0 for fewer than 3)."""
    n = len(values)
    if n < 3:
        return 0.0
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values)
    if var <= 0:
        return 0.0
    cov = sum((values[i] - mean) * (values[i + 1] - mean) for i in range(n - 1))
    return cov / var


def effective_size(values: Sequence[float]) -> float:
    """How many independent samples ``values`` (in time order) are worth: ``n (1 - rho) /
    (1 + rho)`` for a positive lag-1 autocorrelation ``rho`` (an AR(1) sequence's), else n."""
    rho = lag1_correlation(values)
    n = len(values)
    if rho <= 0:
        return float(n)
    return max(1.0, n * (1 - rho) / (1 + rho))


def ranks_at_size(
    data: Sequence[float], q: float, size: float, tails: Tails
) -> tuple[float, float]:
    """``(lo, hi)`` bounding the ``q``-th percentile (0 < q < 100) of the sorted ``data`` at the
    lower and upper ``tails``, with the ranks of ``size`` effective samples (at most
    ``len(data)``) mapped back onto the sample; 0 / inf where it cannot bound a side."""
    n = len(data)
    m = max(1, int(min(size, n)))
    r, s = rank_interval(m, q / 100.0, 1.0 - sum(tails), tails)
    if m < n:
        r = math.floor(r * n / m) if r >= 1 else 0
        s = min(math.ceil(s * n / m), n) if s <= m else n + 1
    return (data[r - 1] if r >= 1 else 0.0), (data[s - 1] if s <= n else math.inf)


def percentile_intervals(
    values: Sequence[float], q: float, each: Sequence[Tails], *, in_order: bool = False
) -> list[PercentileInterval]:
    """The ``q``-th percentile (0 < q < 100) of the finite ``values``, with one interval for
    each pair of lower and upper tails in ``each``, from one sort and one effective size.

    ``in_order``: the values are in time order (requests by start) and may be correlated (a
    queue makes consecutive latencies alike): the ranks are those of the effective sample size
    (:func:`effective_size`), mapped back onto the sample, so the interval is wider.
    """
    finite = [v for v in values if math.isfinite(v)]
    data = sorted(finite)
    n = len(data)
    if n == 0:
        return [
            PercentileInterval(q, 0, math.nan, math.nan, math.nan, 1.0 - sum(tails))
            for tails in each
        ]
    size = effective_size(finite) if in_order else float(n)
    value = _linear(data, q)
    out = []
    for tails in each:
        lo, hi = ranks_at_size(data, q, size, tails)
        # the interpolated estimate can fall just outside the two order statistics (P99 of 2
        # samples); widening the interval to hold it keeps its coverage
        out.append(
            PercentileInterval(q, n, value, min(lo, value), max(hi, value), 1.0 - sum(tails))
        )
    return out


def percentile_interval(
    values: Sequence[float],
    q: float,
    confidence: float = CONFIDENCE,
    *,
    in_order: bool = False,
    tails: Tails | None = None,
) -> PercentileInterval:
    """The ``q``-th percentile (0 < q < 100) of the finite ``values`` with its interval,
    equal-tailed at ``confidence`` or with the given lower and upper ``tails``
    (:func:`percentile_intervals`)."""
    each = [tails if tails is not None else equal_tails(confidence)]
    return percentile_intervals(values, q, each, in_order=in_order)[0]


@dataclass(frozen=True, slots=True)
class ShareInterval:
    """``hits`` of ``n`` as a share with its Wilson score interval (NaN without samples)."""

    hits: int
    n: int
    value: float
    lo: float
    hi: float


def share_interval(hits: int, n: int, confidence: float = CONFIDENCE) -> ShareInterval:
    """The share ``hits / n`` and its Wilson interval at ``confidence``."""
    if n <= 0:
        return ShareInterval(hits, n, math.nan, math.nan, math.nan)
    z = _z(confidence)
    p = hits / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return ShareInterval(hits, n, p, max(0.0, centre - half), min(1.0, centre + half))


def _z(confidence: float) -> float:
    """The standard normal quantile at (1 + confidence) / 2 (bisection on erf)."""
    target = (1 + confidence) / 2
    lo, hi = 0.0, 10.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
