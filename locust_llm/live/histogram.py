"""A log-bucketed latency histogram: cheap to fill per token, exact to merge, small to send.

Pure (no I/O, no Locust). The live LLM stats (TTFT, TPOT, ITL, E2E) keep one per metric on every
worker, send :meth:`LatencyHistogram.to_dict` to the master, which :meth:`~LatencyHistogram.merge`
s them; percentiles come from :meth:`~LatencyHistogram.quantile`.

Layout (fixed, so every histogram can merge with every other): values in seconds from
:data:`MIN_S` (0.05 ms) to :data:`MAX_S` (10 min) fall in geometric buckets
``[MIN_S * g**k, MIN_S * g**(k+1))`` with ``g = (1 + REL_ERROR) / (1 - REL_ERROR)``; a bucket is
represented by the point whose relative distance to both edges is :data:`REL_ERROR` (0.8 %), so
any value read back is within 0.8 % of a value that was added. Values below :data:`MIN_S`
(including 0 and negatives) go in an underflow bucket, values at or above :data:`MAX_S` in an
overflow bucket; both are counted, and read back as the exact minimum / maximum seen. NaN is "no
value" and is ignored, so ``hist.add(record.tpot_s)`` is safe for one-token answers.

Quantiles follow numpy's default (linear interpolation between order statistics, rank
``q * (count - 1)``); a weight ``w`` counts like ``w`` copies of the value. Results are clamped to
the exact [min, max], so ``quantile(0)`` and ``quantile(1)`` are exact.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from locust_llm.errors import InputError

NAN = float("nan")

#: Smallest value resolved (seconds); below it is the underflow bucket.
MIN_S = 5e-5
#: Largest value resolved (seconds); at or above it is the overflow bucket.
MAX_S = 600.0
#: Largest relative error of a value read back from a bucket.
REL_ERROR = 0.008

_GROWTH = (1 + REL_ERROR) / (1 - REL_ERROR)
_INV_LOG_GROWTH = 1.0 / math.log(_GROWTH)
_LOG_MIN = math.log(MIN_S)
#: Regular buckets between MIN_S and MAX_S.
N_BUCKETS = math.ceil((math.log(MAX_S) - _LOG_MIN) * _INV_LOG_GROWTH)
_UNDER = 0  # index of the underflow bucket
_OVER = N_BUCKETS + 1  # index of the overflow bucket
# index = int(log(v) * _INV_LOG_GROWTH - _SHIFT) for MIN_S <= v < MAX_S (regular buckets 1..N)
_SHIFT = _LOG_MIN * _INV_LOG_GROWTH - 1.0
#: Layout id sent with every dict, so histograms of different layouts are never merged.
LAYOUT = f"log:{MIN_S:g}:{MAX_S:g}:{REL_ERROR:g}"

# representative value of regular bucket k: lower edge * (1 + REL_ERROR)
_REPR: list[float] = (
    [NAN] + [MIN_S * _GROWTH ** (k - 1) * (1 + REL_ERROR) for k in range(1, N_BUCKETS + 1)] + [NAN]
)
# upper edge of regular bucket k (for Prometheus export)
_UPPER: list[float] = [MIN_S] + [MIN_S * _GROWTH**k for k in range(1, N_BUCKETS + 1)] + [math.inf]

#: Default Prometheus ``le`` bounds (seconds) for :meth:`LatencyHistogram.prometheus_buckets`.
PROMETHEUS_BOUNDS_S: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip

_log = math.log


class LatencyHistogram:
    """Counts of latencies (seconds) in fixed log buckets; see the module docstring."""

    __slots__ = ("_counts", "_max", "_min", "count", "sum")

    def __init__(self) -> None:
        self._counts: list[float] = [0] * (N_BUCKETS + 2)
        #: total weight added (an int while every weight is an int)
        self.count: float = 0
        #: weighted sum of the values added (seconds)
        self.sum: float = 0.0
        self._min = math.inf
        self._max = -math.inf

    def add(self, value_s: float, weight: float = 1) -> None:
        """Count ``value_s`` (seconds) ``weight`` times (weight > 0); NaN is ignored. O(1)."""
        if value_s >= MIN_S:
            if value_s < MAX_S:
                i = int(_log(value_s) * _INV_LOG_GROWTH - _SHIFT)
                if i > N_BUCKETS:  # rounding just below MAX_S
                    i = N_BUCKETS
            else:
                i = _OVER
        elif value_s < MIN_S:
            i = _UNDER
        else:  # NaN: no value
            return
        self._counts[i] += weight
        self.count += weight
        self.sum += value_s * weight
        if value_s < self._min:
            self._min = value_s
        if value_s > self._max:
            self._max = value_s

    def add_many(self, values_s: Iterable[float], weights: Iterable[float] | None = None) -> None:
        """Add every value (with its weight when ``weights`` is given): :meth:`add` for each,
        in order, inlined (one request's inter-token latencies per call: no call per token)."""
        pairs = (
            ((v, 1) for v in values_s) if weights is None else zip(values_s, weights, strict=True)
        )
        counts = self._counts
        count, total, low, high = self.count, self.sum, self._min, self._max
        try:
            for v, w in pairs:
                if v >= MIN_S:
                    if v < MAX_S:
                        i = int(_log(v) * _INV_LOG_GROWTH - _SHIFT)
                        if i > N_BUCKETS:  # rounding just below MAX_S
                            i = N_BUCKETS
                    else:
                        i = _OVER
                elif v < MIN_S:
                    i = _UNDER
                else:  # NaN: no value
                    continue
                counts[i] += w
                count += w
                total += v * w
                if v < low:
                    low = v
                if v > high:
                    high = v
        finally:  # what was added stays added, as with add() one by one
            self.count, self.sum, self._min, self._max = count, total, low, high

    def merge(self, other: LatencyHistogram) -> None:
        """Add every count of ``other`` into this histogram (exact: bucket counts just add)."""
        if other.count == 0:
            return
        mine = self._counts
        for i, c in enumerate(other._counts):
            if c:
                mine[i] += c
        self.count += other.count
        self.sum += other.sum
        self._min = min(self._min, other._min)
        self._max = max(self._max, other._max)

    def reset(self) -> None:
        """Forget everything added."""
        self._counts = [0] * (N_BUCKETS + 2)
        self.count = 0
        self.sum = 0.0
        self._min = math.inf
        self._max = -math.inf

    def since(self, earlier: LatencyHistogram) -> LatencyHistogram:
        """What was added after ``earlier``, an earlier copy of this same histogram (exact per
        bucket; the min and max are this histogram's, so they bound, not equal, the window's)."""
        new = LatencyHistogram()
        new._counts = [a - b for a, b in zip(self._counts, earlier._counts, strict=True)]
        new.count = self.count - earlier.count
        new.sum = self.sum - earlier.sum
        new._min, new._max = self._min, self._max
        return new

    def copy(self) -> LatencyHistogram:
        """An independent copy."""
        new = LatencyHistogram()
        new.merge(self)
        return new

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LatencyHistogram):
            return NotImplemented
        return (
            self._counts == other._counts
            and self.count == other.count
            and self._min == other._min
            and self._max == other._max
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"LatencyHistogram(count={self.count}, mean={self.mean:.6g}, "
            f"p50={self.quantile(0.5):.6g}, max={self.max:.6g})"
        )

    @property
    def mean(self) -> float:
        """Weighted mean of the values added (nan while empty)."""
        return self.sum / self.count if self.count > 0 else NAN

    @property
    def min(self) -> float:
        """Smallest value added (seconds), nan while empty."""
        return self._min if self.count > 0 else NAN

    @property
    def max(self) -> float:
        """Largest value added (seconds), nan while empty."""
        return self._max if self.count > 0 else NAN

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (0..1), numpy-style linear interpolation; nan while empty."""
        return self.quantiles((q,))[0]

    def quantiles(self, qs: Sequence[float]) -> list[float]:
        """Several quantiles in one pass over the buckets (``qs`` in any order)."""
        for q in qs:
            if not 0.0 <= q <= 1.0:  # also refuses NaN
                raise InputError(f"quantile {q!r} is out of range; expected 0 <= q <= 1")
        if self.count <= 0:
            return [NAN] * len(qs)
        last = max(self.count - 1, 0)
        # each q needs the values at ranks floor(r) and ceil(r), r = q * (count - 1)
        wanted = sorted({r for q in qs for r in _ranks(q * last)})
        found = self._values_at_ranks(wanted)
        out = []
        for q in qs:
            rank = q * last
            lo_rank, hi_rank = _ranks(rank)
            lo, hi = found[lo_rank], found[hi_rank]
            value = lo + (hi - lo) * (rank - lo_rank)
            out.append(min(max(value, self._min), self._max))
        return out

    def _values_at_ranks(self, ranks: list[float]) -> dict[float, float]:
        """Bucket value of the element at each (sorted, integer-valued) 0-based rank."""
        found: dict[float, float] = {}
        top = self.count - 1  # the element at the last rank is the maximum, exactly
        while ranks and ranks[-1] >= top:
            found[ranks.pop()] = self._max
        j = 0
        cum = 0.0
        counts = self._counts
        for i, c in enumerate(counts):
            if not c:
                continue
            cum += c
            while j < len(ranks) and ranks[j] < cum:
                found[ranks[j]] = self._bucket_value(i)
                j += 1
            if j == len(ranks):
                return found
        for r in ranks[j:]:  # float rounding in the cumulative sum
            found[r] = self._max
        return found

    def _bucket_value(self, i: int) -> float:
        if i == _UNDER:
            return self._min
        if i == _OVER:
            return self._max
        return _REPR[i]

    def prometheus_buckets(
        self, bounds_s: Sequence[float] = PROMETHEUS_BOUNDS_S
    ) -> list[tuple[float, float]]:
        """Cumulative counts ``[(le, count of values <= le), ..., (inf, count)]``.

        A bucket counts under ``le`` when its upper edge is <= ``le`` (so a count is exact for
        values whose bucket does not straddle ``le``; a straddling bucket is off by at most
        ``2 * REL_ERROR`` of ``le``). Underflow counts under every ``le >= MIN_S``, overflow
        under ``le >= max``.
        """
        edges = sorted(float(b) for b in bounds_s if b != math.inf)
        out: list[tuple[float, float]] = []
        counts = self._counts
        cum: float = 0
        i = 0
        for le in edges:
            while i <= N_BUCKETS and _UPPER[i] <= le * (1 + 1e-12):
                cum += counts[i]
                i += 1
            extra = counts[_OVER] if counts[_OVER] and self._max <= le else 0
            out.append((le, cum + extra))
        out.append((math.inf, self.count))
        return out

    def to_dict(self) -> dict[str, Any]:
        """Compact, msgpack/JSON-friendly form: only non-empty buckets."""
        idx = [i for i, c in enumerate(self._counts) if c]
        return {
            "layout": LAYOUT,
            "count": self.count,
            "sum": self.sum,
            "min": self._min if self.count > 0 else None,
            "max": self._max if self.count > 0 else None,
            "idx": idx,
            "n": [self._counts[i] for i in idx],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LatencyHistogram:
        """Rebuild a histogram from :meth:`to_dict`; refuses another layout or a broken dict."""
        if not isinstance(data, dict):
            raise InputError(f"histogram data is a {type(data).__name__}; expected a dict")
        if data.get("layout") != LAYOUT:
            raise InputError(
                f"histogram layout {data.get('layout')!r} differs from this version's {LAYOUT!r}"
            )
        hist = cls()
        try:
            idx, n = data["idx"], data["n"]
            if len(idx) != len(n):
                raise ValueError("idx and n differ in length")
            for i, c in zip(idx, n, strict=True):
                if not (isinstance(i, int) and 0 <= i <= _OVER):
                    raise ValueError(f"bucket index {i!r} out of range")
                hist._counts[i] += c
            hist.count = data["count"]
            hist.sum = float(data["sum"])
            if hist.count > 0:
                hist._min = float(data["min"])
                hist._max = float(data["max"])
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"histogram data is malformed: {exc}") from None
        return hist


def _ranks(rank: float) -> tuple[float, float]:
    lo = math.floor(rank)
    return float(lo), float(math.ceil(rank))
