"""One judgement per stage: the reading, the cap and the verdict never contradict, on a set of
simulator regimes played in virtual time (the sweeps of bench/verdict_accuracy.py's matrix,
whose stages the simulator labels with their ground truth, and hand-set regimes for the cases
seen contradicting: a compute-bound server saturated at one user, a batch limit reached while
throughput flattens, open loop past capacity). Also: a stage far past capacity whose requests
were all cut off at the run's end is overloaded, never insufficient_data, and the run header
counts them; an open loop under capacity achieves the arrivals due in its window."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from locust_llm.report.build import Report
from locust_llm.report.cli import summary
from locust_llm.report.diagnosis.knee import NO_HEADROOM, contradictions, falls_short
from locust_llm.report.document import description
from locust_llm.sim.config import SimConfig
from locust_llm.sim.virtual import VirtualWorkload
from locust_llm.workloads.stages import StagePlan

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import verdict_accuracy  # noqa: E402


def _closed(levels: tuple[int, ...], requests: int, **kw: object) -> VirtualWorkload:
    stages = tuple(StagePlan(concurrency=c, requests=max(requests, 2 * c)) for c in levels)
    return VirtualWorkload(stages=stages, scrape_interval_s=0.25, **kw)  # type: ignore[arg-type]


#: name -> (server, sweep): the regimes seen contradicting, set up by physics
REGIMES: dict[str, tuple[SimConfig, VirtualWorkload]] = {
    # long prompts, short answers: compute-bound prefill saturates at one user; more users
    # only queue ("low_concurrency" beside a reading of "overload, cap at 1")
    "compute_bound_prefill": (
        SimConfig(model="mistral-7b", gpu="l4", enable_prefix_caching=False),
        _closed((1, 2, 4, 8), 16, input_len="8192", max_tokens="8", ignore_eos=True),
    ),
    # a batch limit of 8: throughput flattens from 8 users on ("near the limit, cap at 8"
    # beside "headroom, offer more load")
    "batch_limit": (
        SimConfig(model="qwen2.5-0.5b", gpu="a10", max_num_seqs=8, enable_prefix_caching=False),
        _closed((2, 4, 8, 16, 32), 32, input_len="256", max_tokens="128", ignore_eos=True),
    ),
    "kv_capacity": (
        SimConfig(
            model="mistral-7b",
            gpu="h100-sxm",
            num_gpu_blocks_override=256,
            enable_prefix_caching=False,
        ),
        _closed((4, 16, 64), 64, input_len="1024", max_tokens="256", ignore_eos=True),
    ),
    "open_loop_past_capacity": (
        SimConfig(model="qwen2.5-0.5b", gpu="a10", max_num_seqs=8, enable_prefix_caching=False),
        VirtualWorkload(
            stages=tuple(StagePlan(rate=r, duration_s=15.0) for r in (1.0, 4.0, 16.0, 64.0)),
            input_len="256",
            max_tokens="128",
            ignore_eos=True,
            scrape_interval_s=0.25,
            stop_timeout_s=5.0,
        ),
    ),
}


def _report(config: SimConfig, workload: VirtualWorkload, out: Path) -> tuple[Report, list]:
    """The report of a virtual run, and each stage's ground-truth label from its traces."""
    report, engine = verdict_accuracy.traced_report(config, workload, out)
    labels = [verdict_accuracy.stage_truth(engine, row).label for row in report.rows]
    return report, labels


def _assert_one_voice(report: Report, labels: list, name: str) -> None:
    kinds = [v.kind for v in report.verdicts]
    said = contradictions(report.rows, kinds, report.knee)
    truth = dict(zip([r["stage"] for r in report.rows], labels, strict=True))
    assert said == [], (name, said, kinds, truth, report.knee.reading, report.knee.conclusion)
    # headroom needs an idle device or a step bound that more sequences amortise: never on
    # compute-bound steps with the GPU saturated (more requests add compute, not throughput)
    for row, kind in zip(report.rows, kinds, strict=True):
        if row["step_bound"] == "compute" and row["gpu_util"] >= 0.9:
            assert kind != "low_concurrency", (name, row["stage"], truth)
    # the headline agrees with the reading of the load it judges
    top = max(report.rows, key=lambda r: (r["concurrency"] == r["concurrency"], r["stage"]))
    if report.overall.kind == "low_concurrency":
        assert top["scaling"] not in NO_HEADROOM, (name, report.knee.reading)


@pytest.mark.parametrize("name", sorted(REGIMES))
def test_the_reading_and_the_verdict_agree_in_each_regime(name: str, tmp_path: Path) -> None:
    config, workload = REGIMES[name]
    report, labels = _report(config, workload, tmp_path / name)
    _assert_one_voice(report, labels, name)
    # every stage row carries the classification the verdict read
    assert all(isinstance(r["scaling"], str) for r in report.rows)


def test_the_reading_and_the_verdict_agree_on_the_accuracy_matrix(tmp_path: Path) -> None:
    # the first cases of the accuracy bench's seeded matrix (closed and open loop, far below
    # to far above capacity, KV budgets that preempt): before one classification was shared,
    # cases 0 and 1 of these said "headroom" on 3 stages the reading called near the limit
    # (and 60 cases on seed 1 gave 20 contradictions; 2026-12-02)
    rng = verdict_accuracy.random.Random(1)
    for index in range(5):
        case = verdict_accuracy.make_case(index, rng)
        report, labels = _report(case.config, case.workload, tmp_path / f"case{index}")
        _assert_one_voice(report, labels, case.describe())


def test_a_stage_cut_off_far_past_capacity_is_overloaded_and_counted(tmp_path: Path) -> None:
    # 512 users of 512-token answers on an L4 with a 2 s stop timeout: nothing sent in the
    # last stage completes before the run ends, so every request of it is cancelled
    config = SimConfig(model="mistral-7b", gpu="l4", enable_prefix_caching=False)
    workload = VirtualWorkload(
        stages=tuple(StagePlan(concurrency=c, duration_s=20.0) for c in (4, 32, 512)),
        input_len="1024", max_tokens="512", ignore_eos=True, stop_timeout_s=2.0,
    )  # fmt: skip
    report, labels = _report(config, workload, tmp_path / "cut")
    top, verdict = report.rows[-1], report.verdicts[-1]
    assert top["completed"] == 0 and top["cut_off"] == top["sent"] == top["cancelled"] >= 400
    assert verdict.kind == "overloaded" and verdict.rule == "cut_off", verdict
    assert verdict.cause == labels[-1] == "kv_capacity_admission"
    assert f"{top['sent']:,} requests sent at load 512: 0 completed" in verdict.evidence[0]
    assert verdict.requests == top["sent"]  # the basis counts the requests it rests on
    assert report.overall.kind == "overloaded"
    # the header counts what was sent, not only what completed
    counts = summary(report)["requests"]
    assert counts["sent"] == sum(r["sent"] for r in report.rows)
    assert counts["sent"] == counts["completed"] + counts["failed"] + counts["cancelled"]
    assert counts["cancelled"] >= top["sent"]
    assert f"requests {counts['sent']:,} sent, {counts['completed']:,} completed" in (
        description(report)
    )
    assert "cut off: overload" in report.knee.reading
    _assert_one_voice(report, labels, "cut off")


def test_an_open_loop_under_capacity_achieves_the_arrivals_due(tmp_path: Path) -> None:
    config = SimConfig(model="qwen2.5-0.5b", gpu="a10", enable_prefix_caching=False)
    workload = VirtualWorkload(
        stages=tuple(StagePlan(rate=r, duration_s=20.0) for r in (1.0, 4.0)),
        input_len="256", max_tokens="lognormal:128:0.5", scrape_interval_s=0.5,
        stop_timeout_s=10.0,
    )  # fmt: skip
    report, _ = _report(config, workload, tmp_path / "open")
    for row in report.rows:
        # all arrivals of the window sent; their completions, not the window's own, count
        assert row["arrivals_unsent"] == 0
        assert row["offered_rps"] == pytest.approx(row["arrivals_drawn"] / 20.0)
        assert not falls_short(row, 0.95), row  # 18 of 19 is the edges: one request
        assert row["arrivals_served"] >= row["arrivals_due"] - 1
        assert row["completed_in_window"] < row["arrivals_drawn"]  # the tail came after it
    assert report.knee.cap_stage == 1
    assert "SLO" not in report.knee.conclusion + " ".join(report.knee.notes)
