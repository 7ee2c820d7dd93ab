"""The share of steps that carried prompt work, read from first-token times, against the
simulator's step trace: closed-loop users with fixed lengths finish in the same steps and send
their next prompts together (a few steps carry them all), where prompts per second x TPOT counts
one step each; Poisson arrivals spread them."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from documented_case import documented_case_output

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from verdict_accuracy import BASE_WALL_S, stage_window, traced_report  # noqa: E402

from locust_llm.report.diagnosis.resources import prompt_step_share  # noqa: E402
from locust_llm.report.tables import first_token_step_share  # noqa: E402
from locust_llm.sim import virtual  # noqa: E402
from locust_llm.sim.config import SimConfig  # noqa: E402
from locust_llm.workloads.stages import StagePlan  # noqa: E402


def test_bins_count_the_steps_that_hold_a_first_token() -> None:
    tpot = 0.02
    one_a_step = BASE_WALL_S + tpot * np.r_[0.0, np.arange(1, 40) + 0.5]  # bins 0, 1, .., 39
    assert first_token_step_share(one_a_step, tpot) == pytest.approx(1.0)
    # a first token, then ten bursts of four: in its bin and in every fifth after (mid-bin:
    # a time on a bin's edge may fall either side of it)
    bursts = (
        BASE_WALL_S
        + tpot * np.r_[0.0, np.repeat(np.arange(10) * 5, 4) + np.tile([0.3, 0.5, 0.7, 0.9], 10)]
    )
    assert first_token_step_share(bursts, tpot) == pytest.approx(10 / 46)  # bins 0, 5, .., 45
    assert np.isnan(first_token_step_share(one_a_step[:9], tpot))  # too few to say
    assert np.isnan(first_token_step_share(one_a_step, float("nan")))


def _stages_against_trace(stages: tuple[StagePlan, ...]) -> list[tuple[dict, float]]:
    """Each stage row of a virtual run beside the trace's share of its steps with prompt work."""
    config = SimConfig(model="llama-3.1-8b", gpu="h100-sxm", max_num_seqs=256,
                       enable_prefix_caching=False, seed=5)  # fmt: skip
    workload = virtual.VirtualWorkload(stages=stages, input_len="512", max_tokens="64",
                                       ignore_eos=True, seed=7, scrape_interval_s=0.25)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        report, engine = traced_report(config, workload, Path(tmp) / "run")
    out = []
    for row in report.rows:
        lo, hi = stage_window(row)
        window = [s for s in engine.steps_seen if lo <= s["start"] < hi]
        out.append((row, sum(s["prefill_tokens"] > 0 for s in window) / len(window)))
    return out


def test_the_share_follows_the_trace_where_prompts_come_together_and_apart() -> None:
    [(closed, closed_truth)] = _stages_against_trace(
        (StagePlan(concurrency=64, requests=640, duration_s=60.0),)
    )
    [(opened, open_truth)] = _stages_against_trace((StagePlan(rate=40.0, duration_s=20.0),))
    # 64 users, the same lengths: cohorts that finish and start in the same steps (the rate x
    # TPOT: 0.86 where the trace had 0.08, 2026-12-03)
    spread = float(closed["qps"]) * float(closed["tpot_avg_s"])
    assert spread > 2 * closed_truth  # one step a prompt would double-count them at least
    assert closed["first_token_step_share"] == pytest.approx(closed_truth, abs=0.03, rel=0.15)
    assert prompt_step_share(closed) == pytest.approx(closed_truth, abs=0.03, rel=0.15)
    # Poisson arrivals: steps with no arrival and steps with two (the rate x TPOT: 0.67 where
    # the trace had 0.46, 2026-12-03)
    assert opened["first_token_step_share"] == pytest.approx(open_truth, abs=0.03, rel=0.15)


def test_the_documented_case_prints_the_trace_and_the_bins() -> None:
    """docs/report.md's command, as written: the case whose prompts came in bursts."""
    command = ".venv/bin/python bench/verdict_case.py --seed 8101 --case 43 --stages 2"
    out = documented_case_output(command)
    assert "trace: 25 of 521 steps with prompt work (4.8%)" in out, out
    assert "the row's first-token bins: 0.0486" in out, out
