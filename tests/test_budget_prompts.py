"""Prompts whose chunks fill the token budget, beside a full KV cache, judged by the traces.

Mistral-7B on an RTX 4090 with a 2,048-token budget and prompts of ~2,000 tokens, overloaded
(case 65 of the verdict benchmark's seed 8101): the KV cache peaks at 100% and preempts, so the
KV rule used to name `kv_capacity_admission`. The simulator's traces say the token budget held
the queue for longer than the KV cache did (each prompt's chunks fill the budget of the long
steps that compute it), and label the stages by their compute-bound prompt steps. The verdict
must name the trace's label and say why the budget, not the KV cache, holds the queue.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import verdict_accuracy  # noqa: E402

SEED, CASE = 8101, 65


@pytest.mark.quick
def test_a_budget_filled_by_prompts_is_named_before_a_full_kv_cache(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    case = [verdict_accuracy.make_case(i, rng) for i in range(CASE + 1)][CASE]
    assert case.config.max_num_batched_tokens == 2048, case.describe()
    report, engine = verdict_accuracy.traced_report(case.config, case.workload, tmp_path / "run")
    judged = 0
    for row, verdict in zip(report.rows, report.verdicts, strict=True):
        lo, hi = verdict_accuracy.stage_window(row)
        sent = verdict_accuracy.sent_in_window(engine.requests_seen, lo, hi)
        if sent < verdict_accuracy.MIN_REQUESTS:
            continue  # as the benchmark: a stage that sent too few requests is not judged
        truth = verdict_accuracy.stage_truth(engine, row)
        blocked = truth.blocked_by
        kv = blocked.get("kv_blocks", 0.0) + blocked.get("preemption", 0.0)
        if not (row["kv_cache_usage_max"] >= 0.95 and blocked.get("token_budget", 0.0) > kv):
            continue  # a stage the budget does not hold longer than a full KV cache
        judged += 1
        assert truth.label in ("compute_bound_prefill", "prefill_interference"), truth
        assert verdict.cause == truth.label, (row["stage"], verdict.cause, verdict.evidence)
        assert any("of the 2,048-token budget" in e for e in verdict.evidence), verdict.evidence
    assert judged >= 2, "the overloaded stages no longer fill the budget beside a full cache"
