"""Engine profiles: the host-side constants of each serving engine the simulator can stand in for.

The GPU's work (the roofline step) is the same whichever engine drives it; what differs between
engines and their generations is the time the host spends around it and how often it schedules:

- ``step_overhead_s``: host time per step on the GPU's critical path (scheduling, input
  preparation, kernel launches) that does not grow with the batch;
- ``step_overhead_per_seq_s``: host time per sequence in the step (preparing its inputs,
  sampling, emitting its token), also between the GPU's steps;
- ``decode_steps_per_schedule``: decode steps run per scheduling decision (vLLM V0's
  ``--num-scheduler-steps``): a request that arrives during them waits for their end;
- ``api_server_s``: the API server's time per request before the engine sees it (HTTP parsing,
  the chat template, validation, handing it to the engine process);
- ``tokenize_s_per_token``: tokenizing the prompt, per prompt token, before the engine sees it;
- ``detokenize_s_per_token``: from a token's step end to its bytes on the socket, per token of
  the chunk (detokenizing, building the SSE event);
- ``tp_step_overhead_s``: host and synchronisation time per step for each GPU beyond the
  first (handing the step to every worker process, waiting for the slowest rank; fitted on
  tensor-parallel GPUs, carried over to pipeline stages' as one hand-off per worker),
  paid by a step that was scheduled (a multi-step schedule hands its batch over once); the
  all-reduces themselves are the roofline's (:class:`~locust_llm.roofline.floors.Interconnect`).

Every value carries its source in :attr:`EngineProfile.sources`: a URL or an engine code path,
or "fitted" with the data it was fitted on, or "assumed" where nobody has measured it (then the
profile is a labelled guess, not a calibration). ``vllm-v1`` is the default; it and ``sglang``
(one published point) are the profiles the calibration (``bench/calibration.py``) holds to
published figures; the others are not calibrated (no published sweep in the calibration ran
them).

Not modelled in any profile: scheduler policies other than first-come-first-served (SGLang's
longest-prefix-match order, TGI's prefill-priority batching); the simulator admits in arrival
order for every engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from locust_llm.errors import InputError

#: the fields of :class:`EngineProfile` that become :class:`~locust_llm.sim.config.SimConfig`
#: fields of the same name (a flag or TOML key overrides the profile's value)
PROFILE_FIELDS: tuple[str, ...] = (
    "step_overhead_s",
    "step_overhead_per_seq_s",
    "decode_steps_per_schedule",
    "api_server_s",
    "tokenize_s_per_token",
    "detokenize_s_per_token",
    "tp_step_overhead_s",
)


@dataclass(frozen=True, kw_only=True)
class EngineProfile:
    """One engine's host-side constants (seconds; see the module docstring for each)."""

    name: str
    title: str
    step_overhead_s: float
    step_overhead_per_seq_s: float
    decode_steps_per_schedule: int = 1
    api_server_s: float = 0.0
    tokenize_s_per_token: float = 0.0
    detokenize_s_per_token: float = 0.0
    tp_step_overhead_s: float = 0.0
    calibrated: bool = False  # held to published figures by bench/calibration.py
    sources: Mapping[str, str] = field(default_factory=dict)  # field -> where its value comes from

    def settings(self) -> dict[str, float | int]:
        """The profile's values of :data:`PROFILE_FIELDS`."""
        return {name: getattr(self, name) for name in PROFILE_FIELDS}


_V1_HOST = (
    "fitted: the per-step constant and the per-sequence time together bring the RTX 4090 "
    "(C = 32, 48), the H100 (C = 8) and one stream's TPOT on three devices within 10% "
    "(bench/results/calibration.md, sensitivity table); the per-sequence term's order of size "
    "is vLLM's own account, https://github.com/vllm-project/vllm/issues/6801"
)

#: Host and synchronisation time per step for each tensor-parallel GPU beyond the first,
#: fitted for vLLM V1 (bench/calibration.py tp_fit()); the other GPU engines assume it.
TP_STEP_FIT_S = 1.25e-3
_TP_FIT = (
    "fitted: bench/calibration.py tp_fit(), the smallest mean absolute error over the fitting "
    "half's multi-GPU figures (vLLM's nightly latency test: Llama-3-70B at "
    "--tensor-parallel-size 4 and Mixtral-8x7B at 2, on H200 and on A100, beside the one-GPU "
    "Llama-3.1-8B of the same pages; the builds' vLLM version is not on them); held out: "
    "Tenstorrent's Qwen2.5-72B on 2 x H100 (bench/results/calibration.md). Linear in the GPUs "
    "beyond one (one hand-off per worker, chosen before the fit); the fitting half prefers it "
    "to log2 N and to one time whatever N (tp_forms())"
)
_TP_ASSUMED = (
    "assumed: vllm-v1's fitted value (bench/calibration.py tp_fit()); no multi-GPU source of "
    "this engine is in the calibration"
)

VLLM_V1 = EngineProfile(
    name="vllm-v1",
    title="vLLM V1 (0.8+): chunked prefill, API server and detokenizer in their own process",
    step_overhead_s=0.002,
    step_overhead_per_seq_s=80e-6,
    tp_step_overhead_s=TP_STEP_FIT_S,
    calibrated=True,
    sources={
        "tp_step_overhead_s": _TP_FIT,
        "step_overhead_s": _V1_HOST,
        "step_overhead_per_seq_s": _V1_HOST,
        "decode_steps_per_schedule": "vllm/v1/core/sched/scheduler.py: schedule() runs before "
        "every model step; V1 has no multi-step scheduling",
        "api_server_s": "0: the calibration's fitting half does not support a fixed time per "
        "request (bench/results/calibration.md, 'Time before the engine'); V1 runs the API "
        "server and tokenizer in a process of their own (vllm/v1/engine/async_llm.py, "
        "vllm/v1/engine/core_client.py), so that time overlaps the GPU's steps",
        "tokenize_s_per_token": "0: as api_server_s (tokenization happens in the API server "
        "process, vllm/v1/engine/processor.py)",
        "detokenize_s_per_token": "0: detokenizing runs in the API server process "
        "(vllm/v1/engine/output_processor.py), overlapped with the next step",
    },
)

VLLM_V0 = EngineProfile(
    name="vllm-v0",
    title="vLLM V0 (0.6 - 0.10 legacy engine), one decode step per schedule",
    step_overhead_s=0.002,
    step_overhead_per_seq_s=100e-6,
    api_server_s=0.005,
    detokenize_s_per_token=0.0,
    tp_step_overhead_s=TP_STEP_FIT_S,
    sources={
        "tp_step_overhead_s": _TP_ASSUMED,
        "step_overhead_s": "assumed: V1's fitted value (no published V0 sweep in the calibration)",
        "step_overhead_per_seq_s": "https://github.com/vllm-project/vllm/issues/6801: sampling, "
        "input preparation, output processing and scheduling ~20 ms per step at a batch of 200 "
        "(~100 µs per sequence), V0's engine loop",
        "decode_steps_per_schedule": "vllm/core/scheduler.py: one step per schedule unless "
        "--num-scheduler-steps > 1",
        "api_server_s": "assumed: https://blog.vllm.ai/2024/09/05/perf-update.html profiles the "
        "HTTP API server at 33% of the execution time (Llama 3 8B, one H100) but gives no time "
        "per request; 5 ms is a guess of its order",
        "tokenize_s_per_token": "assumed 0 (in the API server process, not separated)",
        "detokenize_s_per_token": "0: V0 detokenizes inside the engine loop "
        "(vllm/engine/output_processor/), which is part of step_overhead_per_seq_s",
    },
)

VLLM_V0_MULTISTEP = EngineProfile(
    name="vllm-v0-multistep",
    title="vLLM V0 with --num-scheduler-steps 10 (multi-step scheduling, 0.6 - 0.10)",
    step_overhead_s=0.001,
    step_overhead_per_seq_s=40e-6,
    decode_steps_per_schedule=10,
    api_server_s=0.005,
    tp_step_overhead_s=TP_STEP_FIT_S,
    sources={
        "tp_step_overhead_s": _TP_ASSUMED,
        "step_overhead_s": "assumed: scheduling and input preparation amortised over the 10 "
        "steps (https://blog.vllm.ai/2024/09/05/perf-update.html: multi-step scheduling "
        "schedules once per N steps); half of V0's per-step time",
        "step_overhead_per_seq_s": "assumed: V0's 100 µs less the scheduling and input "
        "preparation it amortises (vLLM issue 6801 splits the 20 ms at batch 200 into "
        "sampling, input preparation, output processing and scheduling)",
        "decode_steps_per_schedule": "https://blog.vllm.ai/2024/09/05/perf-update.html: the "
        "v0.6.0 benchmarks ran --num-scheduler-steps 10; a request arriving during the 10 "
        "steps is scheduled at their end (vllm/engine/llm_engine.py, multi-step path), and "
        "their tokens reach the stream together at the end: every request of "
        "LambdaLabsML's vLLM 0.6.0 bursts streamed in the chunks the simulator gives "
        "(bench/sources/lambdalabs_prompt10.json, tests/test_sim_engine_profiles.py)",
        "api_server_s": "assumed: as vllm-v0",
        "tokenize_s_per_token": "assumed 0 (not separated)",
        "detokenize_s_per_token": "assumed 0 (the async output processor overlaps it, "
        "https://github.com/vllm-project/vllm/pull/7049)",
    },
)

_SGLANG_FIT = (
    "fitted: bench/calibration.py sglang_fit(), the smallest mean absolute error over the four "
    "published figures of `h100-qwen3-8b-sglang` (Qwen3-8B BF16, one H100, C = 4; gpustack's "
    "performance lab, the calibration's fitting half); one point, no held-out SGLang source"
)

SGLANG = EngineProfile(
    name="sglang",
    title="SGLang (0.4+): overlap ('zero-overhead') scheduler",
    step_overhead_s=0.00175,
    step_overhead_per_seq_s=20e-6,
    api_server_s=0.015,
    calibrated=True,
    tp_step_overhead_s=TP_STEP_FIT_S,
    sources={
        "tp_step_overhead_s": _TP_ASSUMED,
        "step_overhead_s": _SGLANG_FIT,
        "step_overhead_per_seq_s": "assumed: the overlap scheduler prepares step n+1 on the "
        "CPU while the GPU runs step n (https://lmsys.org/blog/2024-12-04-sglang-v0-4/"
        "#zero-overhead-batch-scheduler), so little per-sequence host time is left on the "
        "critical path; not fitted (one concurrency cannot separate it from the step's)",
        "decode_steps_per_schedule": "python/sglang/srt/managers/scheduler.py: event_loop_overlap "
        "schedules every step",
        "api_server_s": _SGLANG_FIT + "; the TokenizerManager runs in the HTTP server's process "
        "and hands requests to the scheduler over ZMQ (python/sglang/srt/managers/"
        "tokenizer_manager.py)",
        "tokenize_s_per_token": "assumed 0 (not separated from api_server_s)",
        "detokenize_s_per_token": "assumed 0: a DetokenizerManager process of its own",
    },
)

TGI = EngineProfile(
    name="tgi",
    title="Hugging Face TGI (2.x/3.x): Rust router, Python model server over gRPC",
    step_overhead_s=0.002,
    step_overhead_per_seq_s=50e-6,
    api_server_s=0.002,
    tp_step_overhead_s=TP_STEP_FIT_S,
    sources={
        "tp_step_overhead_s": _TP_ASSUMED,
        "step_overhead_s": "assumed: one gRPC round trip router -> model server per step "
        "(https://huggingface.co/docs/text-generation-inference/architecture)",
        "step_overhead_per_seq_s": "assumed: the model server's Python loop per sequence "
        "(server/text_generation_server/models/flash_causal_lm.py, generate_token)",
        "decode_steps_per_schedule": "router/src/infer/v3/scheduler.rs: the router batches "
        "before every step",
        "api_server_s": "assumed: validation and tokenization in the Rust router's "
        "validation workers (--validation-workers, default 2)",
        "tokenize_s_per_token": "assumed 0 (not separated)",
        "detokenize_s_per_token": "assumed 0 (detokenized in the model server per step, "
        "inside step_overhead_per_seq_s)",
    },
)

LLAMACPP = EngineProfile(
    name="llamacpp",
    title="llama.cpp's llama-server: C++ slots, one batch per step",
    step_overhead_s=0.0005,
    step_overhead_per_seq_s=20e-6,
    api_server_s=0.001,
    sources={
        "tp_step_overhead_s": "0: llama.cpp splits a model over GPUs inside one process "
        "(--split-mode), with no per-step hand-off to worker processes",
        "step_overhead_s": "assumed: a C++ loop (tools/server/server.cpp, update_slots) with "
        "CUDA graphs; a guess of the launch cost",
        "step_overhead_per_seq_s": "assumed: per-slot sampling in C++ (common/sampling.cpp)",
        "decode_steps_per_schedule": "tools/server/server.cpp: update_slots builds one batch "
        "per llama_decode",
        "api_server_s": "assumed: the cpp-httplib front and the chat template in-process",
        "tokenize_s_per_token": "assumed 0 (not separated)",
        "detokenize_s_per_token": "assumed 0 (token_to_piece per token, in-process)",
    },
)

PROFILES: dict[str, EngineProfile] = {
    p.name: p for p in (VLLM_V1, VLLM_V0, VLLM_V0_MULTISTEP, SGLANG, TGI, LLAMACPP)
}
DEFAULT_ENGINE = VLLM_V1.name


def get_profile(name: str) -> EngineProfile:
    """The profile called ``name``; an unknown name is refused with the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise InputError(
            f"--engine: unknown engine {name!r}; known: {', '.join(PROFILES)}"
        ) from None


def profiles_table() -> str:
    """Markdown: one row per profile (docs/simulator.md shows it; a test keeps it current)."""
    out = [
        "| --engine | step (ms) | per sequence (µs) | decode steps per schedule | API server (ms) "
        "| tokenize (µs/token) | detokenize (µs/token) | per TP GPU beyond one (µs) "
        "| calibrated |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for p in PROFILES.values():
        out.append(
            f"| `{p.name}` | {p.step_overhead_s * 1e3:g} | {p.step_overhead_per_seq_s * 1e6:g} | "
            f"{p.decode_steps_per_schedule} | {p.api_server_s * 1e3:g} | "
            f"{p.tokenize_s_per_token * 1e6:g} | {p.detokenize_s_per_token * 1e6:g} | "
            f"{p.tp_step_overhead_s * 1e6:g} | {'yes' if p.calibrated else 'no'} |"
        )
    return "\n".join(out)
