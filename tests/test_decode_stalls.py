"""The share of decode time that prompts stalled, read from each request's inter-token gaps
(``decode_stall_share``: TPOT above the request's median gap), against the simulator's step
trace: with chunked prefill off a prompt is computed whole in one step several decode steps long,
and every sequence decoding beside it waits that step out; with it on (a 512-token budget) the
steps that carry a chunk are shorter, and the stalls smaller. The real engine's account of the
same regimes is ``tests/test_vllm_budget.py``."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from verdict_accuracy import stage_window, traced_report  # noqa: E402

from locust_llm.report.diagnosis.thresholds import Thresholds  # noqa: E402
from locust_llm.report.tables import STALL_TOKENS_MIN, decode_stall_share  # noqa: E402
from locust_llm.sim import virtual  # noqa: E402
from locust_llm.sim.config import SimConfig  # noqa: E402
from locust_llm.workloads.stages import StagePlan  # noqa: E402


def test_the_share_is_decode_time_beyond_the_median_gap() -> None:
    tokens = np.array([11.0, 21.0, 3.0])  # 10 and 20 gaps; the third is too short to count
    tpot = np.array([0.03, 0.02, 1.0])
    p50 = np.array([0.02, 0.02, 0.01])
    # (10 x 0.01 + 20 x 0) of (10 x 0.03 + 20 x 0.02) decode seconds
    assert decode_stall_share(tpot, p50, tokens) == pytest.approx(0.1 / 0.7)
    assert STALL_TOKENS_MIN > 3
    assert np.isnan(decode_stall_share(tpot, np.full(3, np.nan), tokens))  # older runs


def _stall_against_trace(chunked: bool) -> tuple[dict, float]:
    """The stage row of a virtual run (16 users, 2,048-token prompts, 128 tokens out) beside
    the trace's share of decode time that steps with prompt work added beyond a decode-only
    step: sum over those steps of decoding sequences x (step - median decode-only step), over
    the sum over all steps of decoding sequences x step."""
    budget = 512 if chunked else 8192
    config = SimConfig(model="llama-3.1-8b", gpu="h100-sxm", max_num_seqs=64,
                       max_num_batched_tokens=budget, enable_chunked_prefill=chunked,
                       enable_prefix_caching=False, seed=3)  # fmt: skip
    stage = StagePlan(concurrency=16, requests=160, duration_s=120.0)
    workload = virtual.VirtualWorkload(
        stages=(stage,), input_len="2048", max_tokens="128", ignore_eos=True, seed=11,
        scrape_interval_s=0.25,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        report, engine = traced_report(config, workload, Path(tmp) / "run")
    [row] = report.rows
    lo, hi = stage_window(row)
    steps = [s for s in engine.steps_seen if lo <= s["start"] < hi and s["decode_seqs"] > 0]
    plain = np.median([s["duration_s"] for s in steps if s["prefill_tokens"] == 0])
    decode = sum(s["decode_seqs"] * s["duration_s"] for s in steps)
    stalled = sum(
        s["decode_seqs"] * (s["duration_s"] - plain) for s in steps if s["prefill_tokens"] > 0
    )
    return row, stalled / decode


def test_the_share_follows_the_trace_with_chunked_prefill_off_and_on() -> None:
    whole, whole_truth = _stall_against_trace(chunked=False)
    chunks, chunks_truth = _stall_against_trace(chunked=True)
    print(f"chunked prefill off: {whole['decode_stall_share']:.3f} (trace {whole_truth:.3f}); "
          f"on: {chunks['decode_stall_share']:.3f} (trace {chunks_truth:.3f})")  # fmt: skip
    th = Thresholds()
    assert whole_truth >= 2 * th.stall_share  # whole prompts: a real stall
    assert whole["decode_stall_share"] == pytest.approx(whole_truth, abs=0.05, rel=0.2)
    # 512-token chunks still take longer than a decode step on this device (the trace: 0.156
    # on 2026-12-03), but less than whole prompts
    assert chunks_truth < whole_truth
    assert chunks["decode_stall_share"] == pytest.approx(chunks_truth, abs=0.05, rel=0.2)
