"""A device profile: the simulator's step constants fitted to a real engine's measured steps.

The simulator prices a step as ``step_overhead_s + step_overhead_per_seq_s x sequences +
step_overhead_prefill_s (where it computes prompt tokens) + max(FLOPs / FLOP/s, bytes /
bandwidth)``
(:mod:`locust_llm.sim.engine`). For an engine on a device with no preset (vLLM's CPU build on
this host, a GPU the presets lack) the unknowns that matter are fitted to step times measured on
the engine itself:

* the mean step of a stage of short prompts: the engine's mean inter-token latency (vLLM's
  ``inter_token_latency_seconds``, each step counted once per sequence it decoded) at the
  stage's mean running batch, with the prompt tokens the stage computed spread over its steps
  (vLLM's ``iteration_tokens_total`` counts them);
* prefill steps: the engine's mean prefill time of one request alone (vLLM's
  ``request_prefill_time_seconds`` at one user: one step holding the whole prompt).

Each step's FLOPs and bytes come from the simulator's own cost model of the model (so the fit
and the replay agree on what a step does). The fit solves ``seconds = O + s x sequences +
P x prefill share + max(FLOPs / F, bytes / B)`` for (O, s, P, F, B) by least squares, the
max by alternation (each step bound by the term the last solution makes larger, until none
changes), no coefficient below 0. P is the fixed cost of a step that computes prompt tokens
(the prefill share: 1 for such a step, the share of such steps for a mean step): vLLM's CPU
build can take a prompt's step longer than its tokens' compute extrapolated to zero tokens,
beyond any decode step, which no other term holds, and prompts admitted two to four at a time
took about as long as one alone (docs/servers.md has the figures), hence a cost per step, not
per prompt. To tell the terms apart, the samples
need compute-bound steps of two sizes (prompts of two lengths alone) beside the memory-bound
decode steps, and, for the fixed overhead apart from both P and the bandwidth, a memory-bound
step that carries a prompt chunk or decode steps of different sizes in bytes. Where they cannot
tell two terms apart (a tiny model on a CPU: every decode step reads the same weights, every
prompt step is compute-bound) the least-squares solution of least norm splits the time between
them; the steps the samples hold are priced the same by either split.

:func:`profile_settings` turns a fit and the engine's limits into :class:`SimConfig` settings
(``locust-llm sim --config FILE`` reads them as TOML: :func:`to_toml`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from locust_llm.errors import InputError
from locust_llm.roofline.floors import ModelSpec, step_cost

#: The bandwidth of a profile whose fit found no memory-bound step: a decode step's bytes at
#: this rate take nanoseconds.
NO_MEMORY_TERM = "1000TB/s"
#: A memory size for a profiled device: holds any model the profile is for; the engine's KV
#: pool comes from its own block count (``num_gpu_blocks_override``), not from this.
PROFILE_MEMORY = "1024GiB"


@dataclass(frozen=True)
class StepSample:
    """A measured step, or the mean step of a stretch of steps: ``seconds`` it took; sequences
    decoding in it (their mean context); prompt tokens computed in it, taken in chunks of
    ``prompt_chunk`` tokens (default: all at once) by ``prefill_seqs`` sequences (default: one
    where it computes any prompt). Fractional counts are means over steps."""

    seconds: float
    decode_seqs: float = 0.0
    decode_context: float = 0.0
    prompt_tokens: float = 0.0
    prompt_chunk: float = 0.0
    prefill_seqs: float | None = None

    @property
    def prefill_share(self) -> float:
        """The share of the step(s) that compute prompt tokens: 1 for one step that does; for a
        mean step, ``prefill_seqs`` (at most 1), as if each prompt chunk had a step of its own
        (an upper bound where chunks share steps)."""
        if self.prompt_tokens <= 0:
            return 0.0
        return 1.0 if self.prefill_seqs is None else min(self.prefill_seqs, 1.0)

    @property
    def sequences(self) -> float:
        if self.prefill_seqs is not None:
            return self.decode_seqs + self.prefill_seqs
        return self.decode_seqs + (1.0 if self.prompt_tokens > 0 else 0.0)

    def flops(self, model: ModelSpec) -> float:
        """The step's FLOPs by the simulator's cost model: the decoding sequences' (a fraction
        of a sequence interpolated) plus the prompt tokens' at the cost per token of one chunk
        of ``prompt_chunk`` tokens from an empty context."""
        return self._cost(model)[0]

    def bytes(self, model: ModelSpec) -> float:
        """The bytes the step moves by the simulator's cost model (the weights once, the KV
        cache the decoding sequences read and the prompt tokens write)."""
        return self._cost(model)[1]

    def _cost(self, model: ModelSpec) -> tuple[float, float]:
        whole = math.floor(self.decode_seqs)
        context = round(self.decode_context)
        chunk = max(round(self.prompt_chunk or self.prompt_tokens), 1)
        chunks = [(chunk, 0)] if self.prompt_tokens > 0 else []
        base = step_cost(model, [context] * whole, chunks)
        flops, moved = base.flops, base.bytes
        part = self.decode_seqs - whole
        if part > 0:  # a fraction of one more decoding sequence
            more = step_cost(model, [context] * (whole + 1), chunks)
            flops += part * (more.flops - base.flops)
            moved += part * (more.bytes - base.bytes)
        if chunks:  # the prompt tokens per step, at the chunk's cost per token
            alone = step_cost(model, [context] * whole)
            scale = self.prompt_tokens / chunk
            flops += (scale - 1) * (base.flops - alone.flops)
            moved += (scale - 1) * (base.bytes - alone.bytes)
        return flops, moved


@dataclass(frozen=True)
class StepFit:
    """Fitted step constants, with each sample's fitted and measured seconds and the term that
    bound it (``compute`` or ``memory``)."""

    overhead_s: float
    per_seq_s: float
    prefill_s: float  # P: the fixed cost of a step that computes prompt tokens
    flops_per_s: float  # inf: no step was compute-bound
    bytes_per_s: float  # inf: no step was memory-bound
    samples: tuple[StepSample, ...]
    fitted_s: tuple[float, ...]
    bound: tuple[str, ...]

    def worst_error(self) -> float:
        """The largest |fitted - measured| / measured over the samples."""
        return max(
            abs(f - s.seconds) / s.seconds for f, s in zip(self.fitted_s, self.samples, strict=True)
        )


#: Rounds of "solve, then let each step's larger term bind" before the fit gives up changing.
FIT_ROUNDS = 20


def fit_steps(model: ModelSpec, samples: Sequence[StepSample]) -> StepFit:
    """Least squares of the simulator's step time ``O + s x sequences + P x prefill share +
    max(FLOPs / F, bytes / B)`` over ``samples`` (at least four), each step's error taken
    relative to its own measured time (a 26 ms decode step and a 3.9 s prefill step weigh
    alike: in seconds the long prefills of a slow CPU engine set every term, and a twin fitted
    that way decoded at half the engine's step time), no coefficient below 0; where
    the samples leave terms undetermined, the solution of least norm (see the module's
    docstring).

    The max is fitted by alternation: each step starts bound by compute when it computes more
    prompt tokens than it decodes sequences, else by memory; the linear terms are solved; each
    step is then bound by whichever of its two terms the solution makes larger; until no step
    changes. Of the solutions the rounds found, the one whose steps priced with the max (as the
    simulator prices them) are nearest the measured ones is kept: where the samples leave terms
    undetermined, the rounds can alternate between two patterns without settling. A term no
    step is bound by is absent (its rate infinite)."""
    if len(samples) < 4:
        raise InputError(f"a step fit needs at least 4 measured steps, got {len(samples)}")
    if any(not (s.seconds > 0 and math.isfinite(s.seconds)) for s in samples):
        raise InputError("every measured step needs seconds > 0")
    costs = np.array([[s.flops(model), s.bytes(model)] for s in samples])
    seconds = np.array([s.seconds for s in samples])
    base = np.array([[1.0, s.sequences, s.prefill_share] for s in samples])

    def priced(coef: np.ndarray) -> np.ndarray:
        return base @ coef[:3] + np.maximum(costs[:, 0] * coef[3], costs[:, 1] * coef[4])

    weight = 1.0 / seconds  # each row in shares of its own step's time

    compute = np.array([s.prompt_tokens > s.decode_seqs for s in samples])
    best = np.zeros(5)  # O, s, P, 1/F, 1/B
    best_error = math.inf
    for _ in range(FIT_ROUNDS):
        columns = np.column_stack(
            [base, np.where(compute, costs[:, 0], 0.0), np.where(compute, 0.0, costs[:, 1])]
        )
        coef = _nonnegative_lstsq(columns * weight[:, None], seconds * weight)
        error = float(np.sum(((priced(coef) - seconds) * weight) ** 2))
        if error < best_error:
            best, best_error = coef, error
        bound_by_compute = costs[:, 0] * coef[3] >= costs[:, 1] * coef[4]
        if (bound_by_compute == compute).all():
            break
        compute = bound_by_compute
    return StepFit(
        overhead_s=float(best[0]),
        per_seq_s=float(best[1]),
        prefill_s=float(best[2]),
        flops_per_s=1.0 / best[3] if best[3] > 0 else math.inf,
        bytes_per_s=1.0 / best[4] if best[4] > 0 else math.inf,
        samples=tuple(samples),
        fitted_s=tuple(float(x) for x in priced(best)),
        bound=tuple(
            "compute" if c else "memory" for c in costs[:, 0] * best[3] >= costs[:, 1] * best[4]
        ),
    )


def _nonnegative_lstsq(columns: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0: the most negative term is dropped and the
    rest solved again (columns are scaled to one size first: FLOPs are ~1e12 beside 1)."""
    scale = np.abs(columns).max(axis=0)
    scale[scale == 0] = 1.0
    keep = [i for i in range(columns.shape[1]) if np.abs(columns[:, i]).max() > 0]
    coef = np.zeros(columns.shape[1])
    while keep:
        solved, *_ = np.linalg.lstsq(columns[:, keep] / scale[keep], target, rcond=None)
        if (solved >= 0).all():
            coef[keep] = solved / scale[keep]
            return coef
        keep.pop(int(np.argmin(solved)))
    return coef


def profile_settings(
    fit: StepFit, model_path: str, limits: Mapping[str, Any], *, api_server_s: float = 0.0
) -> dict[str, Any]:
    """:class:`SimConfig` settings for a twin of the profiled engine: the model, the fitted
    device and step constants, the engine's front-end time per request, and its ``limits``
    (``max_num_seqs``, ``num_gpu_blocks_override``, ``block_size``, ... as the engine runs)."""
    flops = fit.flops_per_s if math.isfinite(fit.flops_per_s) else 1e18
    bandwidth = (
        f"{fit.bytes_per_s / 1e9:.6g}GB/s" if math.isfinite(fit.bytes_per_s) else NO_MEMORY_TERM
    )
    return {
        "model": model_path,
        "bandwidth": bandwidth,
        "flops": f"{flops / 1e9:.6g}GFLOPS",
        "memory": PROFILE_MEMORY,
        "bandwidth_efficiency": 1.0,
        "compute_efficiency": 1.0,
        "engine": "vllm-v1",
        "step_overhead_s": fit.overhead_s,
        "step_overhead_per_seq_s": fit.per_seq_s,
        "step_overhead_prefill_s": fit.prefill_s,
        "api_server_s": max(api_server_s, 0.0),
        "tokenize_s_per_token": 0.0,
        "detokenize_s_per_token": 0.0,
        **limits,
    }


def to_toml(settings: Mapping[str, Any]) -> str:
    """``settings`` as a flat TOML table (strings, numbers and booleans)."""
    lines = []
    for key, value in settings.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int | float):
            text = repr(float(value)) if isinstance(value, float) else str(value)
        elif isinstance(value, str):
            text = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        else:
            raise InputError(f"{key}: a profile setting must be a string, number or boolean")
        lines.append(f"{key} = {text}")
    return "\n".join(lines) + "\n"
