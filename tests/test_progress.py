"""The progress line: live (carriage return) on a terminal, plain periodic lines otherwise.

Driven with a fake clock and snapshots; the snapshots' source, the master's ``/llm/stats``, is
exercised end to end by tests/test_demo.py.
"""

from __future__ import annotations

import io
import itertools
import math

from locust_llm.live.progress import (
    HEADER_WAIT_S,
    ProgressLine,
    Snapshot,
    StageSeen,
    snapshot_from_payload,
)
from locust_llm.workloads.stages import StagePlan, parse_stages


def _plan(stages: int, duration_s: float | None = None) -> tuple[StagePlan, ...]:
    """``stages`` closed-loop stages, each ``duration_s`` long (None: ending at a count)."""
    requests = None if duration_s else 6
    return tuple(
        StagePlan(concurrency=i + 1, requests=requests, duration_s=duration_s)
        for i in range(stages)
    )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _snap(stage: int | None, requests: int, qps: float = 2.0, ttft: float = 0.031) -> Snapshot:
    name = "" if stage is None else f"c={[1, 4][stage]}"
    target = None if stage is None else [6, 30][stage]
    return Snapshot(stage, 2, name, target, requests, qps, ttft)


def _drive(live: bool) -> str:
    out, clock = io.StringIO(), Clock()
    line = ProgressLine(out, live=live, every_s=10.0, plan=_plan(2), clock=clock)
    for t, snap in [(0, _snap(0, 0)), (1, _snap(0, 2)), (12, _snap(0, 5)), (13, _snap(1, 7)),
                    (14, _snap(1, 20)), (15, _snap(None, 38))]:  # fmt: skip
        clock.now = 100.0 + t
        line.update(snap)
    line.close()
    return out.getvalue()


def test_terminal_redraws_one_line_per_stage() -> None:
    text = _drive(live=True)
    lines = text.split("\n")
    assert len(lines) == 3 and lines[-1] == ""  # one finished line per stage
    first, second = lines[0].split("\r")[1:], lines[1].split("\r")[1:]
    assert first[0].startswith("  stage 1/2 c=1: 0/6 requests, 0 s, QPS 2.0, TTFT P50 31 ms")
    assert first[-1].startswith("  stage 1/2 c=1: 7/6 requests, 13 s")  # counted at the change
    assert second[-1].startswith("  stage 2/2 c=4: 31/30 requests, 2 s")
    # a redraw is padded to cover a longer previous text
    assert all(len(a) <= len(b) for a, b in itertools.pairwise(first))


def test_plain_output_prints_every_interval_and_at_each_stage_end() -> None:
    text = _drive(live=False)
    assert "\r" not in text
    assert text.splitlines() == [
        "  stage 1/2 c=1: 5/6 requests, 12 s, QPS 2.0, TTFT P50 31 ms",
        "  stage 1/2 c=1: 7/6 requests, 13 s, QPS 2.0, TTFT P50 31 ms (stage done)",
        "  stage 2/2 c=4: 31/30 requests, 2 s, QPS 2.0, TTFT P50 31 ms (stage done)",
    ]


def test_a_message_keeps_the_live_line() -> None:
    out, clock = io.StringIO(), Clock()
    line = ProgressLine(out, live=True, plan=_plan(2), clock=clock)
    line.update(_snap(0, 1))
    line.message("  ERROR something")
    shown = "  stage 1/2 c=1: 0/6 requests, 0 s, QPS 2.0, TTFT P50 31 ms"
    assert (
        out.getvalue() == "\r" + shown + "\r" + " " * len(shown) + "\r  ERROR something\n" + shown
    )


def test_duration_stages_show_elapsed_against_the_stage_length() -> None:
    out, clock = io.StringIO(), Clock()
    line = ProgressLine(out, live=False, every_s=0.0, plan=_plan(2, 30.0), clock=clock)
    line.update(Snapshot(1, 2, "c=4", None, 10, math.nan, math.nan))
    clock.now += 5
    line.update(Snapshot(1, 2, "c=4", None, 15, 1.0, math.nan))
    assert out.getvalue().splitlines()[-1] == (
        "  stage 2/2 c=4: 5 requests, 5/30 s, QPS 1.0, TTFT P50 n/a ms"
    )


def test_the_planned_length_shows_in_any_unit_and_a_count_stage_shows_none() -> None:
    plan = parse_stages(concurrency="1,4", requests="9,30", duration="1m,2h")
    line = ProgressLine(io.StringIO(), live=False, plan=(*plan, *_plan(1)))
    assert [line.planned_s(i) for i in range(2)] == [60.0, 7200.0]
    assert math.isnan(line.planned_s(2)) and math.isnan(line.planned_s(3))


def test_snapshot_reads_the_aggregated_row_and_the_stage() -> None:
    payload = {
        "stage": {"index": 1, "name": "c=4", "target_requests": 30, "count": 2},
        "endpoints": [
            {"name": "/v1/chat/completions", "requests": 9, "requests_per_s": 1.0,
             "ttft_p50_s": 0.5},
            {"name": "Aggregated", "requests": 12, "requests_per_s": 1.5, "ttft_p50_s": None},
        ],
    }  # fmt: skip
    snap = snapshot_from_payload(payload)
    assert (snap.stage_index, snap.stage_name, snap.target_requests, snap.requests) == (
        1, "c=4", 30, 12,
    )  # fmt: skip
    assert snap.qps == 1.5 and math.isnan(snap.ttft_p50_s)
    assert snapshot_from_payload({"stage": None, "endpoints": []}).stage_index is None


def test_failed_requests_are_on_the_line_so_qps_is_not_read_as_success() -> None:
    """A dead server answers fast: 10 requests a second, all failed, must not read as QPS 10
    alone. The count is the stage's own (failures of earlier stages left out)."""
    out, clock = io.StringIO(), Clock()
    line = ProgressLine(out, live=False, every_s=0.0, plan=_plan(2), clock=clock)
    line.update(Snapshot(0, 2, "c=1", 6, 0, math.nan, math.nan, failures=0))
    line.update(Snapshot(0, 2, "c=1", 6, 4, 2.0, math.nan, failures=4))
    line.update(Snapshot(1, 2, "c=4", 30, 10, 10.0, math.nan, failures=6))
    line.update(Snapshot(1, 2, "c=4", 30, 20, 10.0, math.nan, failures=6))
    text = out.getvalue().splitlines()
    assert "stage 1/2 c=1: 4/6 requests, 4 failed (100%)," in text[1]
    assert "stage 2/2 c=4: 10/30 requests, 0 s" in text[-1]  # its own count: none failed
    assert "failed" not in text[-1]
    assert (
        snapshot_from_payload(
            {"endpoints": [{"name": "Aggregated", "requests": 5, "failures": 5}]}
        ).failures
        == 5
    )


def test_users_backing_off_are_on_the_line() -> None:
    out, clock = io.StringIO(), Clock()
    line = ProgressLine(out, live=False, every_s=0.0, plan=_plan(1), clock=clock)
    snap = snapshot_from_payload({
        "stage": {"index": 0, "name": "c=8", "count": 1},
        "backoff": {"users_waiting": 8, "waits": 40},
        "endpoints": [{"name": "Aggregated", "requests": 8, "failures": 8}],
    })  # fmt: skip
    line.update(snap)
    assert "8 users backing off (server unreachable)" in out.getvalue()
    line.update(Snapshot(0, 1, "c=8", None, 20, 5.0, math.nan, failures=8))
    assert "backing off" not in out.getvalue().splitlines()[-1]


def test_a_stage_shorter_than_a_poll_still_gets_its_line() -> None:
    """The first poll already sees stage 2 (stage 1's 3 requests took less than a poll), and
    the sweep's last stage ends before any poll sees it: every stage has one line."""
    out, clock = io.StringIO(), Clock()
    line = ProgressLine(out, live=False, every_s=60.0, plan=_plan(3), clock=clock)
    begun = (StageSeen("c=1", 3, 3), StageSeen("c=4", 8, 5))
    line.update(Snapshot(1, 3, "c=4", 8, 5, 2.0, 0.05, begun=begun))
    line.update(Snapshot(1, 3, "c=4", 8, 11, 2.0, 0.05, begun=begun))
    line.update(Snapshot(None, 3, "", None, 27, 2.0, 0.05, begun=(*begun, StageSeen("c=8", 16))))
    line.close()
    text = out.getvalue().splitlines()
    assert (
        text[0]
        == "  stage 1/3 c=1: 3/3 requests, ended between two polls of the live stats (stage done)"
    )
    assert text[1].startswith("  stage 2/3 c=4: ") and text[1].endswith("(stage done)")
    assert text[2].startswith("  stage 3/3 c=8: 16/16 requests, ended between two polls")
    assert len(text) == 3


def _payload(index: int | None, begun: list[dict]) -> dict:
    stage = None if index is None else {"index": index, "name": begun[index]["name"], "count": 2}
    return {
        "stage": stage,
        "stages_begun": begun,
        "endpoints": [{"name": "Aggregated", "requests": 99, "failures": 9,
                       "requests_per_s": 7.0, "ttft_p50_s": 0.9}],
    }  # fmt: skip


def _stage(name: str, **kw: object) -> dict:
    base = {"name": name, "target_requests": None, "done": 0, "settled": False, "drawn": None,
            "unsent": None, "completed": 0, "failed": 0, "qps": None,
            "output_tokens_per_s": None, "ttft_p50_s": None, "window_s": None}  # fmt: skip
    return {**base, **kw}


def test_the_stage_s_own_figures_come_before_the_run_s() -> None:
    """The master's figures of the stage (from its records) win over the Aggregated row's
    (Locust's 3 s worker reports, the whole run's): QPS, tokens/s, TTFT P50, failures."""
    begun = [
        _stage("rate 4/s", done=30, settled=True, qps=3.9, ttft_p50_s=0.2, failed=1,
               output_tokens_per_s=250.0, drawn=31, unsent={"pool_ran_dry": 0}),
        _stage("rate 40/s", done=12, qps=5.5, ttft_p50_s=0.04, failed=0,
               output_tokens_per_s=1234.4, drawn=80, unsent={"pool_ran_dry": 0}),
    ]  # fmt: skip
    snap = snapshot_from_payload(_payload(1, begun))
    assert (snap.qps, snap.ttft_p50_s) == (5.5, 0.04)
    assert snap.begun[0].live and snap.begun[0].settled and not snap.begun[1].settled
    assert snap.begun[1].drawn == 80 and snap.begun[1].unsent == ()  # no reason counted
    out, clock = io.StringIO(), Clock()
    line = ProgressLine(out, live=False, every_s=0.0, plan=_plan(2, 3.0), clock=clock)
    line.update(snap)
    assert out.getvalue().splitlines()[-1] == (
        "  stage 2/2 rate 40/s: 12 requests, 0/3 s, QPS 5.5, 1,234 tokens/s, TTFT P50 40 ms"
    )
    old = snapshot_from_payload(_payload(0, [{"name": "c=1", "done": 3}]))  # no stage figures
    assert (old.qps, old.ttft_p50_s) == (7.0, 0.9)


def test_an_open_loop_stage_s_unsent_arrivals_end_its_line() -> None:
    """The pool ran dry: the stage's line waits (4 s at most) for its last records and its
    unsent arrivals, which reach the master with the workers' batch after the stage ends, and
    says how many of the arrivals drawn were never sent, and why."""
    out, clock = io.StringIO(), Clock()
    line = ProgressLine(out, live=False, every_s=60.0, plan=_plan(2, 3.0), clock=clock)
    first = _stage(
        "rate 40/s",
        done=20,
        qps=6.0,
        ttft_p50_s=0.5,
        drawn=90,
        output_tokens_per_s=400.0,
        unsent={"pool_ran_dry": 0, "stage_ended": 0},
    )
    line.update(snapshot_from_payload(_payload(0, [first])))
    clock.now += 3.0  # the stage ended; its counts are not in yet
    second = _stage("rate 4/s", done=1, qps=None)
    line.update(snapshot_from_payload(_payload(1, [{**first, "done": 24}, second])))
    assert "stage done" not in out.getvalue()
    clock.now += 1.0
    dry = {**first, "done": 25, "settled": True, "qps": 7.5, "drawn": 120,
           "unsent": {"pool_ran_dry": 88, "stage_ended": 7}}  # fmt: skip
    line.update(snapshot_from_payload(_payload(1, [dry, second])))
    assert out.getvalue().splitlines() == [
        "  stage 1/2 rate 40/s: 25 requests, 3/3 s, QPS 7.5, 400 tokens/s, TTFT P50 500 ms, "
        "95 of 120 arrivals unsent (88 pool ran dry, 7 stage ended) (stage done)"
    ]
    clock.now += 60.0
    line.update(snapshot_from_payload(_payload(1, [dry, second])))
    assert out.getvalue().splitlines()[-1].startswith("  stage 2/2 rate 4/s: 1 requests, 61/3 s")
    # a master that never says "settled" still gets the line ended, after the wait
    out2, clock2 = io.StringIO(), Clock()
    line2 = ProgressLine(out2, live=False, every_s=60.0, plan=_plan(2), clock=clock2)
    line2.update(snapshot_from_payload(_payload(0, [first])))
    for _ in range(5):
        clock2.now += 1.0
        line2.update(snapshot_from_payload(_payload(1, [first, second])))
    assert sum("(stage done)" in t for t in out2.getvalue().splitlines()) == 1
    assert "(stage done)" in out2.getvalue().splitlines()[0]
    only = {**dry, "unsent": {"pool_ran_dry": 12, "stage_ended": 0, "run_stopped": 0}}
    short = ProgressLine(io.StringIO(), live=False, plan=_plan(3), clock=Clock())
    short.update(snapshot_from_payload(_payload(1, [only, second])))
    assert short.out.getvalue().splitlines()[0] == (  # type: ignore[attr-defined]
        "  stage 1/3 rate 40/s: 25 requests, 12 of 120 arrivals unsent (pool ran dry), ended "
        "between two polls of the live stats (stage done)"
    )


def test_a_stage_sending_behind_its_schedule_says_so_during_the_stage() -> None:
    """Before the stage's end counts its unsent arrivals, the records say the pool is behind:
    their mean dispatch delay; a pool that keeps up (a few ms late) adds nothing."""
    out, clock = io.StringIO(), Clock()
    line = ProgressLine(out, live=False, every_s=0.0, plan=_plan(1), clock=clock)
    for delay_s in (0.004, 1.26):
        entry = _stage("rate 40/s", done=9, qps=3.0, ttft_p50_s=0.06, dispatch_delay_s=delay_s,
                       output_tokens_per_s=96.0)  # fmt: skip
        line.update(snapshot_from_payload(_payload(0, [entry])))
    first, second = out.getvalue().splitlines()
    assert "behind" not in first
    assert second == (
        "  stage 1/1 rate 40/s: 9 requests, 0 s, QPS 3.0, 96 tokens/s, TTFT P50 60 ms, "
        "sent 1.3 s behind schedule"
    )


def test_a_stage_s_header_waits_for_the_line_of_the_stage_before_it() -> None:
    """The master says stage 2 began while stage 1's figures still settle: stage 1's
    "(stage done)" line comes first, then stage 2's header (the README's demo printed them the
    other way round)."""
    out, clock = io.StringIO(), Clock()
    line = ProgressLine(out, live=False, every_s=60.0, plan=_plan(2), clock=clock)
    first = (StageSeen("c=1", 6, 4, settled=False),)
    line.stage_header(0, "  [    0 s] stage 1/2: c=1")
    line.update(Snapshot(0, 2, "c=1", 6, 4, 2.0, 0.05, begun=first))
    clock.now += 3.0
    line.stage_header(1, "  [    3 s] stage 2/2: c=4")  # the master began stage 2
    both = (StageSeen("c=1", 6, 6, settled=False), StageSeen("c=4", 30, 1, settled=False))
    line.update(Snapshot(1, 2, "c=4", 30, 7, 2.0, 0.05, begun=both))  # stage 1 not settled yet
    assert out.getvalue().splitlines() == ["  [    0 s] stage 1/2: c=1"]
    clock.now += 1.0
    settled = (StageSeen("c=1", 6, 6, settled=True), StageSeen("c=4", 30, 2, settled=False))
    line.update(Snapshot(1, 2, "c=4", 30, 8, 2.0, 0.05, begun=settled))
    line.close()
    text = out.getvalue().splitlines()
    assert text[0] == "  [    0 s] stage 1/2: c=1"
    assert text[1].startswith("  stage 1/2 c=1: 6/6 requests, ") and text[1].endswith("done)")
    assert text[2] == "  [    3 s] stage 2/2: c=4"
    assert text[3].startswith("  stage 2/2 c=4: 2/30 requests, ")
    assert len(text) == 4


def test_a_held_header_is_printed_when_no_poll_ends_the_stage_before_it() -> None:
    """The live stats never answer: a header waits HEADER_WAIT_S at most, then prints (and
    close prints any still held)."""
    out, clock = io.StringIO(), Clock()
    line = ProgressLine(out, live=False, plan=_plan(3), clock=clock)
    line.stage_header(1, "  [    3 s] stage 2/3: c=2")
    line.update(None)
    assert out.getvalue() == ""
    clock.now += HEADER_WAIT_S
    line.update(None)
    assert out.getvalue().splitlines() == ["  [    3 s] stage 2/3: c=2"]
    line.stage_header(2, "  [    9 s] stage 3/3: c=3")
    line.close()
    assert out.getvalue().splitlines()[-1] == "  [    9 s] stage 3/3: c=3"
