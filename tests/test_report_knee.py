"""The knee's cap and reading rules of issue 15: never a cap at an overloaded stage or from one
stage, non-monotonic stages chosen by the objective, MoE expert activation understood."""

from __future__ import annotations

import math

from locust_llm.report.diagnosis.knee import find_knee, moe_expected_gain
from locust_llm.roofline.floors import get_model


def _row(stage: int, c: float, qps: float, p99: float, **kw: float) -> dict:
    row = {"stage": stage, "kind": "step", "concurrency": c, "rate": math.nan,
           "completed": 100.0, "qps": qps, "latency_p99_s": p99, "error_rate": 0.0}  # fmt: skip
    row.update(kw)
    return row


def test_a_single_stage_gives_no_cap() -> None:
    knee = find_knee([_row(0, 8, 10.0, 1.0)])
    assert knee.cap_stage is None and "no cap" in knee.conclusion


def test_never_a_cap_at_an_overloaded_stage() -> None:
    rows = [_row(0, 1, 1.0, 1.0), _row(1, 4, 3.9, 1.1), _row(2, 16, 12.0, 1.5)]
    assert find_knee(rows).cap_stage == 2
    knee = find_knee(rows, overloaded=[2])
    assert knee.cap_stage == 1 and any("load 16 is overloaded" in n for n in knee.notes)


def test_non_monotonic_stages_are_chosen_by_the_objective() -> None:
    # the issue's case: c=4 has twice c=1's QPS and a lower P99 than c=2
    rows = [_row(0, 1, 1.0, 1.0), _row(1, 2, 1.01, 3.0), _row(2, 4, 2.0, 1.2)]
    knee = find_knee(rows)
    assert knee.cap == "4", knee


def test_knee_above_the_sweep_when_the_top_still_scales() -> None:
    rows = [_row(0, 1, 1.0, 1.0), _row(1, 4, 3.9, 1.05), _row(2, 16, 15.0, 1.1)]
    assert any("the knee lies above it" in n for n in find_knee(rows).notes)


def test_moe_expert_activation_is_not_near_the_limit() -> None:
    mixtral = get_model("mixtral-8x7b")
    expected = moe_expected_gain(mixtral, 1, 4)
    assert 1.0 < expected < 4.0  # more experts read per step: sublinear by physics
    rows = [_row(0, 1, 1.0, 1.0, running=1.0), _row(1, 4, 0.95 * expected, 1.1, running=4.0)]
    plain = find_knee(rows)
    assert "near the limit" in plain.reading  # a dense reading of the same numbers
    moe = find_knee(rows, model=mixtral)
    assert "not the limit" in moe.reading and "near the limit" not in moe.reading
    assert any("the knee lies above it" in n for n in moe.notes)
    assert find_knee(rows, model=get_model("mistral-7b")).reading == plain.reading


def test_the_reading_says_how_much_a_sublinear_run_scales() -> None:
    # the demo's numbers: QPS 0.8 -> 4.7 -> 14.2 at concurrency 1, 10, 50 (each step at least
    # half of proportional, so both steps still scale) is x17.8 for x50 the load, not "linear"
    rows = [_row(0, 1, 0.8, 1.2), _row(1, 10, 4.7, 1.5), _row(2, 50, 14.2, 2.9)]
    knee = find_knee(rows)
    assert knee.reading.startswith(
        "1-50 scales x17.8 for x50 the load (QPS 0.8 -> 14.2, 36% efficiency)"
    ), knee.reading
    assert "linearly" not in knee.reading
    assert any("the knee lies above it" in n for n in knee.notes)  # issue 15 item 7 holds


def test_the_reading_says_linearly_only_near_x1_per_x1() -> None:
    near = find_knee([_row(0, 1, 1.0, 1.0), _row(1, 10, 9.6, 1.05)])
    assert near.reading == "1-10 scales linearly (QPS 1 -> 9.6, x9.6 for x10 the load)"
    below = find_knee([_row(0, 1, 1.0, 1.0), _row(1, 10, 8.5, 1.05)])
    assert below.reading.startswith("1-10 scales x8.5 for x10 the load (QPS 1 -> 8.5, 85%")
