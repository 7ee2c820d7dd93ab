"""Resource model per stage: compute and bandwidth utilization, and the admission limit that binds.

Pure. From the stage's observed throughput, batch, token mix and the roofline
(:mod:`locust_llm.roofline.floors`):

- ``mfu`` (model FLOPs utilization) = tokens computed per second x 2 x parameters per token /
  the device's peak FLOP/s; tokens computed per second are the server's own counters' rates
  in the window (prompt tokens computed + tokens generated: :func:`server_token_rates`) when
  it exports them, else the input + output tokens of the completed requests / duration;
- ``mbu`` (model bandwidth utilization) = bytes one decode step of the observed batch moves
  (weights + KV at the mean context) x steps per second (1 / mean TPOT) / the device's
  bandwidth;
- ``compute_time_share``: the share of the device's busy time that compute set. A step that
  carries a prompt chunk is compute-bound, and lasts all its FLOPs' time, when the chunk's
  FLOPs outlast the batch's bytes (not when the prefix cache served most of the prompt and the
  chunk is a few dozen tokens); a decode-only step is memory-bound (unless its batch is past
  the roofline's ridge) and its few FLOPs do not set its length. So: at the achievable compute
  efficiency (:func:`efficiencies`), the FLOP time of the tokens recomputed after
  preemptions (:func:`recompute_tokens_per_s`), and, in the steps with prompt work that are
  compute-bound, of their prompt tokens and of the decode tokens in them (prompts per step =
  :func:`prompts_per_s` x TPOT; the steps with prompt work hold a Poisson count of prompts,
  and those with enough of them are compute-bound: :class:`StepMix`); all tokens
  when a decode step of the observed batch is compute-bound at the achievable efficiencies;
  over the busy share (``gpu_util``, 1 when unknown). Comparing the stage's mean MFU with its
  mean MBU cannot tell this: mixed steps average out;
- ``prompt_step_share``: the share of steps that carry prompt work (see above);
  ``decode_step_bound``: what bounds a decode-only step of the observed batch at the
  achievable efficiencies (``compute`` past the roofline's ridge);
- ``memory_time_share`` / ``host_time_share``: the memory term of the steps it bounds, and
  what the device's time leaves of a decode-only step (:func:`memory_and_host_shares`);
- ``step_bound``: ``compute`` when ``compute_time_share`` >= ``compute_bound_share``
  (compute set most of the step time), else ``host`` where the host's share outlasts the
  memory term, else ``memory``;
- ``prefill_token_share``: input tokens / all tokens computed (the server's rates when known),
  the tokens computed again after preemptions on the input side (:func:`with_recompute`);
- the admission limits in sequences: ``kv_capacity_seqs`` (observed: running / KV-cache usage;
  else the roofline's KV budget at 90% memory over the mean context), ``max_num_seqs`` and
  ``server_slots`` (from run.json's ``extra``/``extra.server``: ``max_num_seqs``,
  ``total_slots``, as llama.cpp's ``/props`` names its slots), the smallest of them is
  ``admission_limit`` / ``admission_limit_seqs``; ``batch_fill`` = peak running / that limit;
  ``batch_limit_source``: where the batch limit came from (the option, llama.cpp's ``/props``,
  or, when nothing said it, the running gauge: :func:`with_observed_limit`, named
  ``batch limit (observed)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from locust_llm.report.diagnosis.decompose import computed_prompt_tokens
from locust_llm.report.diagnosis.thresholds import DEFAULT_THRESHOLDS
from locust_llm.report.fmt import column as _f
from locust_llm.roofline.devices import measured_on_a_host
from locust_llm.roofline.floors import (
    GpuSpec,
    ModelSpec,
    StepCost,
    Workload,
    attention_flops,
    compute,
    step_cost,
)
from locust_llm.telemetry.batch_limit import limit_from_gauges

NAN = math.nan
#: Its judgements (compute-bound steps: ``compute_bound_share``; peak KV usage from which running
#: / usage is trusted as the capacity, below it the roofline's: ``observed_kv_min``).
_TH = DEFAULT_THRESHOLDS

#: Achievable compute efficiency of serving kernels (the simulator's calibrated default,
#: bench/results/calibration.md): FLOPs take FLOPs / (peak x this) seconds.
COMPUTE_EFFICIENCY = 0.7

#: Achievable bandwidth efficiency (the same source): bytes take bytes / (bandwidth x this).
BANDWIDTH_EFFICIENCY = 0.85


def efficiencies(gpu: GpuSpec) -> dict[str, float]:
    """The achievable compute and bandwidth efficiencies of ``gpu`` (``cost.times`` keywords):
    a datasheet's peaks at :data:`COMPUTE_EFFICIENCY` and :data:`BANDWIDTH_EFFICIENCY`; a
    CPU (``--gpu cpu``: the probe's best numpy copy and matmul, or figures given by hand) at 1,
    since its figures are rates the host achieved
    (:func:`~locust_llm.roofline.devices.measured_on_a_host`). Derated again, a llama.cpp
    stage whose weight reads took 49% of the step read a memory term of 57% and was named for
    the memory bandwidth."""
    if measured_on_a_host(gpu):
        return {"compute_eff": 1.0, "bw_eff": 1.0}
    return {"compute_eff": COMPUTE_EFFICIENCY, "bw_eff": BANDWIDTH_EFFICIENCY}


COLUMNS: tuple[str, ...] = (
    "mfu",
    "mbu",
    "compute_time_share",
    "memory_time_share",
    "host_time_share",
    "prompt_step_share",
    "decode_step_bound",
    "step_bound",
    "prefill_token_share",
    "kv_capacity_seqs",
    "admission_limit",
    "admission_limit_seqs",
    "batch_fill",
    "batch_limit_source",
)


@dataclass(frozen=True)
class ServerLimits:
    """Admission limits the server told us (None: not known), and where the batch limit came
    from (``max_num_seqs_source``: the option, a probe, the running gauge)."""

    max_num_seqs: int | None = None
    slots: int | None = None
    source: str = ""


def server_limits(extra: Mapping[str, Any]) -> ServerLimits:
    """``max_num_seqs`` and llama.cpp's ``total_slots`` from run.json's extra (or its server)."""
    found: dict[str, int] = {}
    for source in (extra, extra.get("server") or {}):
        if not isinstance(source, Mapping):
            continue
        for key in ("max_num_seqs", "total_slots"):
            value = source.get(key)
            if isinstance(value, int | float) and value > 0 and key not in found:
                found[key] = int(value)
    said = extra.get("max_num_seqs_source")
    return ServerLimits(
        found.get("max_num_seqs"), found.get("total_slots"), said if isinstance(said, str) else ""
    )


Timeline = Callable[[str], tuple[np.ndarray, np.ndarray]]


def with_observed_limit(extra: Mapping[str, Any], timeline: Timeline) -> dict[str, Any]:
    """run.json's ``extra``, plus ``max_num_seqs`` / ``max_num_seqs_source`` read from the
    gauges (:func:`locust_llm.telemetry.batch_limit.limit_from_gauges`) when neither the user, a
    probe
    nor the server's own record gave a batch limit. ``timeline(signal)`` gives a signal's
    (times, values) combined over GPUs and servers (``TelemetryIndex.timeline``)."""
    out = dict(extra)
    known = server_limits(extra)
    sim = extra.get("sim")
    if known.max_num_seqs or known.slots or (isinstance(sim, Mapping) and sim.get("max_num_seqs")):
        return out
    gauges = {
        s: dict(zip(*timeline(s), strict=True)) for s in ("running", "waiting", "kv_cache_usage")
    }
    samples = [
        (
            float(r),
            float(gauges["waiting"].get(t, NAN)),
            float(gauges["kv_cache_usage"].get(t, NAN)),
        )
        for t, r in gauges["running"].items()
    ]
    found = limit_from_gauges(samples)
    if found is not None:
        out["max_num_seqs"], out["max_num_seqs_source"] = found
    return out


def resource_row(
    row: Mapping[str, Any],
    model: ModelSpec | None,
    gpu: GpuSpec | None,
    limits: ServerLimits = ServerLimits(),
    *,
    tp: int = 1,
) -> dict[str, Any]:
    """The :data:`COLUMNS` of one stage row (``tp`` GPUs share the work: utilizations are
    per GPU)."""
    out: dict[str, Any] = {c: NAN for c in COLUMNS}
    out["step_bound"] = out["admission_limit"] = out["decode_step_bound"] = ""
    out["batch_limit_source"] = limits.source if limits.max_num_seqs else ""
    n_in, n_out = _f(row, "input_tokens_avg"), _f(row, "output_tokens_avg")
    computed_in = computed_prompt_tokens(row)  # the prefix cache's tokens are not computed
    if computed_in + n_out > 0:
        out["prefill_token_share"] = computed_in / (computed_in + n_out)
    server_in, server_out = server_token_rates(row)
    if server_in + server_out > 0:
        out["prefill_token_share"] = server_in / (server_in + server_out)
    first_pass = out["prefill_token_share"]  # the compute share adds the recomputed tokens
    out["prefill_token_share"] = with_recompute(first_pass, row)
    batch = observed_batch(row)
    context = round((n_in if n_in > 0 else 0) + (n_out if n_out > 0 else 0) / 2)
    if model is not None and gpu is not None:
        tokens_per_s = _f(row, "total_tps")
        if server_in + server_out > 0:
            tokens_per_s = server_in + server_out
        peak = gpu.peak_flops(model.weight_bits) * tp  # the work is spread over tp GPUs
        out["mfu"] = tokens_per_s * 2.0 * model.params_per_token() / peak
        tpot = step_seconds(row)
        share = NAN
        if batch > 0 and tpot > 0:
            mix = step_mix(row, model, gpu, batch, max(1, context), tp)
            out["mbu"] = mix.decode.bytes / tpot / gpu.memory_bandwidth_bytes_s
            out["decode_step_bound"] = "compute" if mix.decode_compute_bound else "memory"
            out["prompt_step_share"] = prompt_step_share(row)
            out["memory_time_share"], out["host_time_share"] = memory_and_host_shares(
                row, model, gpu, mix
            )
            share = compute_time_share(
                out["mfu"], first_pass, row, mix, gpu, model, tp
            ) + compute_steps_rest(mix, out["host_time_share"], tpot)
            share = min(1.0, share) if math.isfinite(share) else NAN
        if not math.isnan(share + out["mbu"]):
            out["compute_time_share"] = share
            out["step_bound"] = step_bound(
                share, out["memory_time_share"], out["host_time_share"], measured_on_a_host(gpu)
            )
    kv_usage = _f(row, "kv_cache_usage_max")
    running_max = _f(row, "running_max")
    if running_max > 0 and kv_usage >= _TH.observed_kv_min:
        out["kv_capacity_seqs"] = running_max / kv_usage
    elif model is not None and gpu is not None and not math.isnan(gpu.memory_bytes) and context:
        floors = compute(
            model,
            gpu,
            Workload(
                context_tokens=max(1, context),
                input_tokens=max(1, round(n_in)) if n_in > 0 else 1,
                tp=tp,
            ),
        )
        out["kv_capacity_seqs"] = floors.kv_capacity_sequences
    observed = limits.source.startswith("running gauge")
    candidates = [
        (out["kv_capacity_seqs"], "KV capacity"),
        (
            float(limits.max_num_seqs or NAN),
            "batch limit (observed)" if observed else "max-num-seqs",
        ),
        (float(limits.slots or NAN), "server slots"),
    ]
    known = [(v, name) for v, name in candidates if v > 0]
    if known:
        seqs, name = min(known)
        out["admission_limit"], out["admission_limit_seqs"] = name, seqs
        if running_max > 0:
            out["batch_fill"] = running_max / seqs
    return out


def observed_batch(row: Mapping[str, Any]) -> float:
    """The decode batch a stage's steps ran with: ``running_busy`` (the running gauge's samples
    with a request in the batch; the idle samples between requests pull the plain mean below
    every batch a step ran), else the mean ``running``, else the concurrency (NaN: none)."""
    for key in ("running_busy", "running", "concurrency"):
        value = _f(row, key)
        if value > 0:
            return value
    return NAN


def recompute_tokens_per_s(row: Mapping[str, Any]) -> float:
    """Tokens the server computed again after preempting (recompute preemption: a preempted
    sequence prefills its prompt and the tokens it had sent once more): the stage's
    preemptions x (the computed prompt + half the output) / its duration; 0 without
    preemptions. The prompt tokens the prefix cache served are not computed again either: the
    blocks of a prefix the running sequences share stay in the cache (shared-prefix prompts
    preempted at a full cache: charging whole prompts read 100% compute where the traces had
    19%)."""
    pre, dur = _f(row, "preemptions"), _f(row, "duration_s")
    if not (pre > 0 and dur > 0):
        return 0.0
    n_in, n_out = computed_prompt_tokens(row), _f(row, "output_tokens_avg")
    again = pre * ((n_in if n_in > 0 else 0.0) + (n_out if n_out > 0 else 0.0) / 2) / dur
    return max(0.0, again - found_again_per_s(row))


def with_recompute(share: float, row: Mapping[str, Any]) -> float:
    """The prompt side's share of the tokens computed, ``share`` of the first passes, with
    the tokens computed again after preemptions (:func:`recompute_tokens_per_s`) on the
    prompt side, as the steps compute them: a preempted sequence prefills again. The
    server's prompt counter counts a prompt once, when its first token comes out: a stage
    whose steps recomputed preempted prompts while no first token fell in it read 0% (the
    traces: 99.9%)."""
    again = recompute_tokens_per_s(row)
    prompt, output = server_token_rates(row)
    if not prompt + output > 0:  # the client's completions per second instead
        qps = _f(row, "qps")
        prompt, output = computed_prompt_tokens(row) * qps, _f(row, "output_tokens_avg") * qps
    if not (again > 0 and prompt >= 0 and output >= 0 and 0 <= share <= 1):
        return share
    return (prompt + again) / (prompt + again + output)


def found_again_per_s(row: Mapping[str, Any]) -> float:
    """Tokens per second the server's prefix cache served beyond what its answers said it
    served the prompts (``server_cached_tps`` less qps x ``cached_tokens_avg``): a preempted
    sequence's own blocks, freed but still hashed, found again when it is readmitted, so not
    computed again; 0 without the server's hit counter."""
    hits = _f(row, "server_cached_tps")
    if not hits > 0:
        return 0.0
    served = _f(row, "cached_tokens_avg") * _f(row, "qps")
    return max(0.0, hits - (served if served > 0 else 0.0))


def server_token_rates(row: Mapping[str, Any]) -> tuple[float, float]:
    """(prompt tokens computed, tokens generated) per second by the server's own counters in
    the stage window, or (NaN, NaN) without both. In a stage that is not steady (a queue that
    grows, requests that finish stages later) they say what the device did in the window,
    where the client's completions say what ended in it."""
    prompt, output = _f(row, "server_prompt_tps"), _f(row, "server_output_tps")
    if not (prompt >= 0 and output >= 0):
        return NAN, NAN
    cached = _f(row, "server_cached_tps")
    if cached > 0:
        # the client's answers say what share of the prompts the cache served; the server's hit
        # counter also counts preempted requests' own blocks found again, so it is used alone
        # only where nothing was preempted
        n_in, served = _f(row, "input_tokens_avg"), _f(row, "cached_tokens_avg")
        if n_in > 0 and 0 <= served <= n_in:
            prompt *= 1.0 - served / n_in
        elif not _f(row, "preemptions") > 0:
            prompt = max(0.0, prompt - cached)
    return prompt, output


def prompts_per_s(row: Mapping[str, Any]) -> float:
    """Prompts whose prefill the server ran per second: its prompt tokens per second over the
    mean computed prompt, else the client's completions per second (qps)."""
    server_in, _ = server_token_rates(row)
    computed = computed_prompt_tokens(row)
    if server_in >= 0 and computed > 0:
        return server_in / computed
    return _f(row, "qps")


def step_seconds(row: Mapping[str, Any]) -> float:
    """A step's mean length in the stage's window: the mean TPOT of the requests that finished
    in it (``served_tpot_avg_s``), else of the requests sent in it (``tpot_avg_s``). The
    resource model prices the steps the server ran in the window; the requests sent in a
    stage may decode in the next one's steps (open loop at 1 request/s of 4k-token prompts:
    52 ms, the next stage's pace, where the window's steps took 15 ms and the trace's memory
    term set 60% of them, read 18%)."""
    served = _f(row, "served_tpot_avg_s")
    return served if served > 0 else _f(row, "tpot_avg_s")


def prompts_per_step(row: Mapping[str, Any]) -> float:
    """Prompts prefilled per step: prompts per second x mean TPOT (one step per decode
    token); 0 when unknown."""
    per_step = prompts_per_s(row) * step_seconds(row)
    return per_step if math.isfinite(per_step) and per_step > 0 else 0.0


def prompt_step_share(row: Mapping[str, Any]) -> float:
    """Share of the steps that carry prompt work: :func:`prompts_per_step`, at most 1; at most
    the share of steps in which the stage's requests got their first token
    (``first_token_step_share``, where the stage has it: prompts that arrive together share a
    step); 0 when unknown."""
    spread = min(1.0, prompts_per_step(row))
    seen = _f(row, "first_token_step_share")
    return min(spread, seen) if 0 < seen <= 1 else spread


@dataclass(frozen=True)
class StepGroup:
    """Steps that carry prompt work alike: ``share`` of all the stage's steps, what one of them
    costs (the decode batch and that group's mean prompts as one chunk), and the share of the
    prompt tokens computed that they hold."""

    share: float
    cost: StepCost
    prompt_tokens: float
    compute_bound: bool  # its prompts' FLOPs outlast the batch's bytes


@dataclass(frozen=True)
class StepMix:
    """The stage's steps: decode-only steps of the observed batch and, in ``mixed`` of the
    steps (:func:`prompt_step_share`), the same batch with prompt work. The prompts a step with
    prompt work carries vary about their mean (:func:`prompts_per_step` over the mixed share):
    ``groups`` holds the steps whose prompts leave them memory-bound and the steps whose
    prompts make them compute-bound, each at its own mean (:func:`prompts_per_mixed_step`)."""

    decode: StepCost
    decode_compute_bound: bool  # a decode-only step of the batch is past the ridge
    mixed: float  # share of the steps that carry prompt work, 0..1
    groups: tuple[StepGroup, ...] = ()  # empty when no prompt work is known

    @property
    def compute_set(self) -> tuple[StepGroup, ...]:
        """The steps compute sets: every step (and every prompt in them) when a decode-only
        step is past the ridge, else the groups whose prompts make them compute-bound."""
        if self.decode_compute_bound:
            return (StepGroup(1.0, self.decode, 1.0, True),)
        return tuple(g for g in self.groups if g.compute_bound)


def prompts_per_mixed_step(mean: float) -> list[tuple[int, float]]:
    """(k, chance) of a step that carries prompt work holding k prompts, when such steps hold
    ``mean`` of them on average: prompts that arrive independently fall on a step as a Poisson
    count, seen only where it is at least one (the zero-truncated Poisson whose mean is
    ``mean``). Its terms under a chance of 1e-7 are dropped and the rest renormalized; a mean of
    at most 1 is one prompt a step.

    The spread is what decides a small model's steps: at 0.84 prompts a step (128-token
    prompts, a 0.5B model, 128 users), one prompt leaves a step memory-bound and two make it
    compute-bound; the trace had prompt work in 51% of the steps and compute setting 20% of
    the step time, where one mean chunk of 1.7 prompts in every such step read 54%."""
    if not mean > 1.0 + 1e-9:
        return [(1, 1.0)]
    rate = _truncated_poisson_rate(mean)
    centre = max(1, round(rate))
    span = int(8 * math.sqrt(rate)) + 8
    ks = range(max(1, centre - span), centre + span + 1)
    log_norm = math.log(-math.expm1(-rate))
    chances = [(k, math.exp(k * math.log(rate) - rate - math.lgamma(k + 1) - log_norm)) for k in ks]
    kept = [(k, c) for k, c in chances if c >= 1e-7]
    total = math.fsum(c for _, c in kept)
    return [(k, c / total) for k, c in kept]


def _truncated_poisson_rate(mean: float) -> float:
    """The Poisson rate whose count, given at least one, has mean ``mean`` (> 1): the root of
    rate / (1 - e^-rate) = mean, by bisection (the left side rises with the rate)."""
    low, high = 0.0, mean
    for _ in range(60):
        mid = (low + high) / 2
        if mid / -math.expm1(-mid) < mean:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def blended_step_cost(
    model: ModelSpec,
    batch: float,
    context: int,
    prefill: Sequence[tuple[int, int]] = (),
    tp: int = 1,
) -> StepCost:
    """One step of a mean decode ``batch`` at ``context`` tokens (with ``prefill`` chunks): a
    batch between two whole ones costs the blend of theirs, as a batch alternating between
    them would. An MoE step's weight read grows with the experts its tokens touch (2 of 8 for
    one token, 3.5 for two), so a mean of 1.4 rounded down to 1 read a quarter too few bytes
    and handed the difference to the host. Under one sequence: one."""
    whole = max(1, math.floor(batch)) if batch > 0 else 1
    part = min(1.0, max(0.0, batch - whole)) if batch > 1 else 0.0
    low = step_cost(model, [context] * whole, prefill, tp=tp)
    if part <= 0:
        return low
    high = step_cost(model, [context] * (whole + 1), prefill, tp=tp)
    return StepCost(
        low.flops + part * (high.flops - low.flops),
        low.bytes + part * (high.bytes - low.bytes),
        low.comm_s + part * (high.comm_s - low.comm_s),
    )


def step_mix(
    row: Mapping[str, Any],
    model: ModelSpec,
    gpu: GpuSpec,
    batch: float,
    context: int,
    tp: int = 1,
) -> StepMix:
    """The :class:`StepMix` of a stage row whose mean decode batch is ``batch`` sequences at
    ``context`` tokens (:func:`blended_step_cost`): the steps with prompt work split where
    their prompts (:func:`prompts_per_mixed_step`, each the mean computed prompt) first make a
    step compute-bound at the achievable efficiencies (a step's FLOPs grow with its prompts
    faster than its bytes)."""
    decode = blended_step_cost(model, batch, context, (), tp)
    decode_bound = _compute_bound(decode, gpu, model)
    mixed, computed = prompt_step_share(row), computed_prompt_tokens(row)
    if not (mixed > 0 and computed > 0):
        return StepMix(decode, decode_bound, 0.0)
    mean = max(1.0, prompts_per_step(row) / mixed)

    def cost(prompts: float) -> StepCost:
        chunk = max(1, round(computed * prompts))
        return blended_step_cost(model, batch, context, [(chunk, 0)], tp)

    counts = prompts_per_mixed_step(mean)
    # the first count that makes a step compute-bound (bisection over the counts: monotone)
    low, high = 0, len(counts)
    while low < high:
        mid = (low + high) // 2
        if _compute_bound(cost(counts[mid][0]), gpu, model):
            high = mid
        else:
            low = mid + 1
    total = math.fsum(k * c for k, c in counts)
    groups = []
    for part, bound in ((counts[:low], False), (counts[low:], True)):
        chance = math.fsum(c for _, c in part)
        if chance > 0:
            prompts = math.fsum(k * c for k, c in part)
            groups.append(StepGroup(mixed * chance, cost(prompts / chance), prompts / total, bound))
    return StepMix(decode, decode_bound, mixed, tuple(groups))


def _compute_bound(cost: StepCost, gpu: GpuSpec, model: ModelSpec) -> bool:
    """Whether a step's FLOPs outlast its bytes at the achievable efficiencies."""
    compute_s, memory_s = cost.times(gpu, model.weight_bits, **efficiencies(gpu))
    return compute_s >= memory_s


def attention_factors(row: Mapping[str, Any], model: ModelSpec) -> tuple[float, float]:
    """(prompt, decode) token FLOPs over the ``2 x parameters`` that MFU counts per token: the
    attention a token adds, which grows with its context (a 24k-token prompt's attention adds
    ~40% to a 8B model's FLOPs), and the LM head, which only a sampled position goes through.
    A prompt token attends the cached prefix and, causally, half the computed part on average,
    and a prompt's positions but its last never reach the LM head (vLLM computes the logits of
    the sampled positions alone; :func:`~locust_llm.roofline.floors.step_cost` counts them so);
    a decode token attends the mean context (prompt + half the output) and is sampled. MFU's
    ``2 x parameters`` per prompt token counts the head for every one: Qwen2.5-0.5B's head is
    28% of its parameters, and its prompts' compute read 1.4x the steps' (a host-bound stage
    read compute-bound)."""
    n_in, n_out = _f(row, "input_tokens_avg"), _f(row, "output_tokens_avg")
    n_in, n_out = (n_in if n_in > 0 else 0.0), (n_out if n_out > 0 else 0.0)
    computed = computed_prompt_tokens(row)
    computed = computed if computed > 0 else 0.0
    dense = 2.0 * model.params_per_token()
    prompt_x = 1.0
    if computed > 0:
        prior = n_in - computed
        head = 2.0 * model.vocab_size * model.hidden_size * (1.0 - 1.0 / max(1.0, computed))
        prompt_x += (attention_flops(model, 1, prior + (computed + 1) / 2.0) - head) / dense
    decode_x = 1.0 + attention_flops(model, 1, n_in + n_out / 2.0 + 1) / dense
    return prompt_x, decode_x


def compute_time_share(
    mfu: float,
    prompt_share: float,
    row: Mapping[str, Any],
    mix: StepMix,
    gpu: GpuSpec,
    model: ModelSpec,
    tp: int = 1,
) -> float:
    """Share of the busy time that compute set (see the module docstring), at the achievable
    efficiencies, over the busy share: the FLOP time of the tokens recomputed after
    preemptions; plus, where the steps that carry prompt work are compute-bound (their
    prompt tokens' FLOPs outlast the batch's bytes), the prompt tokens' and the decode
    tokens' of those steps (a compute-bound step lasts all its FLOPs: arrivals per step, qps
    x TPOT, capped at 1); or all of them when a decode step of the observed batch is itself
    compute-bound (past the ridge). A step whose prompt chunk is small (the prefix cache
    served the rest) stays memory-bound, and compute sets none of it."""
    prompt_share = prompt_share if 0 <= prompt_share <= 1 else 0.0
    prompt_x, decode_x = attention_factors(row, model)
    steps = math.fsum(g.share for g in mix.compute_set)
    prompts = math.fsum(g.prompt_tokens for g in mix.compute_set)
    counted = prompt_share * prompt_x * prompts + (1 - prompt_share) * steps * decode_x
    peak = gpu.peak_flops(model.weight_bits) * tp
    recompute = recompute_tokens_per_s(row) * 2.0 * model.params_per_token() / peak
    busy = _f(row, "gpu_util")
    busy = busy if 0 < busy <= 1 else 1.0
    share = (mfu * counted + recompute) / efficiencies(gpu)["compute_eff"] / busy
    return min(1.0, share) if math.isfinite(share) else NAN  # min(1.0, nan) would be 1.0


def compute_steps_rest(mix: StepMix, host_share: float, tpot_s: float) -> float:
    """The rest of the compute-bound steps' time, as a share of the step time: a step that
    compute sets lasts its FLOPs' time plus the host's time of every step (``host_share`` of
    the mean step) and its all-reduces, and all of it is time in steps that compute set (the
    share :func:`compute_time_share` counts holds the FLOPs only). Under a large host overhead
    (tensor parallel over 4-8 GPUs: a quarter of the step) the FLOPs alone read compute-bound
    steps as the host's."""
    if not tpot_s > 0:
        return 0.0
    host = host_share if host_share > 0 else 0.0
    return math.fsum(g.share * (host + g.cost.comm_s / tpot_s) for g in mix.compute_set)


def decode_step_seconds_seen(row: Mapping[str, Any]) -> float:
    """A decode-only step's length as the requests saw it: their median inter-token gap
    (``itl_p50_s``, the median over requests of each one's median gap: a step without prompt
    work while fewer than half of a request's steps carry some), at most TPOT. NaN without it,
    where it is under ``decode_step_gap_min`` of TPOT (tokens delivered in bunches: the gaps
    are not steps), or where ``decode_step_prompt_max`` of the steps or more carry prompt work
    (:func:`prompt_step_share`: the median gap is then a step with prompt work; 16k-token
    prompts on a 70B read a host share of 97% from it)."""
    tpot, gap = step_seconds(row), _f(row, "itl_p50_s")
    if not (tpot > 0 and gap >= _TH.decode_step_gap_min * tpot):  # NaN fails the test
        return NAN
    if prompt_step_share(row) >= _TH.decode_step_prompt_max:
        return NAN
    return min(gap, tpot)


def memory_and_host_shares(
    row: Mapping[str, Any], model: ModelSpec, gpu: GpuSpec, mix: StepMix
) -> tuple[float, float]:
    """(memory time share, host time share) of a step, both over the mean TPOT. The memory
    term counts in the steps it bounds (:class:`StepMix`), at the achievable bandwidth: the
    decode-only steps (unless the observed batch is past the ridge) and the steps carrying
    prompt work whose prompt tokens leave them memory-bound; each over the mean TPOT (a step's
    length). The
    host's share is what the device's time (its longer term, compute or memory, plus the
    all-reduces) leaves of a step: per-step and per-sequence scheduling, launches, sampling,
    whatever the roofline has no term for. It is read from a decode-only step
    (:func:`decode_step_seconds_seen` less the decode step's device time) where the gaps
    give one, since TPOT holds the steps with prompt work only where they fell inside the
    requests' decoding: users whose prompts arrive together have theirs between their
    decodes, and the mean step less those steps' compute read the host's time as a fraction
    of what it was; and never less than what the mean step leaves (TPOT less the mean device
    time): steps stretched past their median gap by stalls (a CPU engine on a shared host)
    are time the roofline has no term for, not the memory term's."""
    tpot = step_seconds(row)
    if not tpot > 0:
        return NAN, NAN
    eff = efficiencies(gpu)
    # (share of the steps, what one of them costs)
    steps = [(1.0 - mix.mixed, mix.decode), *((g.share, g.cost) for g in mix.groups)]
    memory = device = 0.0
    for share, cost in steps:
        compute_s, memory_s = cost.times(gpu, model.weight_bits, **eff)
        memory += share * memory_s if memory_s > compute_s else 0.0
        device += share * (max(compute_s, memory_s) + cost.comm_s)
    # per step over the step time (a request's steps run back to back: TPOT is a step's
    # length, idle time between steps is not in it, so no division by the busy share)
    host = max(0.0, 1.0 - device / tpot)
    decode_step = decode_step_seconds_seen(row)
    if decode_step > 0:
        compute_s, memory_s = mix.decode.times(gpu, model.weight_bits, **eff)
        seen = max(0.0, decode_step - max(compute_s, memory_s) - mix.decode.comm_s) / tpot
        host = max(host, seen)
    return min(1.0, memory / tpot), min(1.0, host)


def step_bound(
    compute_share: float, memory_share: float, host_share: float, host_device: bool = False
) -> str:
    """What sets the steps: ``compute`` when its share reaches ``compute_bound_share``, else
    ``host`` where the host's time outlasts the memory term (neither compute nor memory
    bandwidth is what the steps wait on), else ``memory``. On a ``host_device`` (a CPU: its
    figures are rates the host achieved, :func:`efficiencies`) the memory term must also set
    ``host_memory_share`` of the step: the bandwidth is not named where less than half used."""
    if compute_share >= _TH.compute_bound_share:
        return "compute"
    if host_device and not memory_share >= _TH.host_memory_share:
        return "host"
    return "host" if host_share > memory_share else "memory"


def add_resources(
    rows: Sequence[dict[str, Any]],
    model: ModelSpec | None,
    gpu: GpuSpec | None,
    limits: ServerLimits = ServerLimits(),
    *,
    tp: int = 1,
) -> None:
    """Add :data:`COLUMNS` to every stage row in place."""
    for row in rows:
        row.update(resource_row(row, model, gpu, limits, tp=tp))


def over_peak_warnings(rows: Sequence[Mapping[str, Any]], device: str) -> list[str]:
    """One warning per stage whose MFU or MBU exceeds 100% of ``device``'s figures: the server
    moved more bytes (or FLOPs) than the device's figure allows, so the figure is too low (a
    probe on a busy host, a wrong preset) and the shares priced with it are not to be trusted."""
    out = []
    for row in rows:
        over = [(name, _f(row, name)) for name in ("mfu", "mbu") if _f(row, name) > 1.0]
        if over:
            said = ", ".join(f"{name.upper()} {value:.0%}" for name, value in over)
            out.append(
                f"stage {row.get('stage')}: {said} of {device}'s figures: the server did more "
                "than they allow, so they are too low (a probe on a busy host, a wrong preset) "
                "and this stage's compute, memory and host shares are not to be trusted"
            )
    return out
