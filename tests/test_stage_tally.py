"""Each stage's live figures (locust_llm.live.stage_tally), kept incrementally as records arrive,
are
the figures a full recomputation from the same records gives (numpy over every record, each
time), out of order, across stages, in a long stage whose ticks are pruned, and once a stage has
ended; and the recorder feeds them from the workers' batches."""

from __future__ import annotations

import math
from operator import attrgetter

import numpy as np
import pytest

from locust_llm.client.recorder import Recorder
from locust_llm.live.histogram import REL_ERROR
from locust_llm.live.stage_tally import (
    _KEEP_TICKS,
    TICKS_PER_S,
    WINDOW_S,
    StageTallies,
)
from locust_llm.metrics import RECORD_FIELDS, RequestRecord

astuple = attrgetter(*RECORD_FIELDS)  # a record as the recorder keeps it
KINDS = ("", "", "", "", "", "http_5xx", "timeout", "cancelled", "client_error")


def _records(rng: np.random.Generator, n: int, stages: int, span_s: float) -> list[RequestRecord]:
    out = []
    for i in range(n):
        kind = str(rng.choice(KINDS))
        ok = kind == ""
        start = 1_000.0 + float(rng.uniform(0, span_s))
        e2e = float(rng.lognormal(0.0, 0.7)) if kind != "timeout" else math.nan
        out.append(
            RequestRecord(
                request_id=f"r{i}",
                endpoint="/chat",
                stage=int(rng.integers(stages)),
                start_wall_s=start,
                # half of them open loop: sent up to 2 s after their scheduled time
                scheduled_wall_s=start - float(rng.uniform(0, 2)) if i % 2 else math.nan,
                ok=ok,
                error_kind=kind,
                ttft_s=float(rng.lognormal(-2.0, 0.8)) if ok else math.nan,
                e2e_s=e2e,
                output_tokens=int(rng.integers(1, 300)) if ok else 0,
            )
        )
    return out


def _recompute(
    records: list[RequestRecord], stage: int, start_s: float, end_s: float, now_s: float
) -> dict:
    """The figures from scratch: every record of the stage, by the module's definitions."""
    mine = [r for r in records if r.stage == stage]
    ok = [r for r in mine if r.ok]
    failed = [r for r in mine if not r.ok and r.error_kind not in ("cancelled", "client_error")]
    upto = now_s if math.isnan(end_s) else min(now_s, end_s)
    lo = math.floor(max(start_s, upto - WINDOW_S) * TICKS_PER_S)
    hi = math.floor(upto * TICKS_PER_S)
    ends = np.array(
        [r.start_wall_s + (r.e2e_s if math.isfinite(r.e2e_s) else 0.0) for r in ok], dtype=float
    )
    inside = (np.floor(ends * TICKS_PER_S) >= lo) & (np.floor(ends * TICKS_PER_S) < hi)
    window = (hi - lo) / TICKS_PER_S
    delays = np.array([r.start_wall_s - r.scheduled_wall_s for r in ok], dtype=float)
    late = delays[inside] if len(ok) else delays
    tokens = np.array([r.output_tokens for r in ok], dtype=float)
    return {
        "completed": len(ok),
        "failed": len(failed),
        "qps": inside.sum() / window if hi > lo else math.nan,
        "output_tokens_per_s": tokens[inside].sum() / window if hi > lo else math.nan,
        "ttft_p50_s": float(np.median([r.ttft_s for r in ok])) if ok else math.nan,
        "window_s": window if hi > lo else math.nan,
        "dispatch_delay_s": float(np.mean(late[np.isfinite(late)]))
        if np.isfinite(late).any()
        else math.nan,
    }


def _check(got: object, want: dict) -> None:
    assert got.completed == want["completed"] and got.failed == want["failed"]  # type: ignore[attr-defined]
    for key in ("qps", "output_tokens_per_s", "window_s", "dispatch_delay_s"):
        value = getattr(got, key)
        assert (math.isnan(value) and math.isnan(want[key])) or value == pytest.approx(
            want[key], rel=1e-12
        ), key
    ttft = got.ttft_p50_s  # type: ignore[attr-defined]
    if math.isnan(want["ttft_p50_s"]):
        assert math.isnan(ttft)
    else:  # the histogram reads back within its bucket error
        assert abs(ttft - want["ttft_p50_s"]) <= REL_ERROR * want["ttft_p50_s"] * 1.0001


def test_incremental_figures_equal_a_full_recomputation_at_every_poll() -> None:
    rng = np.random.default_rng(11)
    records = _records(rng, 3_000, stages=3, span_s=40.0)
    # they arrive in batches, out of order within a batch and across workers
    order = np.argsort([r.start_wall_s + float(rng.uniform(0, 3)) for r in records])
    tallies, seen = StageTallies(), []
    bounds = {0: (1_000.0, math.nan), 1: (1_005.3, math.nan), 2: (1_012.75, 1_031.2)}
    for batch in np.array_split(order, 60):
        for i in batch:
            tallies.add_row(astuple(records[i]))
            seen.append(records[i])
        now = max(r.start_wall_s for r in seen) + float(rng.uniform(-1, 2))
        for stage, (start, end) in bounds.items():
            if stage == 2 and now >= end:
                continue  # its rates freeze at its end: checked below
            _check(
                tallies.figures(stage, start, end, now), _recompute(seen, stage, start, end, now)
            )


def test_a_stage_that_began_less_than_a_tick_ago_has_no_rate_yet() -> None:
    tallies = StageTallies()
    got = tallies.figures(0, 100.0, math.nan, 100.05)
    assert math.isnan(got.qps) and math.isnan(got.ttft_p50_s) and got.completed == 0
    assert tallies.figures(0, 100.0, math.nan, 102.0).qps == 0.0  # two seconds, nothing done


def test_an_ended_stage_keeps_its_rates_and_counts_its_tail() -> None:
    """Open loop: completions after the stage's end are its tail; its QPS is what completed in
    its window (as the report's achieved QPS), and stays so once the end has passed."""
    rng = np.random.default_rng(3)
    records = [r for r in _records(rng, 800, stages=1, span_s=20.0) if r.ok]
    start, end = 1_000.0, 1_012.0
    tallies = StageTallies()
    for r in records:
        tallies.add_row(astuple(r))
    first = tallies.figures(0, start, end, end + 0.5)
    _check(first, _recompute(records, 0, start, end, end + 0.5))
    assert not tallies.stages[0].ticks  # kept as figures, its ticks dropped
    late = RequestRecord(request_id="late", endpoint="/chat", stage=0, start_wall_s=1_011.5,
                         ok=True, ttft_s=9.0, e2e_s=30.0, output_tokens=5)  # fmt: skip
    tallies.add_row(astuple(late))
    again = tallies.figures(0, start, end, end + 60.0)
    assert (again.qps, again.output_tokens_per_s, again.window_s) == (
        first.qps, first.output_tokens_per_s, first.window_s,
    )  # fmt: skip
    assert again.completed == first.completed + 1
    assert not tallies.stages[0].ticks


def test_a_long_stage_keeps_a_bounded_number_of_ticks() -> None:
    """An hour at 20 completions a second: memory stays flat, the last 10 s stay exact."""
    tallies, records = StageTallies(), []
    for i in range(3_600 * 20):
        t = 1_000.0 + i / 20
        r = RequestRecord(request_id=str(i), endpoint="/chat", stage=0, start_wall_s=t - 0.5,
                          ok=True, ttft_s=0.1, e2e_s=0.5, output_tokens=1 + i % 7)  # fmt: skip
        tallies.add_row(astuple(r))
        if i >= 3_600 * 20 - 400:
            records.append(r)
        assert len(tallies.stages[0].ticks) <= 2 * _KEEP_TICKS + 1
    now = 1_000.0 + 3_600.0
    got = tallies.figures(0, 1_000.0, math.nan, now)
    want = _recompute(records, 0, 1_000.0, math.nan, now)
    assert got.qps == pytest.approx(want["qps"]) and got.qps == pytest.approx(20.0, rel=0.01)
    assert got.output_tokens_per_s == pytest.approx(want["output_tokens_per_s"])
    assert got.completed == 3_600 * 20


def test_the_recorder_feeds_them_from_the_workers_batches() -> None:
    master = Recorder(is_worker=False)
    for name, stage in (("w1", 0), ("w2", 1)):
        worker = Recorder(is_worker=True)
        for i in range(10):
            worker.add(
                RequestRecord(
                    request_id=f"{name}{i}",
                    endpoint="/chat",
                    stage=stage,
                    start_wall_s=100.0 + i * 0.1,
                    ok=i % 5 != 0,
                    error_kind="" if i % 5 else "http_5xx",
                    ttft_s=0.05 * (1 + stage),
                    e2e_s=1.0,
                    output_tokens=8,
                )
            )
        master.receive_batch(worker.take_batch(name))
    zero = master.stage_tallies.figures(0, 100.0, math.nan, 102.0)
    assert (zero.completed, zero.failed) == (8, 2)
    assert zero.qps == pytest.approx(8 / 2.0) and zero.output_tokens_per_s == pytest.approx(32.0)
    one = master.stage_tallies.figures(1, 100.0, math.nan, 102.0)
    assert one.ttft_p50_s == pytest.approx(0.1, rel=REL_ERROR) and zero.ttft_p50_s < 0.06
    master.clear()
    assert master.stage_tallies.figures(0, 100.0, math.nan, 102.0).completed == 0
