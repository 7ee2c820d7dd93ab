"""Tests of the log-bucketed latency histogram against numpy on raw samples."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from locust_llm.errors import InputError
from locust_llm.live.histogram import MAX_S, MIN_S, REL_ERROR, LatencyHistogram

QS = [0.0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0]


def _log_uniform(rng: np.random.Generator, n: int, lo: float = MIN_S, hi: float = MAX_S):
    return np.exp(rng.uniform(math.log(lo), math.log(hi), n))


def _filled(values, weights=None) -> LatencyHistogram:
    hist = LatencyHistogram()
    hist.add_many(values.tolist(), None if weights is None else weights.tolist())
    return hist


def _rel_err(estimate, reference) -> float:
    return float(np.max(np.abs(np.asarray(estimate) / np.asarray(reference) - 1)))


@pytest.mark.parametrize(
    "sampler",
    [
        lambda rng, n: _log_uniform(rng, n),  # the whole range
        lambda rng, n: rng.lognormal(math.log(0.012), 0.3, n),  # a TPOT-like cluster
        lambda rng, n: rng.uniform(0.1, 0.1005, n),  # nearly constant (many values per bucket)
        lambda rng, n: _log_uniform(rng, n, 1e-4, 1e-3),  # sub-millisecond ITL
    ],
)
def test_quantiles_within_one_percent_of_numpy(sampler) -> None:
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 10, 2001):
        values = sampler(rng, n)
        hist = _filled(values)
        reference = np.percentile(values, [q * 100 for q in QS])
        assert _rel_err(hist.quantiles(QS), reference) <= REL_ERROR + 1e-9
        assert hist.quantile(0.5) == hist.quantiles([0.5])[0]


def test_every_bucket_value_within_rel_error_across_the_range() -> None:
    values = _log_uniform(np.random.default_rng(3), 5000)
    for v in values.tolist():
        hist = LatencyHistogram()
        hist.add(v)
        hist.add(v * 10)  # median is then an interpolation of two bucket values, not min/max
        assert abs(hist.quantile(0.25) / (v + (v * 10 - v) * 0.25) - 1) <= REL_ERROR + 1e-9


def test_merge_of_splits_equals_union_exactly() -> None:
    rng = np.random.default_rng(11)
    values = np.concatenate([_log_uniform(rng, 3000), [0.0, 1e-7, 700.0, 5000.0]])
    weights = rng.integers(1, 5, len(values))
    union = _filled(values, weights)
    merged = LatencyHistogram()
    for part in np.array_split(rng.permutation(len(values)), 7):
        merged.merge(_filled(values[part], weights[part]))
    assert merged == union
    assert merged.count == union.count == int(weights.sum())
    assert merged.min == union.min == 0.0 and merged.max == union.max == 5000.0
    assert merged.sum == pytest.approx(union.sum, rel=1e-12)
    assert merged.quantiles(QS) == union.quantiles(QS)
    assert merged.prometheus_buckets() == union.prometheus_buckets()


def test_round_trip_through_dict_and_json() -> None:
    rng = np.random.default_rng(5)
    hist = _filled(np.concatenate([_log_uniform(rng, 500), [-1.0, 900.0]]))
    data = hist.to_dict()
    assert len(data["idx"]) < 600  # sparse: only non-empty buckets travel
    again = LatencyHistogram.from_dict(json.loads(json.dumps(data)))
    assert again == hist
    assert again.sum == hist.sum and again.quantiles(QS) == hist.quantiles(QS)
    empty = LatencyHistogram.from_dict(LatencyHistogram().to_dict())
    assert empty.count == 0 and math.isnan(empty.min)


@pytest.mark.parametrize(
    "broken",
    [
        {"layout": "log:1:2:0.5", "count": 0, "sum": 0, "min": None, "max": None, "idx": []},
        "not a dict",
        {"layout": None},
    ],
)
def test_from_dict_refuses_other_layouts_and_garbage(broken) -> None:
    with pytest.raises(InputError, match="histogram"):
        LatencyHistogram.from_dict(broken)


def test_from_dict_refuses_bad_bucket_index() -> None:
    data = LatencyHistogram().to_dict()
    data.update(count=1, sum=1.0, min=1.0, max=1.0, idx=[10**6], n=[1])
    with pytest.raises(InputError, match="out of range"):
        LatencyHistogram.from_dict(data)


def test_weights_count_like_repeated_values() -> None:
    rng = np.random.default_rng(2)
    values = rng.lognormal(math.log(0.02), 1.0, 400)
    weights = rng.integers(1, 9, 400)
    hist = _filled(values, weights)
    repeated = np.repeat(values, weights)
    assert hist.count == len(repeated)
    assert hist.mean == pytest.approx(repeated.mean(), rel=1e-12)
    reference = np.percentile(repeated, [q * 100 for q in QS])
    assert _rel_err(hist.quantiles(QS), reference) <= REL_ERROR + 1e-9


def test_fractional_weights_keep_mean_exact() -> None:
    hist = LatencyHistogram()
    hist.add(0.010, 2.5)
    hist.add(0.030, 0.5)
    assert hist.count == pytest.approx(3.0)
    assert hist.mean == pytest.approx((0.025 + 0.015) / 3.0)
    assert hist.quantile(1.0) == 0.030


def test_empty_is_nan_not_zero() -> None:
    hist = LatencyHistogram()
    assert hist.count == 0 and hist.sum == 0.0
    for value in (hist.mean, hist.min, hist.max, hist.quantile(0.5), *hist.quantiles(QS)):
        assert math.isnan(value)
    assert hist.prometheus_buckets((0.1,)) == [(0.1, 0), (math.inf, 0)]


def test_single_value_is_exact_everywhere() -> None:
    hist = LatencyHistogram()
    hist.add(0.01234)
    assert hist.quantiles(QS) == [0.01234] * len(QS)
    assert hist.min == hist.max == hist.mean == 0.01234


def test_nan_is_ignored_and_out_of_range_values_still_count() -> None:
    hist = LatencyHistogram()
    hist.add(float("nan"))
    assert hist.count == 0
    for v in (0.0, 1e-6, 0.5, 601.0, 3600.0):
        hist.add(v)
    assert hist.count == 5
    assert hist.min == 0.0 and hist.max == 3600.0
    assert hist.quantile(0.0) == 0.0 and hist.quantile(1.0) == 3600.0
    assert hist.quantile(0.5) == pytest.approx(0.5, rel=REL_ERROR)


def test_reset_and_copy() -> None:
    hist = _filled(np.array([0.1, 0.2, 0.3]))
    clone = hist.copy()
    hist.reset()
    assert hist == LatencyHistogram() and math.isnan(hist.mean)
    assert clone.count == 3 and clone.max == 0.3


@pytest.mark.parametrize("q", [-0.1, 1.5, float("nan")])
def test_quantile_out_of_range_is_refused(q: float) -> None:
    with pytest.raises(InputError, match="quantile"):
        LatencyHistogram().quantile(q)


def test_prometheus_buckets_are_cumulative_counts_at_bounds() -> None:
    rng = np.random.default_rng(9)
    values = np.concatenate([_log_uniform(rng, 4000, 1e-5, 2000.0), [0.0]])
    hist = _filled(values)
    buckets = hist.prometheus_buckets()
    les = [le for le, _ in buckets]
    counts = [c for _, c in buckets]
    assert les[-1] == math.inf and counts[-1] == len(values)
    assert counts == sorted(counts)
    for le, got in buckets[:-1]:
        exact_lo = int(np.sum(values <= le * (1 - 2 * REL_ERROR)))
        exact_hi = int(np.sum(values <= le * (1 + 2 * REL_ERROR)))
        assert exact_lo <= got <= exact_hi, le
    custom = hist.prometheus_buckets([1.0, 0.01])
    assert [le for le, _ in custom] == [0.01, 1.0, math.inf]


@pytest.mark.parametrize("weighted", [False, True])
def test_add_many_is_add_one_by_one_exactly(weighted: bool) -> None:
    """The inlined batch add leaves the same buckets, count, sum, min and max, bit for bit."""
    rng = np.random.default_rng(7)
    values = [*rng.lognormal(-4.5, 1.5, 500).tolist(), 0.0, -1.0, math.nan, 1e-9, 700.0, 599.999]
    weights = rng.uniform(0.5, 3.0, len(values)).tolist() if weighted else None
    one, many = LatencyHistogram(), LatencyHistogram()
    for i, v in enumerate(values):
        one.add(v) if weights is None else one.add(v, weights[i])
    many.add_many(values, weights)
    assert many.to_dict() == one.to_dict()
    assert (many.count, many.sum, many.min, many.max) == (one.count, one.sum, one.min, one.max)
    with pytest.raises(ValueError):  # weights of another length: what came first stays added
        many.add_many([0.01, 0.02], [1.0])
    assert many.count == one.count + 1
