"""docs/report.md's cases of the verdict benchmark, run as written: four of the host's time
against the other terms (a 70B over 8 GPUs whose host time outlasts its memory term; Mixtral
at light load whose memory term is four times the host's; an open-loop stage priced at the
pace of the steps in its window; a 0.5B model whose steps with prompt work are compute-bound
only when they carry two prompts or more: the row's shares stand as the trace's do) and one of
prompts filling the token budget beside a full KV cache (the trace waited longer for the
budget); the verdict names the trace's label in each."""

from __future__ import annotations

import ast
import json

import pytest
from documented_case import documented_case_output

SPREAD_CASE = ".venv/bin/python bench/verdict_case.py --seed 431764 --case 36 --stages 3"
CASES = {
    # the command as docs/report.md shows it: the trace's label
    ".venv/bin/python bench/verdict_case.py --seed 8101 --case 35 --stages 1": "host_overhead",
    ".venv/bin/python bench/verdict_case.py --seed 9201 --case 54 --stages 0": (
        "bandwidth_bound_decode"
    ),
    # open loop: the stage's own requests decode in the next stage's steps; the window's pace
    ".venv/bin/python bench/verdict_case.py --seed 251838 --case 66 --stages 1": (
        "bandwidth_bound_decode"
    ),
    # a 0.5B model's steps: one prompt leaves a step memory-bound, two make it compute-bound
    SPREAD_CASE: "host_overhead",
}


@pytest.mark.parametrize("command", sorted(CASES))
def test_the_documented_case_reads_the_terms_as_the_trace_does(command: str) -> None:
    out = documented_case_output(command)
    label = CASES[command]
    assert f"truth {label}; verdict {label} " in out, out
    row = json.loads(out.split("  row: ", 1)[1].split("\n", 1)[0])
    truth = json.loads(out.split("  truth: ", 1)[1].split(" blocked by:", 1)[0])
    host_longer = truth["overhead_share"] > truth["memory_set_share"]
    assert host_longer == (label == "host_overhead")
    assert (row["host_time_share"] > row["memory_time_share"]) == host_longer, row


def test_the_documented_spread_case_reads_compute_in_the_steps_with_enough_prompts() -> None:
    """docs/report.md: the steps with prompt work carry a Poisson count of prompts; only those
    with two or more are compute-bound. One mean chunk in every such step read compute in 54%
    of the step time where the trace has 20%."""
    out = documented_case_output(SPREAD_CASE)
    row = json.loads(out.split("  row: ", 1)[1].split("\n", 1)[0])
    truth = json.loads(out.split("  truth: ", 1)[1].split(" blocked by:", 1)[0])
    assert truth["compute_share"] < 0.5 and truth["mixed_share"] > 0.5, truth
    assert row["compute_time_share"] == pytest.approx(truth["compute_share"], abs=0.1), row
    assert row["step_bound"] == "host", row


BUDGET_CASE = ".venv/bin/python bench/verdict_case.py --seed 8101 --case 65 --stages 3"


def test_the_documented_budget_case_reads_the_budget_the_trace_waited_on() -> None:
    """docs/report.md's third round: prompts fill the token budget beside a full KV cache; the
    trace waited longer for the budget than for KV blocks, and the verdict names its label."""
    out = documented_case_output(BUDGET_CASE)
    assert "truth compute_bound_prefill; verdict compute_bound_prefill " in out, out
    blocked = ast.literal_eval(out.split("blocked by: ", 1)[1].split("\n", 1)[0])
    kv = blocked.get("kv_blocks", 0.0) + blocked.get("preemption", 0.0)
    assert blocked["token_budget"] > kv, blocked
    row = json.loads(out.split("  row: ", 1)[1].split("\n", 1)[0])
    assert row["kv_cache_usage_max"] >= 0.95, row
    assert "of the 2,048-token budget" in out, out
