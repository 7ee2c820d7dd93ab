"""A Prometheus counter's increase (and rate) over a time window: the one rule, reset-aware.

Pure (numpy only). Every cumulative signal (``cumulative=True`` in
:mod:`locust_llm.telemetry.signals`: token and request counters, preemptions, histogram sums and
counts) is read through these functions by the report, the verdict, the live web UI and the
simulator's lag warning.

The rule, per source (one server's series):

* Missing data is missing: samples whose time or value is NaN (a failed scrape) are dropped,
  never read as 0. Samples are taken in time order, whatever order they come in.
* A counter only grows. A sample lower than the one before is a restart: the counter counted
  from zero again, so that step adds the new value (what the restart lost in between is lost),
  as Prometheus' ``increase()`` does, without its extrapolation to the window's edges.
* The window ``[lo, hi]`` is measured from the counter's value known at ``lo`` (its last sample
  at or before ``lo``; a source first seen after ``lo`` counts from its first sample) to its
  value known at ``hi`` (its last sample at or before ``hi``; with ``past_end``, its first at
  or after ``hi``, else its last). So adjacent windows add up to the window that covers both.
* Fewer than two such samples measure nothing: NaN. Over several sources the increases are
  summed over those that measured one; NaN when none did.
* The rate is the increase over the time between the two samples it was measured between.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

#: A signal's samples as the report's telemetry index holds them: name -> (time_s, value,
#: source, gpu), one entry per sample, every source together.
SeriesLookup = Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]


def counter_steps(values: np.ndarray) -> np.ndarray:
    """The increase between consecutive samples of one source (along axis 0): a drop is a
    restart, so that step is the value after it. With 2-D ``values`` (samples x counters of one
    server) a drop in any counter restarts the whole row: one process holds them all. A NaN
    sample gives NaN steps; drop missing samples first to bridge them."""
    values = np.asarray(values, dtype=float)
    steps = np.diff(values, axis=0)
    dropped = steps < 0
    if steps.ndim == 2:
        dropped = np.broadcast_to(dropped.any(axis=1, keepdims=True), steps.shape)
    steps[dropped] = values[1:][dropped]
    return steps


def _measured(
    times: np.ndarray, values: np.ndarray, lo: float, hi: float, past_end: bool
) -> tuple[float, float]:
    """(increase, seconds between the two samples it runs between) of one source; NaN, NaN
    when the window holds no two samples."""
    t, v = np.asarray(times, dtype=float), np.asarray(values, dtype=float)
    keep = np.isfinite(t) & np.isfinite(v)
    t, v = t[keep], v[keep]
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    start = max(int(np.searchsorted(t, lo, "right")) - 1, 0)
    if past_end:
        end = min(int(np.searchsorted(t, hi, "left")), t.size - 1)
    else:
        end = int(np.searchsorted(t, hi, "right")) - 1
    if end <= start:
        return math.nan, math.nan
    return float(counter_steps(v[start : end + 1]).sum()), float(t[end] - t[start])


def increase(
    times: np.ndarray,
    values: np.ndarray,
    lo: float = -math.inf,
    hi: float = math.inf,
    *,
    past_end: bool = False,
) -> float:
    """One source's increase over ``[lo, hi]`` by the module's rule (NaN: not measured)."""
    return _measured(times, values, lo, hi, past_end)[0]


def rate(
    times: np.ndarray, values: np.ndarray, lo: float = -math.inf, hi: float = math.inf
) -> float:
    """One source's increase over ``[lo, hi]`` per second of the time it was measured over
    (NaN: not measured, or both samples at one time)."""
    grown, seconds = _measured(times, values, lo, hi, False)
    return grown / seconds if seconds > 0 else math.nan


def _per_source(
    times: np.ndarray, values: np.ndarray, sources: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray]]:
    sources = np.asarray(sources)
    return [(times[sources == s], values[sources == s]) for s in np.unique(sources)]


def _sum_measured(measured: list[float]) -> float:
    known = [m for m in measured if not math.isnan(m)]
    return math.fsum(known) if known else math.nan


def summed_increase(
    times: np.ndarray,
    values: np.ndarray,
    sources: np.ndarray,
    lo: float = -math.inf,
    hi: float = math.inf,
    *,
    past_end: bool = False,
) -> float:
    """Every source's increase over ``[lo, hi]``, summed (NaN: no source measured one)."""
    parts = _per_source(np.asarray(times, float), np.asarray(values, float), sources)
    return _sum_measured([increase(t, v, lo, hi, past_end=past_end) for t, v in parts])


def summed_rate(
    times: np.ndarray,
    values: np.ndarray,
    sources: np.ndarray,
    lo: float = -math.inf,
    hi: float = math.inf,
) -> float:
    """Every source's rate over ``[lo, hi]``, summed (NaN: no source measured one)."""
    parts = _per_source(np.asarray(times, float), np.asarray(values, float), sources)
    return _sum_measured([rate(t, v, lo, hi) for t, v in parts])


def series_increase(
    series: SeriesLookup, signal: str, lo: float, hi: float, *, past_end: bool = False
) -> float:
    """:func:`summed_increase` of ``signal`` in a :data:`SeriesLookup` (NaN: no such signal)."""
    if signal not in series:
        return math.nan
    t, v, src, _ = series[signal]
    return summed_increase(t, v, src, lo, hi, past_end=past_end)


def series_rate(series: SeriesLookup, signal: str, lo: float, hi: float) -> float:
    """:func:`summed_rate` of ``signal`` in a :data:`SeriesLookup` (NaN: no such signal)."""
    if signal not in series:
        return math.nan
    t, v, src, _ = series[signal]
    return summed_rate(t, v, src, lo, hi)
