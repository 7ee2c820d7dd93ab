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
   budget, ``max_num_seqs`` and free blocks for their first chunk allow. With
   ``decode_steps_per_schedule`` = k > 1 (vLLM V0's multi-step scheduling), a step that only
   decodes opens a schedule of k steps: the k - 1 after it admit nothing (``blocked_by``
   "multi_step"), so a request arriving during them waits for their end.
3. step time = max(FLOPs / (peak x compute efficiency), bytes / (bandwidth x bandwidth
   efficiency)) + the tensor-parallel all-reduces + the fixed per-step overhead + the host
   time per sequence in the step (``step_overhead_per_seq_s``) + the time per tensor-parallel
   GPU beyond the first (``tp_step_overhead_s`` x (tp - 1), in a step that was scheduled: a
   multi-step schedule hands its batch to the workers once) + the prefill path's fixed
   time in a step that computes any prompt tokens (``step_overhead_prefill_s``, 0 unless a
   device profile fits it), with FLOPs,
   bytes and the all-reduce time from :func:`locust_llm.roofline.floors.step_cost` for the actual
   decode contexts and prefill chunks, on one of the ``tp`` GPUs (each holds its shard of the
   weights and of the KV cache).
4. a sequence whose computed context reaches all its known tokens emits one token at the
   step's end; it finishes when it has emitted its target.

Pipeline parallelism (``pp`` > 1): the layers are split into ``pp`` stages (each on ``tp``
GPUs; :func:`~locust_llm.roofline.floors.pp_layers` splits them as vLLM does). A step is then
either the driver handing a scheduled batch to the first stage (its host time; the batch then
takes each stage in turn, its hidden states sent from stage to stage over ``pp_interconnect``)
or, when ``pp`` batches are on their way or nothing more can be scheduled, the wait for the
oldest batch, whose tokens are emitted when its last stage is done: vLLM V1's batch queue. A
sequence with a token on its way is not scheduled again until it comes back, so requests
scheduled together stay together.

Prefix caching (``enable_prefix_caching``, vLLM's default): a request added with its block
hashes (:func:`locust_llm.sim.prefix_cache.block_hashes` over its prompt and the output it will
generate) starts, when admitted, from the longest cached prefix of full blocks (never the whole
prompt: its last token is always computed, as vLLM does), so those tokens cost no prefill; each
full block it computes (prompt or output) is cached for later requests. Cached blocks nobody
uses count as free and are evicted least recently freed first. A request added without hashes
(content nobody described: virtual time's length-only prompts) gets hashes of its own, as vLLM
hashes every request's blocks: nothing else can hit them, but a preempted request readmitted
before they are evicted starts from them instead of recomputing its whole prompt.

The KV pool is preallocated, as vLLM does at start: ``total_blocks`` per GPU from the memory
left after the weight shard and the reserve at ``gpu_memory_utilization``, so the simulated
GPU's memory in use is flat; KV usage is its own signal.

A configuration whose KV cache cannot hold one sequence of ``max_model_len`` tokens is refused
at start, as vLLM refuses it (a block budget given with ``--num-gpu-blocks-override`` is taken
as given, as vLLM takes it). A request whose prompt plus output cannot fit in the whole KV
cache, or in ``max_model_len``, is refused at :meth:`Engine.add` (the HTTP front answers 400).
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from dataclasses import dataclass, field

from locust_llm.errors import InputError
from locust_llm.roofline.floors import (
    GpuSpec,
    ModelSpec,
    StepCost,
    allreduce_seconds,
    fit_advice,
    get_interconnect,
    get_model,
    pp_layers,
    pp_send_seconds,
    shard_of,
    stage_kv_blocks,
    stage_of,
    stage_shards,
    stage_weights_bytes,
    step_cost,
)
from locust_llm.sim.config import SimConfig
from locust_llm.sim.prefix_cache import PrefixCache

#: Prefixes a request's own block keys (16 bytes in all: never equal to a 32-byte SHA-256 hash).
OWN_BLOCK_PREFIX = b"own:"


def own_block_hashes(request_id: int, blocks: int) -> tuple[bytes, ...]:
    """Cache keys for ``blocks`` blocks of content only request ``request_id`` has: unique in
    its engine, so the request can hit them (after a preemption) and nothing else can."""
    head = OWN_BLOCK_PREFIX + request_id.to_bytes(8, "big")
    return tuple(head + i.to_bytes(4, "big") for i in range(blocks))


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
    block_hashes: tuple[bytes, ...] = ()  # chained hashes of its full blocks (prompt + output)
    cache_refs: list[bytes] = field(default_factory=list)  # cached blocks it holds
    cached_tokens: int = 0  # prompt tokens its first admission found in the prefix cache
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
    # the physics of the step (seconds, one GPU): duration = overhead + max(compute, memory)
    # + all-reduce
    compute_s: float = 0.0
    memory_s: float = 0.0
    allreduce_s: float = 0.0
    overhead_s: float = 0.0
    cached_tokens: int = 0  # prompt tokens the step's admissions found in the prefix cache
    running: int = 0  # sequences in the batch after the step's scheduling
    waiting: int = 0  # requests left waiting after the step's admissions
    blocked_by: str = ""  # why waiting requests were not admitted: see ADMISSION_BLOCKERS
    lag_s: float = 0.0  # real time only: how late the step was handed out (the scheduler sets)

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s

    @property
    def bound(self) -> str:
        """Which roofline term set the step's duration: "compute", "memory" or "" (no work)."""
        if self.compute_s == 0 and self.memory_s == 0:
            return ""
        return "compute" if self.compute_s >= self.memory_s else "memory"


@dataclass(slots=True)
class Microbatch:
    """A pipeline-parallel step on its way through the stages (``pp`` > 1)."""

    release_s: float  # when the last stage is done and its tokens reach the engine
    #: (request, tokens computed, whether they complete its known tokens, its preemptions at
    #: launch: a request preempted or ended since gets nothing from this step)
    entries: list[tuple[SimRequest, int, bool, int]]
    #: the last stage's physics (compute, memory, all-reduce seconds): the release line's
    physics: tuple[float, float, float] = (0.0, 0.0, 0.0)


#: Why a step left requests waiting: the KV pool had no blocks for the next one, the batch was
#: at ``max_num_seqs``, the step's token budget was spent, a preemption this step (no
#: admissions then, as vLLM's scheduler does), or the step was one of a multi-step schedule's
#: decode steps (``decode_steps_per_schedule`` > 1: nothing is admitted until they end).
#: "" = nothing was waiting.
ADMISSION_BLOCKERS: tuple[str, ...] = (
    "kv_blocks",
    "max_num_seqs",
    "token_budget",
    "preemption",
    "multi_step",
)


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
    prefix_cache_queries_total: int = 0  # tokens looked up at admissions (vLLM v1 counts so)
    prefix_cache_hits_total: int = 0  # of those, tokens found cached
    step_tokens_total: int = 0  # tokens the steps computed (vLLM's iteration tokens)


class RequestTooLarge(InputError):
    """The request cannot fit alone (context window or whole KV cache)."""


def kv_blocks_for(config: SimConfig, model: ModelSpec, gpu: GpuSpec) -> int:
    """KV blocks per GPU the configuration gets (the override, or the memory left after the
    weight shard and the reserve); InputError when the weights or the override do not fit."""
    tp, pp = config.tp, config.pp
    stages = stage_shards(model, tp, pp)  # each pipeline stage's shard on one GPU, its weights
    held = max(w for _, w in stages)
    block_bytes = config.block_size * max(shard.kv_bytes_per_token for shard, _ in stages)
    util = config.gpu_memory_utilization
    if config.num_gpu_blocks_override is not None:
        blocks = config.num_gpu_blocks_override
        need = held + config.memory_reserve_bytes + blocks * block_bytes
        # --zero-cost steps have no physics: there the override is a bookkeeping budget only
        if math.isfinite(gpu.memory_bytes) and need > gpu.memory_bytes and not config.zero_cost:
            most = int((gpu.memory_bytes - held - config.memory_reserve_bytes) // block_bytes)
            raise InputError(
                f"--num-gpu-blocks-override {blocks}: weights ({held / 1e9:.1f} "
                f"GB per GPU) + reserve + {blocks} blocks of {block_bytes / 2**20:.1f} MiB need "
                f"{need / 1e9:.1f} GB, more than {gpu.name}'s {gpu.memory_bytes / 1e9:.1f} GB; "
                + (f"at most {most} blocks fit" if most >= 1 else "no block fits")
            )
        return blocks
    blocks = stage_kv_blocks(
        model,
        gpu,
        gpu_memory_utilization=util,
        reserve_bytes=config.memory_reserve_bytes,
        tp=tp,
        pp=pp,
        block_size=config.block_size,
    )
    holds = blocks * config.block_size
    if holds >= config.max_model_len:
        return blocks
    # refused: the smallest change that lets one max-length sequence fit
    advice = fit_advice(
        model,
        gpu,
        gpu_memory_utilization=util,
        reserve_bytes=config.memory_reserve_bytes,
        tp=tp,
        kv_tokens=config.max_model_len,
    )
    split = "".join(f" --{k} {v}" for k, v in (("tp", tp), ("pp", pp)) if v > 1)
    if blocks < 1:
        where = f"{gpu.name}" if tp * pp == 1 else f"{tp * pp} x {gpu.name} ({split.strip()})"
        raise InputError(
            f"{model.name} ({model.weights_bytes / 1e9:.1f} GB of weights) leaves no KV cache on "
            f"{where} at --gpu-memory-utilization {util}; {advice}"
        )
    # vLLM checks this at start and refuses to serve
    where = f"{gpu.name}" if tp * pp == 1 else f"each of {tp * pp} x {gpu.name} ({split.strip()})"
    need = -(-config.max_model_len // config.block_size) * block_bytes
    raise InputError(
        f"--max-model-len {config.max_model_len}: one sequence that long needs "
        f"{need / 2**30:.2f} GiB of KV cache on {where}, more than the "
        f"{blocks * block_bytes / 2**30:.2f} GiB left for it at --gpu-memory-utilization "
        f"{util} ({blocks} blocks of {config.block_size} tokens: {holds} tokens); vLLM "
        f"refuses to start so. Lower --max-model-len to {holds} or less"
        + (f"; or the {advice}" if advice else "")
    )


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
        self.gpu = gpu or self.config.device()
        self.tp = self.config.tp
        self.pp = self.config.pp
        self.link = get_interconnect(self.config.interconnect)
        self.stage_link = get_interconnect(self.config.stage_link)
        #: each pipeline stage's layer count, as vLLM splits them (one stage: all of them)
        self.stage_layers = pp_layers(self.model.num_layers, self.pp)
        # one GPU's part of the model: the stage with the most layers (its KV per token)
        self.shard = shard_of(stage_of(self.model, max(self.stage_layers)), self.tp)
        #: weight bytes on each GPU: the heaviest pipeline stage's shard
        self.weights_bytes_per_gpu = stage_weights_bytes(self.model, self.tp, self.pp)
        self.total_blocks = kv_blocks_for(self.config, self.model, self.gpu)
        self.free_blocks = self.total_blocks  # includes evictable cached blocks
        self.block_bytes = self.config.block_size * self.shard.kv_bytes_per_token  # per GPU
        self.prefix_cache = PrefixCache()
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.clock_s = 0.0
        self.stats = EngineStats()
        self._next_id = 0
        #: decode steps left in the current multi-step schedule (no admissions during them)
        self.schedule_steps_left = 0
        #: a multi-step schedule's tokens, finished requests and first tokens, held until the
        #: schedule's last step (vLLM V0 hands a schedule's outputs back at its end)
        self._held: StepResult | None = None
        #: pipeline parallelism: when each stage is next free, and the steps on their way
        self._stage_free = [0.0] * self.pp
        self._in_flight: deque[Microbatch] = deque()

    # ---- memory --------------------------------------------------------------------------
    @property
    def gpu_count(self) -> int:
        """GPUs the engine runs on: ``tp`` x ``pp``."""
        return self.tp * self.pp

    @property
    def memory_used_bytes_per_gpu(self) -> float:
        """What NVML shows on each GPU: weight shard + reserve + the whole preallocated KV pool."""
        return (
            self.weights_bytes_per_gpu
            + self.config.memory_reserve_bytes
            + self.total_blocks * self.block_bytes
        )

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
        block_hashes: tuple[bytes, ...] = (),
    ) -> SimRequest:
        """Queue a request; raises :class:`RequestTooLarge` (counted) when it cannot fit alone.

        ``max_tokens`` (what the client asked for, when larger than the tokens it will get) is
        what the fit check uses, as vLLM checks the requested length, not the one that happens.
        ``block_hashes``: chained hashes of the request's full blocks, over its prompt and, when
        known, the output it will generate (ignored when prefix caching is off; without them the
        request gets :func:`own_block_hashes`, which only it can hit, after a preemption).
        Admission looks up at most the known tokens' blocks; every block whose KV the request
        computes is cached, output blocks included.
        """
        if prompt_tokens < 1 or output_tokens < 1:
            raise InputError(
                f"prompt and output must be >= 1 token, got {prompt_tokens}, {output_tokens}"
            )
        if len(block_hashes) > (prompt_tokens + output_tokens) // self.config.block_size:
            raise InputError(
                f"{len(block_hashes)} block hashes for {prompt_tokens} + {output_tokens} tokens: "
                f"at most one per full block of {self.config.block_size} tokens"
            )
        try:
            self.check_fits(prompt_tokens, max(output_tokens, max_tokens or 0))
        except RequestTooLarge:
            self.stats.rejected_total += 1
            raise
        self._next_id += 1
        if self.config.enable_prefix_caching and not block_hashes:
            blocks = (prompt_tokens + output_tokens) // self.config.block_size
            block_hashes = own_block_hashes(self._next_id, blocks)
        req = SimRequest(
            id=self._next_id,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            arrival_s=self.clock_s if arrival_s is None else arrival_s,
            block_hashes=block_hashes if self.config.enable_prefix_caching else (),
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
        self._drop_orphaned_batches()

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
        """Run one batch starting at ``start_s`` (default: the engine clock) and advance it.

        With ``pp`` > 1 a call either launches a batch into the pipeline (the driver's host
        time; no tokens) or, when the pipeline holds ``pp`` batches or nothing more can be
        scheduled, waits for the oldest one and emits its tokens (:meth:`_pipeline_step`)."""
        if start_s is not None:
            self.clock_s = max(self.clock_s, start_s)
        result = StepResult(start_s=self.clock_s, duration_s=0.0)
        if not self.has_work:
            return result
        if self.pp > 1:
            return self._pipeline_step(result)
        locked = self.schedule_steps_left > 0 and bool(self.running)
        self.schedule_steps_left = self.schedule_steps_left - 1 if locked else 0
        scheduled = self._schedule(result, locked=locked)
        steps = self.config.decode_steps_per_schedule
        if not locked and steps > 1 and scheduled and all(n == 1 for _, n in scheduled):
            self.schedule_steps_left = steps - 1  # a decode schedule: the next steps-1 follow it
        if not scheduled:
            return result
        self._run(scheduled, result, handed_off=not locked)
        if steps > 1:
            self._hold_or_release(result)
        return result

    def _schedule(self, result: StepResult, *, locked: bool) -> list[tuple[SimRequest, int]]:
        """The next batch: the running sequences' tokens, then admissions (none while a
        multi-step schedule is ``locked``); a sequence whose last tokens are still on their way
        through the pipeline has none to compute and is left out."""
        budget = self.config.max_num_batched_tokens
        chunked = self.config.enable_chunked_prefill
        scheduled: list[tuple[SimRequest, int]] = []
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            need = req.known - req.computed
            n = min(need, budget)
            if need == 0 or (n < need and not chunked):
                i += 1
                continue
            if not self._grow(req, n, result):
                break  # req itself was preempted or failed: it was the newest
            scheduled.append((req, n))
            budget -= n
            i += 1
        if result.preempted or result.failed:
            result.blocked_by = "preemption" if self.waiting else ""
        elif locked:
            result.blocked_by = "multi_step" if self.waiting else ""
        else:
            result.blocked_by = self._admit(budget, scheduled, result)
        result.running, result.waiting = len(self.running), len(self.waiting)
        return scheduled

    def _pipeline_step(self, result: StepResult) -> StepResult:
        """One event of a pipeline over ``pp`` stages, as vLLM V1's engine core runs one with
        its batch queue of ``pp`` batches: while fewer than ``pp`` batches are on their way
        and something can be scheduled, schedule it and launch it (the step lasts the driver's
        host time); otherwise block on the oldest batch until its last stage is done and emit
        its tokens (requests that arrive meanwhile wait for that, as in vLLM). A batch that
        came back earlier and has nothing to emit (a prompt's middle chunk, requests ended or
        preempted since) takes no step of its own: the driver goes on at once."""
        while True:
            while len(self._in_flight) < self.pp:
                scheduled = self._schedule(result, locked=False)
                if not scheduled:
                    break
                self._launch(scheduled, result)
                if self.clock_s > result.start_s:
                    return self._pipeline_result(result)
            if not self._in_flight:
                return self._pipeline_result(result)
            self._release(result)
            if self.clock_s > result.start_s or result.emitted:
                return self._pipeline_result(result)
            # passed over: its physics are not this step's (a launch may follow in it)
            result.compute_s = result.memory_s = result.allreduce_s = 0.0

    def _pipeline_result(self, result: StepResult) -> StepResult:
        """A pipeline step's duration and the batch's state after it."""
        result.duration_s = self.clock_s - result.start_s
        result.running, result.waiting = len(self.running), len(self.waiting)
        self._drop_orphaned_batches()
        return result

    def _drop_orphaned_batches(self) -> None:
        """An engine left with no request drops what is still in the pipeline: it belongs to
        nobody (ended, failed or aborted); its stages' time stays booked in ``_stage_free``."""
        if not self.has_work:
            self._in_flight.clear()

    @property
    def batches_in_flight(self) -> int:
        """Batches on their way through the pipeline (0 without pipeline parallelism)."""
        return len(self._in_flight)

    def _launch(self, scheduled: list[tuple[SimRequest, int]], result: StepResult) -> None:
        """Send a batch into the pipeline: the driver's host time on the clock, then each
        stage in turn as it is free (its own layers; the last one's LM head), with the hidden
        states handed from stage to stage. The launch's line carries the host time; the
        batch's physics (its last stage's) go to the line of its release."""
        cfg = self.config
        host = self._host_time(scheduled, handed_off=True)
        costs: dict[tuple[int, bool], tuple[float, StepResult]] = {}
        for k, layers in enumerate(self.stage_layers):
            key = (layers, k == self.pp - 1)
            if key not in costs:
                work = StepResult(start_s=self.clock_s, duration_s=0.0)
                costs[key] = (self._stage_time(scheduled, work, *key), work)
        tokens = sum(n for _, n in scheduled)
        send = 0.0 if cfg.zero_cost else pp_send_seconds(self.model, tokens, self.stage_link)
        end = self.clock_s + host
        first_stage = costs[(self.stage_layers[0], False)]  # pp > 1: not the last
        for k, layers in enumerate(self.stage_layers):
            took = costs[(layers, k == self.pp - 1)][0]
            end = max(self._stage_free[k], end + (send if k else 0.0)) + took
            self._stage_free[k] = end
            if k == 0:
                first_end = end
        last = costs[(self.stage_layers[-1], True)][1]
        result.overhead_s += host
        self.clock_s += host
        busy = host if cfg.zero_cost else first_stage[0]
        self._book(scheduled, result, first_stage[1], busy_s=busy, busy_end_s=first_end)
        entries = []
        for req, n in scheduled:
            self._advance(req, n)
            entries.append((req, n, req.computed >= req.known, req.preemptions))
        physics = (last.compute_s, last.memory_s, last.allreduce_s)
        self._in_flight.append(Microbatch(release_s=end, entries=entries, physics=physics))

    def _stage_time(
        self, scheduled: list[tuple[SimRequest, int]], work: StepResult, layers: int, last: bool
    ) -> float:
        """One pipeline stage's time for the batch (its ``layers``; the LM head, its matmul
        and the logits gather on the ``last`` stage only), its physics into ``work``."""
        if self.config.zero_cost:
            return 0.0
        self._physics(scheduled, work, model=stage_of(self.model, layers), lm_head=last)
        return max(work.compute_s, work.memory_s) + work.allreduce_s

    def _release(self, result: StepResult) -> None:
        """Wait for the oldest batch in the pipeline and emit its tokens at its release."""
        batch = self._in_flight.popleft()
        end = max(self.clock_s, batch.release_s)
        self.clock_s = end
        result.compute_s, result.memory_s, result.allreduce_s = batch.physics
        finished = False
        for req, _, completes, preemptions in batch.entries:
            if completes and not req.done and req.preemptions == preemptions:
                finished |= self._emit(req, end, result)
        if finished:
            self.running = [r for r in self.running if not r.done]

    def _hold_or_release(self, result: StepResult) -> None:
        """Multi-step scheduling: a schedule's tokens reach the client together when it ends.

        vLLM V0 with ``--num-scheduler-steps`` k runs the schedule's k decode steps on the GPU
        and hands their outputs to the engine (and the stream) at the schedule's end, so a
        stream's tokens come in chunks of up to k. The tokens, the requests finished and their
        first-token and finish times of every step but the schedule's last are held and
        released with its last step's, at its end; a step outside a schedule (prompt chunks)
        releases at once."""
        ongoing = self.schedule_steps_left > 0 and bool(self.running)
        held = self._held
        if ongoing:
            if held is None:
                self._held = held = StepResult(start_s=result.start_s, duration_s=0.0)
            held.emitted += result.emitted
            held.finished += result.finished
            result.emitted, result.finished = [], []
            return
        if held is None:
            return
        self._held = None
        end = result.end_s
        for req in held.emitted:
            if req.first_token_s >= held.start_s:  # its first token came inside the schedule
                req.first_token_s = end
        for req in held.finished:
            req.finished_s = end
        live = [r for r in held.emitted if r.outcome != "aborted"]
        result.emitted = live + result.emitted
        result.finished = held.finished + result.finished

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.config.block_size)

    def _take(self, blocks: int) -> None:
        """Use ``blocks`` free blocks (<= free_blocks), evicting cached ones when short."""
        empty = self.free_blocks - len(self.prefix_cache.evictable)
        if blocks > empty:
            self.prefix_cache.evict(blocks - empty)
        self.free_blocks -= blocks

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
        self._take(extra)
        req.blocks += extra
        return True

    def _admit(
        self, budget: int, scheduled: list[tuple[SimRequest, int]], result: StepResult
    ) -> str:
        """Admit waiting requests in order; returns what stopped admission ("" = none left)."""
        chunked = self.config.enable_chunked_prefill
        bs = self.config.block_size
        cache = self.prefix_cache
        while self.waiting:
            if len(self.running) >= self.config.max_num_seqs:
                return "max_num_seqs"
            if budget <= 0:
                return "token_budget"
            req = self.waiting[0]
            hits: list[bytes] = []
            from_free = 0
            if req.block_hashes and req.computed == 0:
                # never the whole prompt: its last token is computed to produce the first one
                hits, from_free = cache.hits(req.block_hashes, (req.known - 1) // bs)
            start = len(hits) * bs if hits else req.computed
            need = req.known - start
            n = min(need, budget)
            if n < need and not chunked:
                return "token_budget"
            extra = self._blocks_for(start + n) - max(req.blocks, len(hits))
            if from_free + extra > self.free_blocks:
                return "kv_blocks"
            self.waiting.popleft()
            if req.block_hashes and req.computed == 0:
                self.stats.prefix_cache_queries_total += req.known
                self.stats.prefix_cache_hits_total += start
                result.cached_tokens += start
                if math.isnan(req.admitted_s):
                    req.cached_tokens = start
            if hits:
                cache.acquire(hits)
                self.free_blocks -= from_free
                req.cache_refs = list(hits)
                req.blocks = len(hits)
                req.computed = start
            self._take(extra)
            req.blocks += extra
            if math.isnan(req.admitted_s):
                req.admitted_s = self.clock_s
            self.running.append(req)
            result.admitted.append(req)
            scheduled.append((req, n))
            budget -= n
        return ""

    def _run(
        self, scheduled: list[tuple[SimRequest, int]], result: StepResult, *, handed_off: bool
    ) -> None:
        """Time the step and advance the clock; ``handed_off``: the step was scheduled and
        handed to the tensor-parallel workers (False for the steps a multi-step schedule runs
        after its first, which the workers run from the batch they already hold)."""
        overhead = self._host_time(scheduled, handed_off=handed_off)
        result.overhead_s = overhead
        duration = overhead
        if not self.config.zero_cost:
            self._physics(scheduled, result, model=self.model)
            duration = overhead + max(result.compute_s, result.memory_s) + result.allreduce_s
        result.duration_s = duration
        self.clock_s += duration
        end = self.clock_s
        self._book(scheduled, result, result, busy_s=duration, busy_end_s=end)
        finished = False
        for req, n in scheduled:
            self._advance(req, n)
            if req.computed >= req.known:
                finished |= self._emit(req, end, result)
        if finished:
            self.running = [r for r in self.running if not r.done]

    def _host_time(self, scheduled: list[tuple[SimRequest, int]], *, handed_off: bool) -> float:
        """The host's time for a step: the fixed per-step time, the time per sequence, one
        hand-off per GPU beyond the first when the step was ``handed_off`` to the workers, and
        the prefill path's fixed time in a step with prompt tokens."""
        cfg = self.config
        if cfg.zero_cost:  # a step costs exactly the fixed overhead (it benchmarks the front)
            return cfg.step_overhead_s
        overhead = cfg.step_overhead_s + cfg.step_overhead_per_seq_s * len(scheduled)
        if handed_off:
            overhead += cfg.tp_step_overhead_s * (self.gpu_count - 1)
        if any(n > 1 for _, n in scheduled):  # the step computes prompt tokens
            overhead += cfg.step_overhead_prefill_s
        return overhead

    def _physics(
        self,
        scheduled: list[tuple[SimRequest, int]],
        result: StepResult,
        *,
        model: ModelSpec,
        lm_head: bool = True,
    ) -> None:
        """The GPU's work for the step on ``model`` (the whole model, or a pipeline stage's
        layers; without the LM head's weights, matmul and logits gather for a stage before the
        last): the roofline's compute and memory times and the tensor-parallel communication,
        into the result's physics fields."""
        cfg = self.config
        decode = [req.computed for req, n in scheduled if n == 1]
        chunks = [(n, req.computed) for req, n in scheduled if n > 1]
        cost = step_cost(model, decode, chunks, tp=self.tp, link=self.link)
        if not lm_head:
            shard = shard_of(model, self.tp)
            head = shard.vocab_size * shard.hidden_size
            tokens = sum(n for _, n in scheduled)
            cost = StepCost(
                flops=cost.flops - 2.0 * head * len(scheduled),
                bytes=cost.bytes - head * shard.weight_bytes_per_param,
                comm_s=allreduce_seconds(model, tokens, self.tp, self.link),
            )
        result.flops, result.bytes = cost.flops, cost.bytes
        result.compute_s, result.memory_s = cost.times(
            self.gpu,
            self.model.weight_bits,
            compute_eff=cfg.compute_efficiency,
            bw_eff=cfg.bandwidth_efficiency,
        )
        result.allreduce_s = cost.comm_s

    def _book(
        self,
        scheduled: list[tuple[SimRequest, int]],
        result: StepResult,
        work: StepResult,
        *,
        busy_s: float,
        busy_end_s: float,
    ) -> None:
        """Count the step in the engine's totals (one GPU's busy time and the bytes and FLOPs
        of its ``work``) and its tokens in ``result``."""
        stats = self.stats
        stats.steps_total += 1
        stats.busy_s_total += busy_s
        stats.bytes_total += work.bytes
        stats.last_step_end_s, stats.last_step_duration_s = busy_end_s, busy_s
        stats.last_step_bytes = work.bytes
        stats.flops_total += work.flops
        stats.step_tokens_total += sum(n for _, n in scheduled)
        for _, n in scheduled:
            if n == 1:
                result.decode_seqs += 1
            else:
                result.prefill_tokens += n

    def _advance(self, req: SimRequest, n: int) -> None:
        """``n`` more tokens of ``req`` computed; the blocks it completed are cached."""
        bs = self.config.block_size
        before = req.computed
        req.computed += n
        if req.block_hashes and req.computed // bs > before // bs:  # a block completed
            self._register(req, before // bs, min(req.computed // bs, len(req.block_hashes)))

    def _emit(self, req: SimRequest, end: float, result: StepResult) -> bool:
        """``req`` computed all its known tokens: it emits one at ``end``; True if that was
        its last (it finished and its blocks are freed)."""
        stats = self.stats
        if req.generated == 0:
            stats.prompt_tokens_total += req.prompt_tokens
            req.first_token_s = end
        req.generated += 1
        stats.generation_tokens_total += 1
        result.emitted.append(req)
        if req.generated < req.output_tokens:
            return False
        req.outcome = "ok"
        req.finished_s = end
        self._free(req)
        stats.finished_total += 1
        result.finished.append(req)
        return True

    def _register(self, req: SimRequest, first: int, end: int) -> None:
        """Cache the prompt blocks ``first..end-1`` that ``req`` just completed."""
        if first >= end:
            return
        held = set(req.cache_refs)
        for i in range(first, end):
            h = req.block_hashes[i]
            if h not in held and self.prefix_cache.register(h):
                req.cache_refs.append(h)  # the block it computed is now the cached copy

    def _free(self, req: SimRequest) -> None:
        private = req.blocks - len(req.cache_refs)
        self.free_blocks += private + self.prefix_cache.release(req.cache_refs)
        req.cache_refs = []
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
