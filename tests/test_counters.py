"""The one counter rule (locust_llm.telemetry.counters): restarts, gaps, NaN, one sample,
unsorted samples, window edges, sources, the rate; and the report, web UI and simulator's lag
warning reading counters through it."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from rundir_factory import counter_series

from locust_llm.report.diagnosis.lag import lag_warnings
from locust_llm.report.tables import TelemetryIndex, _telemetry_stats
from locust_llm.telemetry.counters import (
    counter_steps,
    increase,
    rate,
    series_increase,
    series_rate,
    summed_increase,
    summed_rate,
)
from locust_llm.webui.data import prefix_cache_hit_rate

NAN = math.nan


def _arrays(*values: float, start: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """One sample a second from ``start``."""
    return np.arange(len(values), dtype=float) + start, np.array(values, dtype=float)


def _reference(values: list[float]) -> float:
    """Prometheus' increase() without extrapolation, written out: every step, a drop adding
    the value after it."""
    total = 0.0
    for before, after in itertools.pairwise(values):
        total += after - before if after >= before else after
    return total


def _frame(rows: list[tuple[float, str, str, float]]) -> pd.DataFrame:
    """(time_s, signal, source, value) rows as a telemetry frame."""
    frame = pd.DataFrame(rows, columns=["time_s", "signal", "source", "value"])
    frame["gpu"] = ""
    return frame


# -- the steps -------------------------------------------------------------------------------


def test_steps_of_a_growing_counter_are_its_differences() -> None:
    assert counter_steps(np.array([1.0, 3.0, 3.0, 7.0])).tolist() == [2.0, 0.0, 4.0]


def test_a_drop_is_a_restart_counted_from_zero() -> None:
    assert counter_steps(np.array([5.0, 9.0, 2.0, 6.0, 1.0])).tolist() == [4.0, 2.0, 4.0, 1.0]
    assert counter_steps(np.array([5.0, 0.0])).tolist() == [0.0]  # restarted, nothing since


def test_a_drop_in_any_of_one_servers_counters_restarts_them_all() -> None:
    values = np.array([[10.0, 4.0], [12.0, 1.0], [15.0, 3.0]])  # column 1 restarted at row 1
    assert counter_steps(values).tolist() == [[12.0, 1.0], [3.0, 2.0]]


def test_a_nan_sample_gives_nan_steps_not_zero() -> None:
    steps = counter_steps(np.array([1.0, NAN, 4.0]))
    assert np.isnan(steps).all()


def test_one_or_no_sample_has_no_steps() -> None:
    assert counter_steps(np.array([3.0])).size == 0
    assert counter_steps(np.array([])).size == 0


# -- one source's increase -------------------------------------------------------------------


def test_increase_runs_from_the_value_at_lo_to_the_value_at_hi() -> None:
    t, v = _arrays(0.0, 10.0, 20.0, 30.0, 40.0)  # at 0, 1, 2, 3, 4 s
    assert increase(t, v) == 40.0
    assert increase(t, v, 1.0, 3.0) == 20.0  # samples at the edges are the edges' values
    assert increase(t, v, 1.5, 3.5) == 20.0  # from the 1 s sample (known at 1.5) to the 3 s one
    assert increase(t, v, 1.5, 3.5, past_end=True) == 30.0  # to the first at or after 3.5 s


def test_adjacent_windows_add_up_to_the_window_over_both() -> None:
    rng = np.random.default_rng(7)
    t = np.sort(rng.uniform(0.0, 100.0, 200))
    v = np.cumsum(rng.uniform(0.0, 5.0, 200))
    v[120:] -= v[119]  # a restart
    for cut in (10.0, 37.5, t[50], 60.0, t[120], 99.0):
        both = increase(t, v, 5.0, 100.0)
        assert increase(t, v, 5.0, cut) + increase(t, v, cut, 100.0) == pytest.approx(both)


def test_restarts_inside_the_window_are_counted_from_zero() -> None:
    values = [100.0, 150.0, 20.0, 60.0, 5.0, 25.0]
    t, v = _arrays(*values)
    assert increase(t, v) == pytest.approx(_reference(values)) == 50.0 + 20.0 + 40.0 + 5.0 + 20.0
    # end above start yet a restart between: not the end-point difference (25 - 100 < 0, and
    # 160 - 100 = 60 would miss what was counted before the restart)
    t, v = _arrays(100.0, 150.0, 20.0, 160.0)
    assert increase(t, v) == 50.0 + 20.0 + 140.0


def test_random_counters_with_restarts_match_the_written_out_rule() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        values = np.cumsum(rng.uniform(0.0, 3.0, 50))
        for at in rng.integers(1, 50, 3):
            values[at:] -= values[at] - rng.uniform(0.0, 1.0)  # restart near zero
        t = np.arange(50.0)
        assert increase(t, values) == pytest.approx(_reference(values.tolist()))


def test_nan_samples_are_gaps_bridged_never_zero() -> None:
    t, v = _arrays(0.0, 10.0, NAN, 30.0)
    assert increase(t, v) == 30.0  # not a restart to 0 and back
    assert increase(t, v, 1.5, 2.5) != increase(t, v, 1.5, 2.5)  # only the gap inside: NaN
    times = np.array([0.0, NAN, 2.0])
    assert increase(times, np.array([1.0, 50.0, 4.0])) == 3.0  # a sample with no time: dropped


def test_one_sample_or_none_measures_nothing() -> None:
    assert math.isnan(increase(np.array([5.0]), np.array([3.0])))
    assert math.isnan(increase(np.array([]), np.array([])))
    assert math.isnan(increase(*_arrays(NAN, NAN, 4.0)))
    t, v = _arrays(1.0, 2.0, 3.0, start=10.0)
    assert math.isnan(increase(t, v, 0.0, 5.0))  # the window ends before the first sample
    assert math.isnan(increase(t, v, 20.0, 30.0))  # ... starts after the last
    assert math.isnan(increase(t, v, 20.0, 30.0, past_end=True))


def test_a_flat_counter_measured_twice_grew_by_zero() -> None:
    assert increase(*_arrays(7.0, 7.0)) == 0.0


def test_a_source_first_seen_inside_the_window_counts_from_its_first_sample() -> None:
    t, v = _arrays(500.0, 510.0, 530.0, start=5.0)
    assert increase(t, v, 0.0, 10.0) == 30.0


def test_past_end_falls_back_to_the_last_sample() -> None:
    t, v = _arrays(0.0, 10.0, 20.0)
    assert increase(t, v, 0.0, 9.0, past_end=True) == 20.0


def test_unsorted_samples_are_taken_in_time_order() -> None:
    t, v = _arrays(0.0, 10.0, 5.0, 15.0, 30.0)  # a restart at 2 s
    order = np.array([3, 0, 4, 2, 1])
    for lo, hi in ((-math.inf, math.inf), (0.5, 3.5), (1.0, 4.0)):
        assert increase(t[order], v[order], lo, hi) == increase(t, v, lo, hi)
    assert rate(t[order], v[order]) == rate(t, v)


# -- the rate --------------------------------------------------------------------------------


def test_rate_is_the_increase_over_the_time_it_was_measured_over() -> None:
    t, v = _arrays(0.0, 10.0, 30.0, 60.0)
    assert rate(t, v) == pytest.approx(20.0)
    assert rate(t, v, 1.5, 3.0) == pytest.approx(50.0 / 2.0)  # from the 1 s sample to 3 s
    t, v = _arrays(0.0, 100.0, 10.0)  # a restart: 100 + 10 over 2 s
    assert rate(t, v) == pytest.approx(55.0)


def test_rate_needs_two_samples_at_two_times() -> None:
    assert math.isnan(rate(np.array([1.0]), np.array([4.0])))
    assert math.isnan(rate(np.array([1.0, 1.0]), np.array([4.0, 6.0])))
    assert math.isnan(rate(*_arrays(NAN, 3.0)))


# -- sources ---------------------------------------------------------------------------------


def test_sources_are_measured_apart_and_summed() -> None:
    t = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 2.5])
    v = np.array([0.0, 1000.0, 10.0, 1005.0, 30.0, 1010.0])  # a and b interleaved
    src = np.array(["a", "b", "a", "b", "a", "b"])
    assert summed_increase(t, v, src) == 30.0 + 10.0
    assert summed_rate(t, v, src) == pytest.approx(30.0 / 2.0 + 10.0 / 2.0)


def test_a_source_that_measured_nothing_is_left_out_and_none_is_nan() -> None:
    t = np.array([0.0, 1.0, 2.0])
    v = np.array([1.0, 4.0, 99.0])
    src = np.array(["a", "a", "b"])  # b: one sample
    assert summed_increase(t, v, src) == 3.0
    assert math.isnan(summed_increase(t[2:], v[2:], src[2:]))
    assert math.isnan(summed_rate(t[2:], v[2:], src[2:]))


def test_series_increase_runs_from_the_sample_before_the_window_per_source() -> None:
    series = counter_series({"phase_queue_s": [
        (0.5, "a", 1.0), (1.5, "a", 3.0), (2.5, "a", 6.0),
        (1.2, "b", 10.0), (2.2, "b", 12.0),
    ]})  # fmt: skip
    assert series_increase(series, "phase_queue_s", 1.0, 3.0) == pytest.approx(5.0 + 2.0)
    assert math.isnan(series_increase(series, "phase_queue_s", 5.0, 6.0))
    assert math.isnan(series_increase(series, "nope", 0.0, 9.0))


def test_server_counter_rates_survive_a_restart_and_sum_sources() -> None:
    rows = []
    for t in range(0, 11):
        rows.append((float(t), "generation_tokens_total", "a", 100.0 * t))
        b = 100.0 * t if t < 6 else 100.0 * (t - 6)  # b restarts at 6 s
        rows.append((float(t), "generation_tokens_total", "b", b))
    tel = TelemetryIndex(_frame(rows))
    # b's drop at 6 s: from zero again, 0 counted for that second (its restart lost it)
    assert series_rate(tel.series, "generation_tokens_total", 2.0, 10.0) == pytest.approx(
        100.0 + 700.0 / 8.0
    )
    assert series_rate(tel.series, "generation_tokens_total", 7.0, 10.0) == pytest.approx(200.0)
    assert math.isnan(series_rate(tel.series, "nope", 0.0, 10.0))


# -- the readers -----------------------------------------------------------------------------


def test_the_stage_table_reads_preemptions_and_tokens_by_the_rule() -> None:
    rows = []
    for t, pre, gen in ((0.0, 3.0, 0.0), (10.0, 4.0, 500.0), (20.0, 1.0, 200.0), (30.0, 2.0, 0.0)):
        rows.append((t, "preemptions", "s", pre))  # a restart at 20 s
        rows.append((t, "generation_tokens_total", "s", gen))  # restarts at 20 s and at 30 s
    stats = _telemetry_stats(TelemetryIndex(_frame(rows)), 5.0, 25.0)
    # from the 0 s scrape (the value at 5 s) to the 20 s one: 1 preemption, then a restart to 1
    assert stats["preemptions"] == 2.0
    # generated tokens to the first scrape at or after the window's end (30 s): 500 + 200 + 0
    assert stats["server_output_tokens"] == 700.0
    assert stats["server_output_tps"] == pytest.approx(700.0 / 20.0)
    empty = _telemetry_stats(TelemetryIndex(_frame(rows[:2])), 5.0, 25.0)
    assert math.isnan(empty["preemptions"]) and math.isnan(empty["server_output_tokens"])


def test_busy_slots_per_decode_is_the_windows_own_average_over_sources() -> None:
    rows = []
    # source a: 2 busy slots per call before 10 s, then 4: its since-start average moves
    for t, calls, avg in ((0.0, 100.0, 2.0), (10.0, 200.0, 2.0), (20.0, 300.0, 8.0 / 3.0)):
        rows += [(t, "decode_calls_total", "a", calls), (t, "busy_slots_per_decode", "a", avg)]
    # source b: 1 busy slot per call throughout
    for t, calls in ((0.0, 0.0), (10.0, 50.0), (20.0, 100.0)):
        rows += [(t, "decode_calls_total", "b", calls), (t, "busy_slots_per_decode", "b", 1.0)]
    stats = _telemetry_stats(TelemetryIndex(_frame(rows)), 10.0, 20.0)
    # a: 100 calls x 4 slots, b: 50 calls x 1 slot
    assert stats["busy_slots_per_decode"] == pytest.approx((400.0 + 50.0) / 150.0)


def test_the_live_hit_rate_survives_a_server_restart() -> None:
    rows = [
        (100.0, "a", "prefix_cache_queries", "", 1000.0),
        (100.0, "a", "prompt_tokens_cached_total", "", 900.0),
        (110.0, "a", "prefix_cache_queries", "", 200.0),  # restarted: 200 looked up since
        (110.0, "a", "prompt_tokens_cached_total", "", 50.0),
        (120.0, "a", "prefix_cache_queries", "", 400.0),
        (120.0, "a", "prompt_tokens_cached_total", "", 150.0),
    ]
    assert prefix_cache_hit_rate(rows, window_s=60.0) == pytest.approx(150.0 / 400.0)
    no_hits = [r for r in rows if r[2] == "prefix_cache_queries"]
    assert prefix_cache_hit_rate(no_hits, window_s=60.0) is None  # hits unknown, not 0


def test_the_lag_warning_sums_simulators_and_survives_a_restart() -> None:
    rows = []
    for t, steps, lag in ((0.0, 1000.0, 1.0), (10.0, 2000.0, 3.0), (20.0, 500.0, 2.5)):
        rows += [(t, "sim_steps", "a", steps), (t, "sim_lag_s", "a", lag)]  # a restarts
        rows += [(t, "sim_late_steps", "a", 0.0)]
    for t, steps in ((0.0, 0.0), (10.0, 1000.0), (20.0, 2000.0)):
        rows += [(t, "sim_steps", "b", steps), (t, "sim_lag_s", "b", 0.0)]
        rows += [(t, "sim_late_steps", "b", 0.0)]
    # 2 + 2.5 s of lag over 1000 + 500 + 2000 steps: 1.3 ms a step, under the 3 ms warning
    assert lag_warnings(_frame(rows), [("x", 0.0, 20.0)]) == []
    # a after its restart: 2.5 s over 500 steps (the old end-point difference: -1500 steps)
    (warning,) = lag_warnings(_frame(rows[:9]), [("x", 10.0, 20.0)])
    assert "mean step lag 5.0 ms" in warning
