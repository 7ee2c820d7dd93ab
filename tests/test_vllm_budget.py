"""The token budget, chunked prefill and the prefix cache on and off, judged by a real vLLM engine.

Three engines (the CPU build, the tiny Llama of :mod:`vllm.model`). Two are started with
``--max-num-batched-tokens 32`` and ``--max-num-seqs 8``, chunked prefill on (vLLM V1's default)
and a KV cache of 2,720 tokens (32 MiB at 12 KiB a token at bf16) that holds every sequence of these
loads at once, so nothing waits for KV blocks and nothing is preempted: one with the prefix cache
off (``--no-enable-prefix-caching``), one with it on (V1's default). Both get the same load from
``locust-llm run``, given the budget with ``--llm-server-max-num-batched-tokens`` as a user who
started the engine would: prompts of one shared 300-token prefix and 20 words of their own
(~336 tokens, ten budgets long), 1 then 6 users:

* ``budget`` (the cache off): each prompt is prefilled whole, in chunks over about ten steps; at
  6 users every step spends its 32 tokens on prompt chunks and decoding sequences, and requests
  wait for the budget (vLLM counts them ``waiting_by_reason="capacity"``, as it counts a batch or
  KV wait);
* ``cached`` (the cache on): the cache serves the prefix of each prompt, the steps no longer fill
  the budget and the queue goes.

The third has chunked prefill off (``--no-enable-chunked-prefill``; vLLM then wants a budget of at
least ``--max-model-len``: 512) and its default 64 MiB KV cache. It and the cache-off engine
(chunked on, 32 tokens a step) get a second load, ``long``: distinct prompts of ~360 tokens, 48
tokens out, 1 then 6 users:

* ``whole`` (chunked prefill off): each prompt is computed whole in one step several decode steps
  long, and every sequence decoding beside it waits that step out (the engine's own
  ``inter_token_latency_seconds`` counts gaps over 2.5 of the chunked run's usual steps,
  :func:`vllm.scrapes.stall_bound`; its ``iteration_tokens_total`` cannot
  show step sizes: vLLM V1 counts a prompt's tokens whole in the step that yields its first
  token, so the 32-token engine's "steps" reach past 256 tokens too);
* ``chunked`` (on, the budget engine): the prompts go a 32-token chunk a step, no step is long.

The engine's word is its own counters over each stage's requests (:mod:`vllm.scrapes`):
``iteration_tokens_total`` (tokens per step), ``prompt_tokens_cached_total`` /
``prompt_tokens_total``, the preemption counter, the phase histograms.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from vllm.regimes import RegimeRun, Workload, run_regimes, split_against_engine
from vllm.scrapes import bounds, mean, share_above, stall_bound
from vllm.server import kv_cache_bytes

from locust_llm.report.diagnosis.causes import CAUSES
from locust_llm.report.diagnosis.thresholds import Thresholds

#: the module's five runs on three engines take ~4 minutes on a 2-core Xeon; on a 2-core EPYC
#: without AVX-512, ~15 in bf16 in a full suite's run (2026-12-05) and 14 alone (2026-12-06),
#: 5 alone and 5.4-5.8 in two full suites' runs in fp32 (:func:`vllm.server.engine_dtype`, which
#: picks fp32 there), all in the first test's setup
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

BUDGET_TOKENS = 32
MAX_NUM_SEQS = 8
ENGINE_FLAGS = ("--max-num-batched-tokens", str(BUDGET_TOKENS), "--max-num-seqs",
                str(MAX_NUM_SEQS), "--kv-cache-memory-bytes", str(kv_cache_bytes(32 * 2**20)),
                "--block-size", "32", "--max-model-len", "512")  # fmt: skip
CACHE_OFF = ("--no-enable-prefix-caching",)
GIVEN = ("--llm-server-max-num-batched-tokens", str(BUDGET_TOKENS))
SHARED = Workload(
    (1, 6), (4, 18), 16, dataset="shared-prefix:groups=1,prefix=300,suffix=20", flags=GIVEN
)
CHUNKING_OFF = ("--no-enable-chunked-prefill", "--max-num-batched-tokens", "512",
                "--max-num-seqs", str(MAX_NUM_SEQS), "--block-size", "32",
                "--max-model-len", "512", "--no-enable-prefix-caching")  # fmt: skip
#: ~360-token prompts, 48 tokens out: 6 sequences of ~408 tokens take 78 of the budget engines'
#: 84 usable blocks (at 380 words and 64 out they took them all, and the engine preempted)
#: As a user who does not give the budget would run it.
LONG_UNSAID = Workload((1, 6), (4, 24), 48, input_len=347)
LONG = replace(LONG_UNSAID, flags=GIVEN)
#: The same on the engine with chunked prefill off, given its own budget.
LONG_WHOLE = replace(LONG_UNSAID, flags=("--llm-server-max-num-batched-tokens", "512"))
ITL = "vllm:inter_token_latency_seconds"
PREFILL = "vllm:request_prefill_time_seconds"
#: A prompt of ~360 tokens under the 32-token budget takes 12 steps or more (11.25 if it had
#: the budget alone; up to 5 decoding sequences share it): its prefill must last more than this
#: many of the chunked run's usual steps. Measured 13.5 of them on the Xeon (406 ms at 30 ms),
#: 13.9 on the EPYC in fp32 (1.50 s at 108 ms); a whole prompt's prefill, in the same steps,
#: 3.8 and 8.3: 10 tells the two apart on both
CHUNKED_PREFILL_STEPS = 10
#: The verdict's budget test: the mean step fills this share of the budget (budget_fill).
FILLED = 0.75
PREFILL_CAUSES = ("compute_bound_prefill", "prefill_interference")
#: The split's tolerance, as a share of the stage's TTFT (issue 32: "within 10% per stage").
SPLIT_OF_TTFT = 0.10


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RegimeRun]:
    """Each run by name, every request of each succeeded (:func:`vllm.regimes.run_regimes`):
    the shared-prefix load on the engine with the prefix cache off, then on; the long prompts
    on the cache-off engine (chunked prefill on) and on the engine with it off."""
    off = tmp_path_factory.mktemp("vllm-cache-off")
    on = tmp_path_factory.mktemp("vllm-cache-on")
    whole = tmp_path_factory.mktemp("vllm-chunking-off")
    return {
        **run_regimes(
            off,
            (*ENGINE_FLAGS, *CACHE_OFF),
            {"budget": SHARED, "chunked": LONG, "unsaid": LONG_UNSAID},
        ),
        **run_regimes(on, ENGINE_FLAGS, {"cached": SHARED}),
        **run_regimes(whole, CHUNKING_OFF, {"whole": LONG_WHOLE}),
    }


def _step_tokens(engine: dict[str, float]) -> float:
    """The engine's mean tokens per step over a stage's requests."""
    return mean(engine, "vllm:iteration_tokens_total")


def test_the_report_counts_the_engines_tokens_per_step(runs: dict[str, RegimeRun]) -> None:
    """The report's tokens per step (the stage's window, by the run's scrapes) against the
    engine's (bracketed by the stage's requests, :mod:`vllm.scrapes`): where every step is full
    the edges cannot move the mean; where they are not, the steps at the window's edges (the
    last prompts of the stage before, the first of the next) can (measured 20.2 against 17.4
    for the cached run on a fresh-clone CI), and both must say the same of the budget."""
    full = runs["budget"].report.table.iloc[1]["server_step_tokens"]
    assert full == pytest.approx(_step_tokens(runs["budget"].engine[1]), rel=0.08)  # 2.4% seen
    assert full >= FILLED * BUDGET_TOKENS
    cached = runs["cached"].report.table.iloc[1]["server_step_tokens"]
    assert 0 < cached < FILLED * BUDGET_TOKENS
    assert 0 < _step_tokens(runs["cached"].engine[1]) < FILLED * BUDGET_TOKENS


def test_a_budget_that_every_step_fills_is_named_not_a_batch_or_kv_limit(
    runs: dict[str, RegimeRun],
) -> None:
    run = runs["budget"]
    engine, verdict = run.engine[1], run.report.verdicts[1]
    print(f"steps {_step_tokens(engine):.1f} tokens, running at most "
          f"{run.stage_signal(1, 'running').max():.0f}, KV at most "
          f"{run.stage_signal(1, 'kv_cache_usage').max():.0%}: {verdict}")  # fmt: skip
    assert _step_tokens(engine) >= FILLED * BUDGET_TOKENS  # the engine's steps are full
    assert runs["budget"].stage_signal(1, "waiting_capacity").max() > 0  # and requests wait
    assert engine["vllm:num_preemptions_total"] == 0  # not for KV blocks
    assert runs["budget"].stage_signal(1, "running").max() < MAX_NUM_SEQS  # nor for a batch slot
    assert verdict.cause in PREFILL_CAUSES, verdict
    assert verdict.kind == CAUSES[verdict.cause].kind, verdict  # prefill_bound
    assert any("--max-num-batched-tokens" in line for line in verdict.evidence), verdict


def test_the_prefix_cache_share_is_the_engines_and_lifts_the_budget(
    runs: dict[str, RegimeRun],
) -> None:
    row, engine = runs["cached"].report.table.iloc[1], runs["cached"].engine[1]
    engine_share = engine["vllm:prompt_tokens_cached_total"] / engine["vllm:prompt_tokens_total"]
    assert engine_share > 0.8  # 9 of the prefix's 32-token blocks are served from the cache
    assert row["server_cached_tps"] / row["server_prompt_tps"] == pytest.approx(
        engine_share, abs=0.03
    )
    assert runs["budget"].engine[1]["vllm:prompt_tokens_cached_total"] == 0  # the cache off
    verdict = runs["cached"].report.verdicts[1]
    print(f"cached {engine_share:.1%}, steps {_step_tokens(engine):.1f} tokens: {verdict}")
    assert _step_tokens(engine) < FILLED * BUDGET_TOKENS  # the cache's prompts leave room
    assert engine["vllm:num_preemptions_total"] == 0
    assert verdict.cause not in ("kv_capacity_admission", "batch_limit_admission"), verdict
    assert not any("--max-num-batched-tokens" in line for line in verdict.evidence), verdict
    ttft = [run.report.table.iloc[1]["ttft_avg_s"] for run in (runs["budget"], runs["cached"])]
    assert ttft[1] < 0.5 * ttft[0]  # the cache serves most of each prompt


def test_the_split_under_chunked_prefill_matches_the_engines_phases(
    runs: dict[str, RegimeRun],
) -> None:
    table = split_against_engine(runs, stages=(1,))
    assert (table["off_of_ttft"] <= SPLIT_OF_TTFT).all(), table


def test_whole_prompts_stalling_decoding_are_named_and_chunked_prefill_first(
    runs: dict[str, RegimeRun],
) -> None:
    """Chunked prefill off by flag: the engine's own gaps and prefill times show whole prompts
    stalling decoding, and the verdict names it from our gaps (no resource model on a CPU
    engine) with chunked prefill first among its actions; with chunking on, the same load has
    no long gap and no stall verdict, and its queue is the budget's, not a batch slot's."""
    th = Thresholds()
    whole, chunked = runs["whole"], runs["chunked"]
    step_s = chunked.report.table.iloc[1]["itl_p50_s"]  # its usual step: chunks and decodes
    stall = stall_bound(bounds(chunked.engine[1], ITL), step_s)  # the stall, in its steps
    for name, run in (("whole", whole), ("chunked", chunked)):
        engine, row = run.engine[1], run.report.table.iloc[1]
        print(f"{name}: engine gaps > {stall} s {share_above(engine, ITL, stall):.1%}, "
              f"prefill {mean(engine, PREFILL) * 1e3:.0f} ms; ours: stall share "
              f"{row['decode_stall_share']:.3f}, ITL P50 {row['itl_p50_s'] * 1e3:.1f} ms, P99 "
              f"{row['itl_p99_s'] * 1e3:.1f} ms: {run.report.verdicts[1]}")  # fmt: skip
    engine = whole.engine[1]
    assert share_above(engine, ITL, stall) > 0.01  # decoding waited out whole prompts
    assert engine["vllm:num_preemptions_total"] == 0  # not a KV wait
    row, verdict = whole.report.table.iloc[1], whole.report.verdicts[1]
    assert row["decode_stall_share"] >= th.stall_share, row["decode_stall_share"]
    assert (verdict.rule, verdict.cause) == ("prompt_stalls", "prefill_interference"), verdict
    assert verdict.kind == CAUSES["prefill_interference"].kind, verdict
    assert "--enable-chunked-prefill" in verdict.actions[0], verdict.actions
    assert verdict.confidence != "high", verdict  # the reading is not benchmarked: one lower

    engine = chunked.engine[1]
    assert engine["vllm:num_preemptions_total"] == 0  # every sequence fits its KV cache
    # 32-token steps: the engine's own long gaps a small part of chunking off's (0% against
    # 8.0% in three runs on a quiet Xeon at 75 ms; 0% against 8.0% on the EPYC at 2.5 s in bf16
    # and at 0.3 s in fp32): compared within the run, not to a fixed share
    assert share_above(engine, ITL, stall) < share_above(whole.engine[1], ITL, stall) / 3
    # each prompt over many steps (on the EPYC 7.06 s of prefill at ~0.5 s steps in bf16, 1.50 s
    # at 108 ms in fp32; the whole prompts' 5.63 s and 0.90 s there, so "twice chunking off's",
    # as on the Xeon, does not hold on every CPU)
    assert mean(engine, PREFILL) > CHUNKED_PREFILL_STEPS * step_s
    assert chunked.report.table.iloc[1]["decode_stall_share"] < th.stall_share
    verdict = chunked.report.verdicts[1]
    assert verdict.rule != "prompt_stalls", verdict
    # prompts wait for the 32-token budget, never for a batch slot: at most 6 of 8 run
    assert chunked.stage_signal(1, "running").max() < MAX_NUM_SEQS
    assert verdict.cause != "batch_limit_admission", verdict


def test_a_plateau_beside_long_prefills_is_not_named_a_batch_limit_with_confidence(
    runs: dict[str, RegimeRun],
) -> None:
    """The long prompts on the 32-token budget engine, the budget not given: vLLM exports
    neither its budget nor its batch limit, and the prompts chunked over many steps flatten
    the running gauge below its limit of 8 (measured: a plateau at 5, read as the limit, and
    `overloaded: batch slots` at high confidence before the doubt). Whatever the verdict names,
    a batch limit read off that plateau comes at low confidence, with what to give."""
    run = runs["unsaid"]
    verdict, row = run.report.verdicts[1], run.report.table.iloc[1]
    print(f"unsaid: running at most {run.stage_signal(1, 'running').max():.0f}, prefill "
          f"{row['prefill_avg_s'] * 1e3:.0f} ms, TPOT {row['tpot_avg_s'] * 1e3:.1f} ms: "
          f"{verdict}")  # fmt: skip
    assert run.stage_signal(1, "running").max() < MAX_NUM_SEQS  # never a batch-slot wait
    assert run.engine[1]["vllm:num_preemptions_total"] == 0
    if verdict.cause == "batch_limit_admission":
        assert verdict.confidence == "low", verdict
        assert any("--llm-server-max-num-batched-tokens" in e for e in verdict.evidence), verdict
