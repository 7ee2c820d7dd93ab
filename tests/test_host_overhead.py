"""The host's time per step as a step bound, judged by the simulator's traces.

A server whose per-step and per-sequence host work (scheduling, launches, sampling) outlasts
the device's memory term is not memory-bound: naming "memory bandwidth" there sends users to
quantize, where the GPU reads its bytes in a fraction of the step. The same decode load is
played in virtual time on the same server twice, with the engine's host time per step large
and with none; the traces' own terms label each stage (``locust_llm.sim.labels``), and the
report's resource model must name what they name, with its memory and host shares ordered as
the traces' are.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from decode_sweep import decode_sweep

from locust_llm.report.diagnosis.resources import (
    blended_step_cost,
    decode_step_seconds_seen,
    observed_batch,
    step_bound,
)
from locust_llm.roofline.floors import get_model, step_cost
from locust_llm.sim.config import SimConfig
from locust_llm.sim.labels import GroundTruth
from locust_llm.sim.virtual import VirtualWorkload
from locust_llm.workloads.stages import StagePlan

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import verdict_accuracy  # noqa: E402


def _judged(overhead_s: float, per_seq_s: float, out: Path) -> list[tuple[GroundTruth, dict, str]]:
    """(truth label, report row, verdict cause) of each stage of a decode-heavy sweep."""
    config = SimConfig(
        model="qwen2.5-0.5b",
        gpu="a10",
        step_overhead_s=overhead_s,
        step_overhead_per_seq_s=per_seq_s,
        enable_prefix_caching=False,
    )
    workload = decode_sweep((4, 16), per_user=4, max_tokens=256)
    report, engine = verdict_accuracy.traced_report(config, workload, out)
    judged = []
    for row, verdict in zip(report.rows, report.verdicts, strict=True):
        judged.append((verdict_accuracy.stage_truth(engine, row), row, verdict.cause))
    return judged


@pytest.mark.quick
def test_a_host_bound_server_is_named_host_overhead_not_memory_bandwidth(tmp_path: Path) -> None:
    for truth, row, cause in _judged(0.004, 0.0001, tmp_path / "host"):
        assert truth.label == "host_overhead", (truth.overhead_share, truth.memory_set_share)
        assert row["step_bound"] == "host", row
        assert row["host_time_share"] > row["memory_time_share"], row
        assert cause == "host_overhead", (row["stage"], cause)
        # the bandwidth is far from used: the verdict no longer names it
        assert row["mbu"] < 0.5


@pytest.mark.quick
def test_the_same_load_without_host_time_is_memory_bound(tmp_path: Path) -> None:
    for truth, row, cause in _judged(0.0, 0.0, tmp_path / "device"):
        assert truth.label == "bandwidth_bound_decode", truth.overhead_share
        assert row["step_bound"] == "memory", row
        assert row["memory_time_share"] > row["host_time_share"], row
        assert cause == "bandwidth_bound_decode", (row["stage"], cause)
        assert row["memory_time_share"] >= 0.5 and row["mbu"] >= 0.5


@pytest.mark.quick
def test_the_step_bound_is_compute_at_its_line_else_the_longer_of_host_and_memory() -> None:
    assert step_bound(0.6, 0.1, 0.3) == "compute"
    assert step_bound(0.2, 0.3, 0.5) == "host"
    assert step_bound(0.2, 0.5, 0.3) == "memory"
    assert step_bound(0.2, 0.45, 0.47) == "host"  # the host's time outlasts the bytes'
    assert step_bound(0.45, 0.4, 0.15) == "memory"  # below the compute line
    # a CPU (figures the host achieved): the bytes must set half the step to be named
    assert step_bound(0.06, 0.48, 0.47, host_device=True) == "host"
    assert step_bound(0.06, 0.52, 0.40, host_device=True) == "memory"


def _stage_against_trace(
    config: SimConfig, workload: VirtualWorkload, out: Path
) -> tuple[GroundTruth, dict]:
    """The truth and the report row of the one stage of ``workload``."""
    report, engine = verdict_accuracy.traced_report(config, workload, out)
    [row] = report.rows
    return verdict_accuracy.stage_truth(engine, row), row


@pytest.mark.quick
def test_users_whose_prompts_come_together_leave_the_host_its_decode_steps(tmp_path: Path) -> None:
    """64 users of fixed lengths on a 70B over 8 GPUs: their prompts arrive in cohorts and are
    computed between their decodes, so TPOT holds decode steps only. The host's time read as
    TPOT less the mean step's device time (those prompt steps' compute included) was 15% of a
    step where the trace's overhead is 30% and outlasts the memory term (2026-12-03: the
    verdict said memory bandwidth); read from a decode step (the median inter-token gap less
    its device time) it is the host's."""
    config = SimConfig(model="llama-3.1-70b", gpu="h100-sxm", tp=8, max_num_seqs=64,
                       enable_prefix_caching=False, seed=11)  # fmt: skip
    workload = VirtualWorkload(
        stages=(StagePlan(concurrency=64, requests=256),), input_len="128", max_tokens="32",
        ignore_eos=True, seed=12, scrape_interval_s=0.25,
    )  # fmt: skip
    truth, row = _stage_against_trace(config, workload, tmp_path / "tp8")
    assert truth.label == "host_overhead", truth.as_dict()
    assert truth.overhead_share > truth.memory_set_share
    assert row["step_bound"] == "host", row
    # the host's time against the memory term's as in the trace (its shares are of the busy
    # time, the prompt steps' included; the row's of a decode step, so only their ratio
    # compares): 1.18 in the trace, 1.17 in the row, 0.39 before
    measured = row["host_time_share"] / row["memory_time_share"]
    assert measured == pytest.approx(truth.overhead_share / truth.memory_set_share, rel=0.3)


@pytest.mark.quick
def test_an_moe_batch_is_priced_as_the_steps_ran_it(tmp_path: Path) -> None:
    """Mixtral at a few requests a second runs 1-4 sequences a step and idles between them. The
    running gauge's mean (1.2) counts the idle samples, and rounded to one sequence it priced a
    step's read at one sequence's two experts of eight: the memory term read 0.52 of a step
    where the trace's is 0.82, and the rest went to the host (2026-12-03: the verdict said host
    overhead at a similar load). Priced at the batch while busy, blended between the whole
    batches either side, the memory and host terms are the trace's."""
    config = SimConfig(model="mixtral-8x7b", gpu="h200", max_num_seqs=64,
                       enable_prefix_caching=False, seed=13)  # fmt: skip
    workload = VirtualWorkload(
        stages=(StagePlan(rate=2.4, duration_s=20.0),), input_len="uniform:64,512",
        max_tokens="32", ignore_eos=True, seed=14, scrape_interval_s=0.25,
    )  # fmt: skip
    truth, row = _stage_against_trace(config, workload, tmp_path / "moe")
    assert truth.label == "bandwidth_bound_decode", truth.as_dict()
    assert 1 < row["running"] < row["running_busy"], row  # 1.2 and 2.0 (2026-12-03)
    assert row["step_bound"] == "memory", row
    # 0.818 against 0.819, the host 0.163 against 0.181 (2026-12-03)
    assert row["memory_time_share"] == pytest.approx(truth.memory_set_share, rel=0.1)
    assert row["host_time_share"] == pytest.approx(truth.overhead_share, abs=0.05)


@pytest.mark.quick
def test_the_decode_step_the_batch_and_the_blend_fall_back_in_order() -> None:
    nan = float("nan")
    assert decode_step_seconds_seen({"tpot_avg_s": 0.02, "itl_p50_s": 0.015}) == 0.015
    assert decode_step_seconds_seen({"tpot_avg_s": 0.02, "itl_p50_s": 0.025}) == 0.02  # capped
    for gap in (0.005, nan, None):  # tokens in bunches, or no gaps: no step read
        assert math.isnan(decode_step_seconds_seen({"tpot_avg_s": 0.02, "itl_p50_s": gap}))
    # prompt work in 80% of the steps (first tokens in them): the median gap is such a step
    busy = {"tpot_avg_s": 0.02, "itl_p50_s": 0.015, "qps": 100.0, "first_token_step_share": 0.8}
    assert math.isnan(decode_step_seconds_seen(busy))
    assert decode_step_seconds_seen({**busy, "qps": 10.0}) == 0.015  # in 20%: a decode step
    assert observed_batch({"running_busy": 2.0, "running": 1.2, "concurrency": 8}) == 2.0
    assert observed_batch({"running_busy": nan, "running": 1.2, "concurrency": 8}) == 1.2
    assert observed_batch({"running": 0.0, "concurrency": 8}) == 8
    assert math.isnan(observed_batch({"concurrency": nan}))
    mixtral = get_model("mixtral-8x7b")
    one, two = step_cost(mixtral, [300]), step_cost(mixtral, [300] * 2)
    blend = blended_step_cost(mixtral, 1.4, 300)
    assert blend.bytes == pytest.approx(one.bytes + 0.4 * (two.bytes - one.bytes))
    assert blended_step_cost(mixtral, 0.5, 300) == one  # under one sequence: one
    assert blended_step_cost(mixtral, 2.0, 300) == two
