"""The simulated serving engine: continuous batching over paged KV blocks, timed by the roofline.

Pure and steppable: :meth:`Engine.step` runs one batch and returns what happened and how long it
took on the simulated GPU; it never sleeps or touches a socket. The real-time scheduler calls
it on absolute deadlines, tests and the sweep benchmark call it in a loop on virtual time.

One step, the way vLLM's scheduler does it:

1. running sequences, oldest admission first, each get the tokens they still need computed: one
   for a decoding sequence, a chunk of the prompt for a prefilling one (chunked prefill), all
   within ``max_num_batched_tokens``. KV blocks (``block_size`` tokens) are allocated as a
   sequence's computed context grows. When none is free, the most recently admitted sequence is
   preempted: its blocks are freed and it goes back to the front of the queue, to recompute its
   prompt and the tokens already generated (recompute preemption). In ``oom`` mode it fails
   with a CUDA out-of-memory error instead.
2. if nothing was preempted, waiting requests are admitted in arrival order while the token
   budget, ``max_num_seqs`` and free blocks for their first chunk allow.
3. step time = max(FLOPs / (peak x compute efficiency), bytes / (bandwidth x bandwidth
   efficiency)) + the fixed per-step overhead, with FLOPs and bytes from
   :func:`locust_llm.roofline.step_cost` for the actual decode contexts and prefill chunks.
4. a sequence whose computed context reaches all its known tokens emits one token at the
   step's end; it finishes when it has emitted its target.

A request whose prompt plus output cannot fit in the whole KV cache, or in ``max_model_len``,
is refused at :meth:`Engine.add` (the HTTP front answers 400).
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from dataclasses import dataclass, field

from locust_llm.errors import InputError
from locust_llm.roofline import GpuSpec, ModelSpec, get_gpu, get_model, step_cost
from locust_llm.sim.config import SimConfig


@dataclass(eq=False, slots=True)
class SimRequest:
    """One request inside the engine. Times are on the engine's clock (seconds)."""

    id: int
    prompt_tokens: int
    output_tokens: int  # tokens it will emit before finishing
    arrival_s: float = 0.0
    computed: int = 0  # tokens whose KV exists
    generated: int = 0  # tokens emitted so far
    blocks: int = 0  # KV blocks held
    preemptions: int = 0
    admitted_s: float = math.nan  # first admission
    first_token_s: float = math.nan
    finished_s: float = math.nan
    outcome: str = ""  # "" while live; "ok", "oom", "aborted"
    stream: object = None  # the front's handle (the engine never looks at it)

    @property
    def known(self) -> int:
        """Tokens of context the next token depends on: prompt + emitted."""
        return self.prompt_tokens + self.generated

    @property
    def done(self) -> bool:
        return bool(self.outcome)


@dataclass(slots=True)
class StepResult:
    """What one step did. ``duration_s`` is simulated GPU time including the overhead."""

    start_s: float
    duration_s: float
    flops: float = 0.0
    bytes: float = 0.0
    emitted: list[SimRequest] = field(default_factory=list)  # one token each, in order
    finished: list[SimRequest] = field(default_factory=list)
    preempted: list[SimRequest] = field(default_factory=list)
    failed: list[SimRequest] = field(default_factory=list)  # outcome says why
    admitted: list[SimRequest] = field(default_factory=list)
    decode_seqs: int = 0
    prefill_tokens: int = 0

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


@dataclass(slots=True)
class EngineStats:
    """Cumulative counters (the ``/metrics`` and simulated-GPU sources read these)."""

    steps_total: int = 0
    busy_s_total: float = 0.0
    bytes_total: float = 0.0
    flops_total: float = 0.0
    preemptions_total: int = 0
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    finished_total: int = 0
    # the latest step, so a reader in real time can leave out the part not yet elapsed
    last_step_end_s: float = 0.0
    last_step_duration_s: float = 0.0
    last_step_bytes: float = 0.0
    failed_total: int = 0
    rejected_total: int = 0


class RequestTooLarge(InputError):
    """The request cannot fit alone (context window or whole KV cache)."""


def kv_blocks_for(config: SimConfig, model: ModelSpec, gpu: GpuSpec) -> int:
    """KV blocks the configuration gets (the override, or the memory left after weights)."""
    if config.num_gpu_blocks_override is not None:
        return config.num_gpu_blocks_override
    budget = (
        gpu.memory_bytes * config.gpu_memory_utilization
        - model.weights_bytes
        - config.memory_reserve_bytes
    )
    blocks = int(budget // (config.block_size * model.kv_bytes_per_token)) if budget > 0 else 0
    if blocks < 1:
        raise InputError(
            f"{model.name} ({model.weights_bytes / 1e9:.1f} GB of weights) leaves no KV cache on "
            f"{gpu.name} at --gpu-memory-utilization {config.gpu_memory_utilization}; raise it, "
            "quantize, or set --num-gpu-blocks-override"
        )
    return blocks


class Engine:
    """A continuous-batching engine over ``model`` on ``gpu``; see the module docstring."""

    def __init__(
        self,
        config: SimConfig,
        *,
        model: ModelSpec | None = None,
        gpu: GpuSpec | None = None,
    ) -> None:
        self.config = config.validated()
        self.model = model or get_model(config.model)
        self.gpu = gpu or get_gpu(config.gpu)
        self.total_blocks = kv_blocks_for(self.config, self.model, self.gpu)
        self.free_blocks = self.total_blocks
        self.block_bytes = self.config.block_size * self.model.kv_bytes_per_token
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.clock_s = 0.0
        self.stats = EngineStats()
        self._next_id = 0

    # ---- requests ------------------------------------------------------------------------
    @property
    def capacity_tokens(self) -> int:
        """Tokens the whole KV cache holds."""
        return self.total_blocks * self.config.block_size

    def check_fits(self, prompt_tokens: int, output_tokens: int) -> None:
        """Raise :class:`RequestTooLarge` when the request cannot run even alone."""
        total = prompt_tokens + output_tokens
        if total > self.config.max_model_len:
            raise RequestTooLarge(
                f"This model's maximum context length is {self.config.max_model_len} tokens. "
                f"However, you requested {total} tokens ({prompt_tokens} in the messages, "
                f"{output_tokens} in the completion). Please reduce the length of the messages "
                "or completion."
            )
        if self._blocks_for(total - 1) > self.total_blocks:
            raise RequestTooLarge(
                f"The request needs {total} tokens of KV cache ({prompt_tokens} prompt + "
                f"{output_tokens} completion) but the whole cache holds "
                f"{self.capacity_tokens} tokens. Please reduce the length of the messages or "
                "completion."
            )

    def add(
        self,
        prompt_tokens: int,
        output_tokens: int,
        *,
        arrival_s: float | None = None,
        max_tokens: int | None = None,
    ) -> SimRequest:
        """Queue a request; raises :class:`RequestTooLarge` (counted) when it cannot fit alone.

        ``max_tokens`` (what the client asked for, when larger than the tokens it will get) is
        what the fit check uses, as vLLM checks the requested length, not the one that happens.
        """
        if prompt_tokens < 1 or output_tokens < 1:
            raise InputError(
                f"prompt and output must be >= 1 token, got {prompt_tokens}, {output_tokens}"
            )
        try:
            self.check_fits(prompt_tokens, max(output_tokens, max_tokens or 0))
        except RequestTooLarge:
            self.stats.rejected_total += 1
            raise
        self._next_id += 1
        req = SimRequest(
            id=self._next_id,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            arrival_s=self.clock_s if arrival_s is None else arrival_s,
        )
        self.waiting.append(req)
        return req

    def abort(self, req: SimRequest) -> None:
        """Drop a live request (client went away): its blocks are freed at once."""
        if req.done:
            return
        if req in self.running:
            self.running.remove(req)
        else:
            with contextlib.suppress(ValueError):
                self.waiting.remove(req)
        self._free(req)
        req.outcome = "aborted"
        req.finished_s = self.clock_s

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def used_blocks(self) -> int:
        return self.total_blocks - self.free_blocks

    @property
    def kv_usage_ratio(self) -> float:
        return self.used_blocks / self.total_blocks

    @property
    def kv_used_bytes(self) -> float:
        return self.used_blocks * self.block_bytes

    # ---- the step ------------------------------------------------------------------------
    def step(self, start_s: float | None = None) -> StepResult:
        """Run one batch starting at ``start_s`` (default: the engine clock) and advance it."""
        if start_s is not None:
            self.clock_s = max(self.clock_s, start_s)
        result = StepResult(start_s=self.clock_s, duration_s=0.0)
        if not self.has_work:
            return result
        budget = self.config.max_num_batched_tokens
        chunked = self.config.enable_chunked_prefill
        scheduled: list[tuple[SimRequest, int]] = []
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            need = req.known - req.computed
            n = min(need, budget)
            if n < need and not chunked:
                i += 1
                continue
            if not self._grow(req, n, result):
                break  # req itself was preempted or failed: it was the newest
            scheduled.append((req, n))
            budget -= n
            i += 1
        if not result.preempted and not result.failed:
            self._admit(budget, scheduled, result)
        if not scheduled:
            return result
        self._run(scheduled, result)
        return result

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.config.block_size)

    def _grow(self, req: SimRequest, n: int, result: StepResult) -> bool:
        """Make room for ``n`` more tokens of ``req``; evict the newest while short."""
        extra = self._blocks_for(req.computed + n) - req.blocks
        while extra > self.free_blocks:
            victim = self.running.pop()
            self._free(victim)
            if self.config.oom:
                victim.outcome = "oom"
                victim.finished_s = self.clock_s
                self.stats.failed_total += 1
                result.failed.append(victim)
            else:
                victim.computed = 0
                victim.preemptions += 1
                self.stats.preemptions_total += 1
                self.waiting.appendleft(victim)
                result.preempted.append(victim)
            if victim is req:
                return False
        self.free_blocks -= extra
        req.blocks += extra
        return True

    def _admit(
        self, budget: int, scheduled: list[tuple[SimRequest, int]], result: StepResult
    ) -> None:
        chunked = self.config.enable_chunked_prefill
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            req = self.waiting[0]
            need = req.known - req.computed
            n = min(need, budget)
            if n < need and not chunked:
                break
            extra = self._blocks_for(req.computed + n) - req.blocks
            if extra > self.free_blocks:
                break
            self.waiting.popleft()
            self.free_blocks -= extra
            req.blocks += extra
            if math.isnan(req.admitted_s):
                req.admitted_s = self.clock_s
            self.running.append(req)
            result.admitted.append(req)
            scheduled.append((req, n))
            budget -= n

    def _run(self, scheduled: list[tuple[SimRequest, int]], result: StepResult) -> None:
        cfg = self.config
        if cfg.zero_cost:
            duration = cfg.step_overhead_s
        else:
            decode = [req.computed for req, n in scheduled if n == 1]
            chunks = [(n, req.computed) for req, n in scheduled if n > 1]
            cost = step_cost(self.model, decode, chunks)
            result.flops, result.bytes = cost.flops, cost.bytes
            duration = cfg.step_overhead_s + cost.seconds(
                self.gpu,
                self.model.weight_bits,
                compute_eff=cfg.compute_efficiency,
                bw_eff=cfg.bandwidth_efficiency,
            )
        result.duration_s = duration
        self.clock_s += duration
        end = self.clock_s
        stats = self.stats
        stats.steps_total += 1
        stats.busy_s_total += duration
        stats.bytes_total += result.bytes
        stats.last_step_end_s, stats.last_step_duration_s = end, duration
        stats.last_step_bytes = result.bytes
        stats.flops_total += result.flops
        finished = False
        for req, n in scheduled:
            if n == 1:
                result.decode_seqs += 1
            else:
                result.prefill_tokens += n
            req.computed += n
            if req.computed < req.known:
                continue  # more prefill to do
            if req.generated == 0:
                stats.prompt_tokens_total += req.prompt_tokens
                req.first_token_s = end
            req.generated += 1
            stats.generation_tokens_total += 1
            result.emitted.append(req)
            if req.generated >= req.output_tokens:
                req.outcome = "ok"
                req.finished_s = end
                self._free(req)
                stats.finished_total += 1
                result.finished.append(req)
                finished = True
        if finished:
            self.running = [r for r in self.running if not r.done]

    def _free(self, req: SimRequest) -> None:
        self.free_blocks += req.blocks
        req.blocks = 0

    # ---- helpers for tests and the virtual-time sweep ------------------------------------
    def run_until_idle(self, max_steps: int = 1_000_000) -> list[StepResult]:
        """Step until nothing is running or waiting; bounded by ``max_steps``."""
        results = []
        for _ in range(max_steps):
            if not self.has_work:
                break
            results.append(self.step())
        else:
            raise RuntimeError(f"engine still busy after {max_steps} steps")
        return results
