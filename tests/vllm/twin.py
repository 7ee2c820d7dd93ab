"""The simulator as a twin of the real vLLM engine: its device profile fitted to the engine's own
measured steps, then the same loads replayed on it (``tests/test_vllm_regimes.py``).

The fit uses calibration runs only (:data:`CAL_DECODE`, :data:`CAL_PREFILLS`), never the runs
the twin is judged on:

* the mean step of each stage of :data:`CAL_DECODE` (short prompts at 1 and 4 users): the
  engine's mean inter-token latency at the stage's mean running batch, with the prompt tokens
  of its requests spread over its steps (``iteration_tokens_total``'s count);
* prefill steps: the engine's mean prefill time at 1 user of each of :data:`CAL_PREFILLS`
  (prompts of ~80 and ~270 tokens, one step each);
* the front end: the client's TTFT less the engine's queue and prefill at 1 user (the time
  outside the engine: HTTP, chat template, tokenizing, transit), the TTFT the median of the
  records the client stamped exactly (:func:`exact_ttfts`): a run's first request can take
  twice the others' (77 ms against 30-39 ms once, the client's start-up), and the stage has
  four.

The engine's own limits come from the engine: ``vllm:cache_config_info`` (its KV blocks and block
size) and the flags it was started with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from locust_llm.report.build import Report
from locust_llm.roofline.floors import get_model
from locust_llm.sim.device_profile import StepFit, StepSample, fit_steps, profile_settings
from vllm.regimes import RegimeRun, Workload
from vllm.scrapes import mean
from vllm.server import VllmServer

CAL_DECODE = Workload((1, 4), (4, 12), 32, input_len=16)
#: prompts alone at two lengths (the fit tells the fixed overhead from the compute with two)
CAL_PREFILLS = {
    "cal_prefill_64": Workload((1,), (4,), 2, input_len=64),
    "cal_prefill_256": Workload((1,), (4,), 2, input_len=256),
}
#: vLLM's default --max-num-batched-tokens for its API server on a CPU
#: (vllm/engine/arg_utils.py: 2048 x world size); these prompts never reach it.
CPU_DEFAULT_BUDGET = 2048


def engine_blocks(server: VllmServer) -> dict[str, Any]:
    """The engine's KV block count and block size, from its ``vllm:cache_config_info``."""
    (labels,) = [labels for name, labels, _ in server.metric_samples()
                 if name == "vllm:cache_config_info"]  # fmt: skip
    return {
        "num_gpu_blocks": int(labels["num_gpu_blocks"]),
        "block_size": int(labels["block_size"]),
    }


def exact_ttfts(report: Report, stage: int) -> pd.Series:
    """A stage's TTFTs of the records whose first token the client read on its own: one read
    together with later tokens has only an upper bound for a stamp (``ttft_error_bound_s`` > 0:
    the client's worker came late, starved by the engine beside it on this 2-core host; the
    engine's runs of ``long`` had one or two such in five of six, bounds of 107-755 ms)."""
    requests = report.run.requests
    records = requests[requests["stage"] == stage]
    return records.loc[~(records["ttft_error_bound_s"] > 0), "ttft_s"]


def _per_request(engine: dict[str, float], histogram: str) -> float:
    return mean(engine, "vllm:" + histogram)


def _decode_step(run: RegimeRun, stage: int, batch: int) -> StepSample:
    """The mean decode step of a stage of ``batch`` users (below the batch limit: every user
    decodes but while its prompt is computed), by the engine's counts: its mean inter-token
    latency (over steps that decoded), with the prompt tokens computed in those steps (at one
    user none: a prompt is computed alone, and its step is no inter-token gap)."""
    engine = run.engine[stage]
    prompt = _per_request(engine, "request_prompt_tokens")
    out = _per_request(engine, "request_generation_tokens")
    decode_steps = engine["vllm:inter_token_latency_seconds_count"] / batch
    requests = engine["vllm:request_prompt_tokens_count"] if batch > 1 else 0.0
    return StepSample(
        seconds=mean(engine, "vllm:inter_token_latency_seconds"),
        decode_seqs=float(batch),
        decode_context=prompt + out / 2,
        prompt_tokens=prompt * requests / decode_steps,
        prompt_chunk=prompt,
        prefill_seqs=requests / decode_steps,
    )


def _prefill_step(run: RegimeRun) -> StepSample:
    """A prompt computed alone (one user): the engine's mean prefill time."""
    engine = run.engine[0]
    prompt = _per_request(engine, "request_prompt_tokens")
    return StepSample(
        seconds=mean(engine, "vllm:request_prefill_time_seconds"), prompt_tokens=prompt
    )


def fit_twin(runs: dict[str, RegimeRun], model_dir: Path) -> StepFit:
    """The step fit from the calibration runs (see the module's docstring)."""
    users = CAL_DECODE.concurrency
    samples = [_decode_step(runs["cal_decode"], i, n) for i, n in enumerate(users)]
    samples += [_prefill_step(runs[name]) for name in CAL_PREFILLS]
    return fit_steps(get_model(str(model_dir / "config.json")), samples)


def twin_settings(
    fit: StepFit,
    cal_decode: RegimeRun,
    model_dir: Path,
    blocks: dict[str, Any],
    *,
    max_num_seqs: int,
    max_model_len: int,
    name: str,
) -> dict[str, Any]:
    """``locust-llm sim`` settings of the twin: the fitted profile, the front end's time at 1
    user, and the engine's limits (its usable KV blocks: vLLM keeps one block null)."""
    row = cal_decode.report.table.iloc[0]
    ttft = float(exact_ttfts(cal_decode.report, 0).median())
    outside = ttft - float(row["queue_avg_s"] + row["prefill_avg_s"])
    limits = {
        "max_num_seqs": max_num_seqs,
        "max_model_len": max_model_len,
        "max_num_batched_tokens": CPU_DEFAULT_BUDGET,
        "block_size": blocks["block_size"],
        "num_gpu_blocks_override": blocks["num_gpu_blocks"] - 1,
        "tokenizer": str(model_dir),
        "served_model_name": name,
    }
    return profile_settings(fit, str(model_dir / "config.json"), limits, api_server_s=outside)
