"""Virtual time: a whole load test driven straight into the engine, with no HTTP and no sleeping.

:func:`simulate` plays a workload (closed-loop concurrency stages, or open-loop rate stages
with Poisson or gamma arrivals) against :class:`~locust_llm.sim.engine.Engine` on the engine's
own clock, and :func:`write_run_dir` writes the run dir a real run writes (``requests.parquet``,
``telemetry.parquet``, ``run.json``), so ``locust-llm report DIR`` reads it unchanged.

What it mirrors, and from where:

- lengths: prompt tokens from ``--llm-input-len`` and max tokens from ``--llm-max-tokens``
  (:mod:`locust_llm.workloads.distributions`, as the client draws them), or a dataset's (prompt,
  max_tokens) pairs replayed in order (``lengths``); the output the server gives is
  the simulator's rule: ``max_tokens`` with ``ignore_eos``, else the smaller of the drawn
  EOS length (``SimConfig.output_len``) and ``max_tokens``;
- a request is sent at its arrival instant, reaches the engine after the engine profile's API
  server and tokenization time (``SimConfig.front_s``) and joins the engine's next step after
  that; every emitted token is a chunk at the end of the step that produced it plus the
  profile's detokenization time (``tokens_per_chunk`` groups them), and the
  record is summarised by :func:`locust_llm.metrics.summarize_stream`, as the client does it;
- closed loop: each user sends its next request ``turnaround_s`` (1 ms) after its previous
  one ends (no wait time; the millisecond is the client's and the HTTP front's, and it is why
  a new request waits for the step already under way); a stage ends when ``requests`` of its
  own requests have completed, or after ``duration_s`` (``max_sends`` caps what a stage sends,
  as ``vllm bench serve --num-prompts`` does); a stage with fewer users than the previous one
  lets the extra users finish their current request and send no more. After the last stage,
  requests in flight may finish for ``stop_timeout_s`` (the demo's ``--stop-timeout``); any
  still running are ``cancelled``;
- open loop: arrivals of a stage are a renewal process of rate ``rate`` whose gaps are gamma
  distributed with shape ``burstiness`` (the client's ``--llm-burstiness``: 1 = Poisson, lower
  is burstier, the gaps' coefficient of variation is 1 / sqrt(shape)), the first at the
  stage's start (as the client sends it), each request sent on time (dispatch delay 0);
- telemetry every ``scrape_interval_s`` of virtual time: the server's ``running``, ``waiting``,
  ``kv_cache_usage``, ``preemptions``, its prompt, generation and prefix-cache hit token
  counters, vLLM's per-request phase histograms' sums and count (``phase_queue_s``,
  ``phase_prefill_s``, ``phase_decode_s``, ``phase_requests``: the requests finished so far,
  as the real-time server's ``/metrics`` counts them) and the simulated GPU's utilization,
  DRAM bandwidth, memory and power (:class:`~locust_llm.sim.gpu.SimGpuSource` on the virtual
  clock).

- prompts: with ``dataset`` (a ``--llm-dataset`` value: ``random``, ``openqa``,
  ``shared-prefix:...``, a JSONL or ShareGPT file) each user draws its prompts from
  :func:`locust_llm.workloads.datasets.load_dataset` with its own seeded generator, as the client
  does,
  and the engine gets the prompt's block hashes (and the answer's) the way the real-time front
  computes them, so the prefix cache hits what it would hit in a real run and each record
  carries ``cached_tokens`` (``usage.prompt_tokens_details.cached_tokens``); without one only
  lengths are drawn and no prompt shares a block (as the client's ``random`` prompts);
- faults: the config's ``--fault`` specs drawn per request in arrival order with the same
  seeded :class:`~locust_llm.sim.faults.FaultPlan` the real-time server uses, applied and
  classified as the front and the client do (:mod:`locust_llm.sim.virtual_stream`), with the
  client's read timeout ``read_timeout_s`` (``locust-llm virtual``: 120 s, the default of the
  client's ``--llm-read-timeout``; none when the workload is built in code);
- ground truth: ``--trace`` and ``--step-trace`` write the lines the real-time server writes
  (:mod:`locust_llm.sim.trace`; a request's line when its record is made, a step's as it runs),
  on the run's wall clock (virtual time from the run's start), so ``sim.labels`` reads a
  virtual run as it reads a real one.

Differences from a real run, by design: stage switches happen at the exact instant (Locust's
shape ticks once a second), nothing is lost to the client or the network, and the simulator
never lags behind its schedule (there is no schedule: lag is zero by construction).
"""

from __future__ import annotations

import heapq
import math
import random
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from locust_llm import __version__
from locust_llm.capacity import flags as capacity_flags
from locust_llm.client.recorder import Recorder
from locust_llm.errors import InputError
from locust_llm.metrics import RequestRecord, StreamTiming, summarize_stream
from locust_llm.options.table import SWEEP_FLAGS
from locust_llm.roofline.floors import GpuSpec, ModelSpec
from locust_llm.rundir.layout import RunInfo, Stage
from locust_llm.sim import cli as sim_cli
from locust_llm.sim.config import SimConfig
from locust_llm.sim.engine import Engine, RequestTooLarge, SimRequest, StepResult
from locust_llm.sim.faults import FaultPlan
from locust_llm.sim.gpu import SimGpuSource
from locust_llm.sim.metrics import phase_times
from locust_llm.sim.prefix_cache import block_hashes
from locust_llm.sim.trace import TraceWriter, request_times, step_record
from locust_llm.sim.virtual_stream import StreamEnd, VirtualStream
from locust_llm.telemetry.scraper import rows_to_frame, write_frame
from locust_llm.workloads.arrivals import STAGE_ENDED
from locust_llm.workloads.datasets import load_dataset
from locust_llm.workloads.distributions import Distribution, parse_distribution
from locust_llm.workloads.stages import StagePlan, parse_stages
from locust_llm.workloads.textgen import (
    OutputLengths,
    answer_pieces,
    estimate_message_tokens,
    estimate_tokens,
    message_pieces,
    prompt_pieces,
)

CHAT_ENDPOINT = "/v1/chat/completions"
SOURCE = "virtual-sim"  # telemetry.parquet source of every virtual sample
#: A closed-loop user whose request was refused outright sends again at least this much later
#: (it also bounds a loop of refusals in time when the turnaround is 0).
ERROR_TURNAROUND_S = 0.001


@dataclass(frozen=True, kw_only=True)
class VirtualWorkload:
    """What the virtual client sends. Lengths use the client's distribution syntax."""

    #: closed loop (concurrency) or open loop (rate) stages, each ending after a request count
    #: or a duration; ``max_sends`` caps what a closed-loop stage sends
    stages: tuple[StagePlan, ...]
    input_len: str = "256"  # prompt tokens (--llm-input-len)
    max_tokens: str = "256"  # max_tokens per request (--llm-max-tokens)
    ignore_eos: bool = False
    burstiness: float = 1.0  # open loop: gamma shape of the gaps (1 = Poisson; --llm-burstiness)
    scrape_interval_s: float = 1.0
    stop_timeout_s: float = 60.0  # in-flight requests may finish this long after the last stage
    warmup_s: float = 0.0  # per stage, left out of the report's tables (--llm-warmup)
    #: closed loop: from the end of a stream to the next request reaching the server (a real
    #: client and the server's HTTP front take about a millisecond; it decides whether the
    #: request catches the engine's next step or waits one more)
    turnaround_s: float = 0.001
    endpoint: str = CHAT_ENDPOINT
    #: (prompt tokens, max_tokens) of each request in send order, cycled: a dataset's lengths
    #: replayed as they are; when given, ``input_len`` and ``max_tokens`` are not drawn
    lengths: tuple[tuple[int, int], ...] = ()
    #: a ``--llm-dataset`` value whose prompts the users send (their text feeds the prefix
    #: cache); "" = lengths only (``input_len`` or ``lengths``), prompts that share no block
    dataset: str = ""
    #: the client's read timeout (``--llm-read-timeout``): the longest wait for the next byte
    #: before a request is a ``timeout`` record; math.inf (the default here): never, as
    #: ``vllm bench serve``; ``locust-llm virtual --read-timeout`` defaults to the client's 120 s
    read_timeout_s: float = math.inf
    seed: int = 0
    max_virtual_s: float = 7 * 86400.0  # a bound on the simulated span

    def checked(self) -> VirtualWorkload:
        if not self.stages:
            raise InputError(
                "a virtual run needs at least one stage: give --concurrency (closed loop) or "
                "--rate (open loop)"
            )
        if len({s.rate is None for s in self.stages}) > 1:
            raise InputError("stages are all closed loop (concurrency) or all open loop (rate)")
        parse_distribution(self.input_len, what="--input-len")
        if any(p < 1 or m < 1 for p, m in self.lengths):
            raise InputError("every (prompt, max_tokens) pair of lengths must be >= 1 token")
        parse_distribution(self.max_tokens, what="--max-tokens")
        for name in ("burstiness", "scrape_interval_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise InputError(f"{name} must be a positive number, got {value}")
        if not (self.stop_timeout_s >= 0 and self.warmup_s >= 0 and self.turnaround_s >= 0):
            raise InputError("stop timeout, warm-up and turnaround must be >= 0 s")
        if not self.read_timeout_s > 0:
            raise InputError(f"read timeout must be > 0 s, got {self.read_timeout_s}")
        if self.dataset and self.lengths:
            raise InputError("give a dataset or a list of lengths, not both")
        return self

    @property
    def open_loop(self) -> bool:
        return self.stages[0].rate is not None


class StagePlanner(Protocol):
    """Plans stages as the run goes (the capacity search): told every record, asked whether
    the current stage may end now and what comes after it."""

    def on_record(self, record: RequestRecord) -> None: ...

    def stage_over(self, stage: int, now_s: float, older_in_flight: Callable[[], int]) -> bool: ...

    def next_plan(self, ended_stage: int, ended_s: float) -> StagePlan | None: ...

    def warmup_s(self, stage: int) -> float | None: ...

    def idle_first(self, ended_stage: int) -> bool: ...

    def stage_opened(self, stage: int, at_s: float) -> None: ...

    def run_info(self) -> dict[str, Any]: ...


@dataclass(slots=True)
class _Request:
    """Client side of one request in flight."""

    number: int
    user: int
    stage: int
    sent_s: float
    scheduled_s: float
    prompt_tokens: int
    output_tokens: int
    stream: VirtualStream
    engine_req: SimRequest | None = None


@dataclass
class VirtualRun:
    """A finished virtual run: everything the run dir holds, plus how long it took to compute."""

    records: list[RequestRecord]
    telemetry: list[tuple[float, str, str, str, float]]
    info: RunInfo
    virtual_s: float  # simulated span, first send to last record
    compute_s: float  # wall-clock seconds the simulation took
    steps: int

    @property
    def speedup(self) -> float:
        """Simulated seconds per wall-clock second."""
        return self.virtual_s / self.compute_s if self.compute_s > 0 else math.inf


class _Driver:
    """The event loop on virtual time (see the module docstring)."""

    def __init__(
        self,
        config: SimConfig,
        workload: VirtualWorkload,
        base_wall_s: float,
        engine: Engine,
        planner: StagePlanner | None = None,
    ) -> None:
        self.planner = planner
        self.cfg = config.validated()
        self.wl = workload.checked()
        self.engine = engine
        self.now = 0.0
        self.gpu = SimGpuSource(self.engine, clock=lambda: self.now)
        self.base = base_wall_s
        self.rng = random.Random(f"virtual:{workload.seed}")
        self.input_len: Distribution = parse_distribution(workload.input_len, what="--input-len")
        self.max_tokens: Distribution = parse_distribution(workload.max_tokens, what="--max-tokens")
        self.eos_lengths = OutputLengths(self.cfg.output_len, self.cfg.seed)
        self.faults = FaultPlan(self.cfg.faults, self.cfg.seed)  # drawn as the server draws
        self.prompts = None
        if self.wl.dataset:
            random_set = self.wl.dataset == "random"
            self.prompts = load_dataset(
                self.wl.dataset,
                input_len=self.wl.input_len if random_set else None,
                seed=self.wl.seed,
            )
        self.user_rngs: dict[int, random.Random] = {}  # each user's prompt generator
        self.deadlines: list[tuple[float, int, int]] = []  # (read deadline, seq, request id)
        self._seq = 0
        self.records: list[RequestRecord] = []
        self.telemetry: list[tuple[float, str, str, str, float]] = []
        self.stages: list[Stage] = []
        #: the stages to play; :meth:`next_plan` may add one when the last has ended
        self.plans: list[StagePlan] = list(self.wl.stages)
        self.live: dict[int, _Request] = {}  # engine request id -> request
        self.arrivals: deque[tuple[float, int]] = deque()  # open loop: (time, stage) in order
        #: sent requests still in the API server: (time it reaches the engine, order, request,
        #: max_tokens, block hashes), a heap
        self.entering: list[tuple[float, int, _Request, int, tuple[bytes, ...]]] = []
        self.next_scrape = 0.0
        self.sent = 0
        self.stage = -1
        self.stage_start = 0.0
        self.stage_completed = 0
        self.stage_sent = 0
        self.users = 0  # closed loop: users allowed to send
        self.busy_users: set[int] = set()
        self.queued_users: set[int] = set()
        #: closed loop: (time, order, user) to send, a heap (a held stream ends in the future)
        self.to_send: list[tuple[float, int, int]] = []
        self.steps = 0
        #: vLLM's phase histograms' sums and count over the requests finished so far
        self.phase_sums = [0.0, 0.0, 0.0]  # queue, prefill, decode (seconds)
        self.phase_count = 0
        #: the ground truth the real-time server writes (``--trace``, ``--step-trace``), on the
        #: run's wall clock (virtual time + ``base``)
        self.trace = TraceWriter(self.cfg.trace_path) if self.cfg.trace_path else None
        self.step_trace = (
            TraceWriter(self.cfg.step_trace_path, "--step-trace")
            if self.cfg.step_trace_path
            else None
        )

    def close_traces(self) -> None:
        for writer in (self.trace, self.step_trace):
            if writer is not None:
                writer.close()

    # ---- sending ------------------------------------------------------------------------
    def send(self, user: int, at_s: float, scheduled_s: float) -> None:
        self.sent += 1
        pieces: list[str | int] = []
        if self.prompts is not None:
            rng = self.user_rngs.get(user)
            if rng is None:
                rng = self.user_rngs[user] = random.Random(f"{self.wl.seed}:virtual:{user}")
            drawn_prompt = self.prompts.next_request(rng)
            chat = self.wl.endpoint == CHAT_ENDPOINT
            if chat:
                prompt = estimate_message_tokens(drawn_prompt.messages)
                pieces = list(message_pieces(drawn_prompt.messages))
            else:
                prompt = estimate_tokens(drawn_prompt.prompt)
                pieces = list(prompt_pieces(drawn_prompt.prompt))
            prompt = max(prompt, 1)
            max_tokens = drawn_prompt.max_tokens or self.max_tokens.sample(rng)
        elif self.wl.lengths:
            prompt, max_tokens = self.wl.lengths[(self.sent - 1) % len(self.wl.lengths)]
        else:
            prompt = self.input_len.sample(self.rng)
            max_tokens = self.max_tokens.sample(self.rng)
        drawn = self.eos_lengths.draw()
        output = max_tokens if self.wl.ignore_eos else min(drawn, max_tokens)
        stream = VirtualStream(
            at_s,
            self.faults.draw(),
            output_tokens=output,
            tokens_per_chunk=self.cfg.tokens_per_chunk,
            read_timeout_s=self.wl.read_timeout_s,
        )
        req = _Request(self.sent, user, self.stage, at_s, scheduled_s, prompt, output, stream)
        rejected = stream.rejection()
        if rejected is not None:
            self.finish(req, at_s, error=rejected)
            return
        hashes: tuple[bytes, ...] = ()
        if pieces and self.cfg.enable_prefix_caching:  # as the real-time front hashes them
            chat = self.wl.endpoint == CHAT_ENDPOINT
            answer = answer_pieces(self.cfg.seed, self.sent, output, chat=chat)
            hashes = block_hashes([*pieces, *answer], self.cfg.block_size)
        self.busy_users.add(user)
        front = self.cfg.front_s(prompt)
        if front > 0:  # the API server and the tokenizer first: the engine sees it later
            self._seq += 1
            entry = (at_s + front, self._seq, req, max_tokens, hashes)
            heapq.heappush(self.entering, entry)
            return
        self.enter(req, at_s, max_tokens, hashes)

    def enter(self, req: _Request, at_s: float, max_tokens: int, hashes: tuple[bytes, ...]) -> None:
        """``req`` reaches the engine at ``at_s`` (after the API server and tokenization)."""
        try:
            req.engine_req = self.engine.add(
                req.prompt_tokens,
                req.output_tokens,
                arrival_s=at_s,
                max_tokens=max_tokens,
                block_hashes=hashes,
            )
        except RequestTooLarge as exc:
            self.finish(req, at_s, error=StreamEnd(at_s, "http_4xx", 400, str(exc)))
            return
        self.live[req.engine_req.id] = req
        if math.isfinite(self.wl.read_timeout_s):
            self.watch(req)

    def enter_next(self) -> None:
        """The first request done with the API server joins the engine's queue."""
        at, _, req, max_tokens, hashes = heapq.heappop(self.entering)
        self.enter(req, at, max_tokens, hashes)

    def watch(self, req: _Request) -> None:
        """Look at ``req`` again at its read deadline."""
        assert req.engine_req is not None
        self._seq += 1
        heapq.heappush(self.deadlines, (req.stream.deadline_s, self._seq, req.engine_req.id))

    def expire(self) -> bool:
        """Fire the first read timeout that is due (True when one was looked at)."""
        if not self.deadlines or self.deadlines[0][0] > self.now:
            return False
        _, _, rid = heapq.heappop(self.deadlines)
        req = self.live.get(rid)
        if req is None:
            return True  # finished already
        ended = req.stream.timed_out(self.now)
        if ended is None:
            self.watch(req)  # a byte came since: the deadline moved on
            return True
        if req.engine_req is not None:
            self.engine.abort(req.engine_req)
        self.finish(req, ended.at_s, error=ended)
        return True

    def finish(self, req: _Request, end_s: float, error: StreamEnd | None = None) -> None:
        """Turn a request into its one record (and let a closed-loop user send again)."""
        record = RequestRecord(
            request_id=f"virtual-{req.number}",
            endpoint=self.wl.endpoint,
            model=self.cfg.model_name,
            worker_id="virtual",
            user_id=req.user,
            stage=req.stage,
            start_wall_s=self.base + req.sent_s,
            scheduled_wall_s=self.base + req.scheduled_s if self.wl.open_loop else math.nan,
            input_tokens=req.prompt_tokens,
        )
        timing = StreamTiming(t0=req.sent_s, end_time=end_s)
        times = req.stream.chunk_times
        timing.chunk_times = list(times)
        timing.chunk_tokens = [0] * len(times)
        timing.first_content_time = times[0] if times else math.nan
        received = req.stream.tokens_received
        if error is None:
            record.ok, record.status_code = True, 200
            summarize_stream(record, timing, req.output_tokens)
            if req.engine_req is not None:  # the usage chunk's prompt_tokens_details
                record.cached_tokens = req.engine_req.cached_tokens
                self.count_phases(req.engine_req)
        else:
            record.error_kind, record.status_code = error.kind, error.status
            record.error_message = error.message
            # a cancelled request keeps its time in flight (send -> cancel) as the client's does
            summarize_stream(record, timing, received if received else None)
        self.records.append(record)
        if self.trace is not None:
            self.trace.write(self.trace_line(req, record, error))
        if self.planner is not None:
            self.planner.on_record(record)
        if req.engine_req is not None:
            self.live.pop(req.engine_req.id, None)
        self.busy_users.discard(req.user)
        cancelled = error is not None and error.kind == "cancelled"
        if req.stage == self.stage and not cancelled:
            self.stage_completed += 1
        if req.user >= 0 and not cancelled:  # closed loop: the user goes again
            turnaround = self.wl.turnaround_s
            if error is not None and not times:
                turnaround = max(turnaround, ERROR_TURNAROUND_S)
            self.queue_user(req.user, end_s + turnaround)

    def trace_line(
        self, req: _Request, record: RequestRecord, error: StreamEnd | None
    ) -> dict[str, object]:
        """The request's ``--trace`` line, with the real-time server's fields and outcomes."""
        engine_req, fault = req.engine_req, req.stream.fault
        times = {"admission": math.nan, "engine_first_token": math.nan, "engine_finish": math.nan}
        if engine_req is not None:
            times = request_times(engine_req, clock_offset_s=self.base)
            del times["arrival"]
        if error is None:
            outcome, status = "ok", 200
        elif engine_req is None:  # answered before the engine: a status fault or too large
            outcome = f"fault:{fault.kind}" if fault is not None else "rejected"
            status = error.status
        elif error.kind in ("timeout", "cancelled"):  # the client went away
            outcome, status = "aborted", 200 if req.stream.chunk_times else 0
        elif engine_req.outcome not in ("", "ok", "aborted"):  # the engine failed it (oom)
            outcome, status = engine_req.outcome, 500
        else:  # a fault broke the stream off
            outcome = f"fault:{fault.kind}" if fault is not None else error.kind
            status = error.status
        chunks = req.stream.chunk_times
        return {
            "id": f"virtual-{req.number}",
            "client_request_id": record.request_id,
            "endpoint": self.wl.endpoint,
            "stream": True,
            "arrival": self.base + req.sent_s,
            **times,
            "first_token": self.base + chunks[0] if chunks else math.nan,
            "first_answer_token": self.base + chunks[0] if chunks else math.nan,
            "last_token": self.base + chunks[-1] if chunks else math.nan,
            "prompt_tokens": req.prompt_tokens,
            "cached_tokens": engine_req.cached_tokens if engine_req is not None else 0,
            "tokens_sent": req.stream.tokens_received,
            "reasoning_tokens": 0,
            "preemptions": engine_req.preemptions if engine_req is not None else 0,
            "fault": fault.kind if fault is not None else None,
            "outcome": outcome,
            "status": status,
        }

    def count_phases(self, req: SimRequest) -> None:
        """A finished request into the phase sums, as the real-time server's histograms."""
        if req.outcome != "ok":
            return
        for i, seconds in enumerate(phase_times(req)):
            self.phase_sums[i] += seconds
        self.phase_count += 1

    def queue_user(self, user: int, at_s: float) -> None:
        if user not in self.queued_users:
            self.queued_users.add(user)
            self._seq += 1
            heapq.heappush(self.to_send, (at_s, self._seq, user))

    # ---- stages -------------------------------------------------------------------------
    def open_stage(self, index: int, at_s: float) -> None:
        if self.planner is not None:
            self.planner.stage_opened(index, at_s)
        if self.stages:
            if math.isnan(self.stages[-1].end_wall_s):  # not ended before a pause
                self.stages[-1].end_wall_s = self.base + at_s
            self.drop_arrivals(STAGE_ENDED)
        self.stage, self.stage_start, self.stage_completed = index, at_s, 0
        self.stage_sent = 0
        plan = self.plans[index]
        self.stages.append(plan.window(index, self.base + at_s, warmup_s=self.wl.warmup_s))
        if plan.rate is not None:
            self.plan_arrivals(plan, at_s)
            return
        self.users = plan.concurrency or 0
        for user in range(self.users):
            if user not in self.busy_users:
                self.queue_user(user, at_s)

    def plan_arrivals(self, plan: StagePlan, at_s: float) -> None:
        """This stage's send times: gamma gaps of mean 1/rate and shape ``burstiness``."""
        assert plan.rate is not None
        shape = self.wl.burstiness
        scale = 1.0 / (plan.rate * shape)
        end = at_s + plan.duration_s if plan.duration_s is not None else math.inf
        count = plan.requests if plan.requests is not None else math.inf
        t, n = at_s, 0
        while n < count and t < end:  # the first one at the stage's start, as the client does
            self.arrivals.append((t, self.stage))
            n += 1
            t += self.rng.gammavariate(shape, scale)
        self.stages[-1].arrivals_drawn = n

    def send_arrival(self) -> None:
        """Send the next open-loop arrival at its own time, in the stage that drew it."""
        at, stage = self.arrivals.popleft()
        saved, self.stage = self.stage, stage
        self.send(-1, at, at)
        self.stage = saved

    def drop_arrivals(self, reason: str) -> None:
        """The arrivals not sent when their stage ended (a request-count stage can end before
        its last arrival): counted unsent with ``reason``, as the client counts them."""
        for _, stage in self.arrivals:
            unsent = self.stages[stage].arrivals_unsent
            unsent[reason] = unsent.get(reason, 0) + 1
        self.arrivals.clear()

    def next_plan(self, ended_s: float) -> StagePlan | None:
        """The stage after the current one, which ended at ``ended_s`` (None: the run ends);
        a planner adds it to :attr:`plans` as it goes."""
        nxt = self.stage + 1
        if nxt >= len(self.plans) and self.planner is not None:
            planned = self.planner.next_plan(self.stage, ended_s)
            if planned is not None:
                self.plans.append(planned)
        if self.planner is not None:
            warmup = self.planner.warmup_s(self.stage)
            if warmup is not None:  # the warm-up it found: the report leaves it out
                self.stages[self.stage].warmup_s = warmup
        return self.plans[nxt] if nxt < len(self.plans) else None

    def older_in_flight(self) -> int:
        """Requests of earlier stages still in flight (a backlog the current stage inherits)."""
        entering = sum(1 for entry in self.entering if entry[2].stage < self.stage)
        return entering + sum(1 for req in self.live.values() if req.stage < self.stage)

    def stage_over(self) -> float | None:
        """When the current stage ends (a virtual time), or None while it goes on."""
        plan = self.plans[self.stage]
        if plan.requests is not None and self.stage_completed >= plan.requests:
            return self.now
        if self.planner is not None and self.planner.stage_over(
            self.stage, self.now, self.older_in_flight
        ):
            return self.now
        if plan.duration_s is not None and self.now >= self.stage_start + plan.duration_s:
            return self.stage_start + plan.duration_s
        return None

    # ---- telemetry ----------------------------------------------------------------------
    def scrape_until(self, until_s: float) -> None:
        """Samples at every scrape instant up to ``until_s`` (state as of the last step)."""
        while self.next_scrape <= until_s:
            saved, self.now = self.now, self.next_scrape
            self.sample(self.base + self.next_scrape)
            self.now = saved
            self.next_scrape += self.wl.scrape_interval_s

    def sent_not_joined(self) -> int:
        """Requests sent by now that join the engine only after the step under way (the driver
        hands them over when the step ends): a real server would count them waiting."""
        due = sum(1 for at_s, _, _ in self.to_send if at_s <= self.now)
        for at_s, _ in self.arrivals:
            if at_s > self.now:
                break
            due += 1
        return due

    def sample(self, wall_s: float) -> None:
        eng = self.engine
        values: list[tuple[str, str, Any]] = [
            ("running", "", len(eng.running)),
            ("waiting", "", len(eng.waiting) + self.sent_not_joined()),
            ("kv_cache_usage", "", eng.kv_usage_ratio),
            ("preemptions", "", eng.stats.preemptions_total),
            ("prompt_tokens_total", "", eng.stats.prompt_tokens_total),
            ("generation_tokens_total", "", eng.stats.generation_tokens_total),
            ("prompt_tokens_cached_total", "", eng.stats.prefix_cache_hits_total),
            # the tokens the steps computed and the steps (vLLM's iteration_tokens_total)
            ("step_tokens_total", "", eng.stats.step_tokens_total),
            ("engine_steps_total", "", eng.stats.steps_total),
            ("scrape_up", "", 1.0),
            ("phase_queue_s", "", self.phase_sums[0]),
            ("phase_prefill_s", "", self.phase_sums[1]),
            ("phase_decode_s", "", self.phase_sums[2]),
            ("phase_requests", "", self.phase_count),
        ]
        for gpu in self.gpu.read().gpus:  # one per tensor-parallel GPU
            index = str(gpu.index)
            values += [
                ("gpu_util", index, gpu.utilization_ratio),
                ("dram_bw_util", index, gpu.dram_bandwidth_utilization_ratio),
                ("mem_used_bytes", index, gpu.memory_used_bytes),
                ("mem_total_bytes", index, gpu.memory_total_bytes),
                ("power_w", index, gpu.power_watts),
            ]
        for signal, label, value in values:
            if value is not None:
                self.telemetry.append((wall_s, SOURCE, signal, label, float(value)))

    # ---- the loop -----------------------------------------------------------------------
    def run(self) -> float:
        """Play every stage, drain, and return the virtual time of the last event."""
        self.scrape_until(0.0)
        self.open_stage(0, 0.0)
        draining_since: float | None = None
        idle_before_next = False  # the next stage opens once nothing is in flight
        while True:
            if idle_before_next and not self.live and not self.entering:
                idle_before_next = False
                self.open_stage(self.stage + 1, self.now)
                continue
            if draining_since is None and not idle_before_next:
                end = self.stage_over()
                if end is not None and self.to_send and self.to_send[0][0] < end:
                    self.send_next_user()  # sent before the stage ended: the stage's own
                    continue
                if end is not None and self.arrivals and self.arrivals[0][0] < end:
                    self.send_arrival()  # due before the stage ended: sent in it
                    continue
                if end is not None:
                    if self.next_plan(end) is not None:
                        if self.planner is not None and self.planner.idle_first(self.stage):
                            # a pause: the server serves the backlog, nothing new is sent
                            self.stages[-1].end_wall_s = self.base + end
                            self.drop_arrivals(STAGE_ENDED)
                            self.users = 0
                            self.to_send = []
                            self.queued_users.clear()
                            idle_before_next = True
                            continue
                        self.open_stage(self.stage + 1, end)
                        continue
                    self.stages[-1].end_wall_s = self.base + end
                    self.drop_arrivals(STAGE_ENDED)
                    self.users = 0
                    self.to_send = []
                    self.queued_users.clear()
                    draining_since = end
            if draining_since is not None and (
                (not self.live and not self.entering)
                or self.now >= draining_since + self.wl.stop_timeout_s
            ):
                break
            if self.now > self.wl.max_virtual_s:
                raise InputError(
                    f"virtual run passed {self.wl.max_virtual_s:g} s of simulated time; "
                    "shorten the stages"
                )
            if self.expire():
                continue
            if self.to_send and self.to_send[0][0] <= self.now:
                self.send_next_user()
                continue
            if self.arrivals and self.arrivals[0][0] <= self.now:
                self.send_arrival()
                continue
            if self.entering and self.entering[0][0] <= self.now:
                self.enter_next()
                continue
            if self.engine.has_work:
                self.step()
                continue
            target = min(
                self.arrivals[0][0] if self.arrivals else math.inf,
                self.to_send[0][0] if self.to_send else math.inf,
                self.deadlines[0][0] if self.deadlines else math.inf,
                self.entering[0][0] if self.entering else math.inf,
                self.stage_deadline(),
            )
            if not math.isfinite(target):
                break  # nothing left that could happen
            self.scrape_until(target)
            self.now = max(self.now, target)
        still = [*self.live.values(), *(entry[2] for entry in self.entering)]
        self.entering = []
        for req in sorted(still, key=lambda r: r.number):
            if req.engine_req is not None:
                self.engine.abort(req.engine_req)
            ended = StreamEnd(self.now, "cancelled", 0, "stopped by the load test")
            self.finish(req, self.now, error=ended)
        self.scrape_until(self.now)
        return self.now

    def send_next_user(self) -> None:
        """The first closed-loop user due sends its request (if the stage still wants one)."""
        at, _, user = heapq.heappop(self.to_send)
        self.queued_users.discard(user)
        limit = self.plans[self.stage].max_sends
        if user < self.users and (limit is None or self.stage_sent < limit):
            self.stage_sent += 1
            self.send(user, at, at)

    def stage_deadline(self) -> float:
        plan = self.plans[self.stage]
        return math.inf if plan.duration_s is None else self.stage_start + plan.duration_s

    def step(self) -> None:
        result: StepResult = self.engine.step(self.now)
        self.steps += 1
        if self.step_trace is not None:
            self.step_trace.write(
                step_record(result, clock_offset_s=self.base, kv_usage=self.engine.kv_usage_ratio)
            )
        if result.duration_s <= 0 and not result.emitted and not result.failed:
            raise RuntimeError("the engine could not schedule any request (no progress)")
        end = result.end_s
        self.scrape_until(end)
        self.now = end
        out = end + self.cfg.detokenize_s_per_token  # the tokens reach the socket
        for sim_req in result.emitted:
            req = self.live.get(sim_req.id)
            if req is None:
                continue
            broke = req.stream.token(out)
            if broke is not None:  # a disconnect or a malformed chunk: the stream ends here
                self.engine.abort(sim_req)
                self.finish(req, broke.at_s, error=broke)
        for sim_req in result.failed:
            req = self.live[sim_req.id]
            self.finish(req, end, error=StreamEnd(end, sim_req.outcome, 500, "CUDA out of memory"))
        for sim_req in result.finished:
            req = self.live.get(sim_req.id)
            if req is not None and not req.stream.doomed:  # doomed: its timeout will fire
                self.finish(req, req.stream.end_s)


def simulate(
    config: SimConfig,
    workload: VirtualWorkload,
    *,
    model: ModelSpec | None = None,
    gpu: GpuSpec | None = None,
    start_wall_s: float | None = None,
    planner: StagePlanner | None = None,
) -> VirtualRun:
    """Play ``workload`` on virtual time against an engine built from ``config``.

    ``model`` / ``gpu`` replace the config's presets (as :class:`Engine` takes them); a
    ``planner`` ends stages and adds new ones as the run goes (``workload.stages`` holds the
    first); what it says of the run goes into run.json's ``extra``.
    """
    t0 = time.perf_counter()
    base = time.time() if start_wall_s is None else start_wall_s
    engine = Engine(config, model=model, gpu=gpu)
    driver = _Driver(config, workload, base, engine, planner)
    try:
        end = driver.run()
    finally:
        driver.close_traces()
    compute_s = time.perf_counter() - t0
    cfg = driver.cfg
    info = RunInfo(
        run_id="",
        command=["locust-llm", "virtual"],
        versions={"locust-llm": __version__},
        host="virtual",
        hosts=["virtual"],
        model=cfg.model_name,
        endpoint=workload.endpoint,
        start_wall_s=base,
        end_wall_s=base + end,
        workers=["virtual"],
        stages=driver.stages,
        mode="open" if workload.open_loop else "closed",
        # the tensor-parallel degree travels with the floors (the report's --tp default)
        roofline=_roofline_entry(cfg) if model is None and gpu is None else {"tp": cfg.tp},
        extra={
            "virtual": True,
            "tp": cfg.tp,
            "max_num_seqs": cfg.max_num_seqs,
            "sim": {k: v for k, v in asdict(cfg).items() if k not in ("host", "port")},
            "workload": asdict(workload),
            "virtual_s": end,
            "compute_s": compute_s,
            "steps": driver.steps,
            "preemptions": driver.engine.stats.preemptions_total,
            **(planner.run_info() if planner is not None else {}),
        },
    )
    return VirtualRun(
        records=driver.records,
        telemetry=driver.telemetry,
        info=info,
        virtual_s=end,
        compute_s=compute_s,
        steps=driver.steps,
    )


def write_run_dir(run: VirtualRun, run_dir: Path | str) -> Path:
    """Write ``requests.parquet``, ``telemetry.parquet`` and ``run.json`` into ``run_dir``."""

    path = Path(run_dir)
    run.info.run_id = path.name
    recorder = Recorder(is_worker=False)
    for record in run.records:
        recorder.add(record)
    recorder.write(path, run.info)
    write_frame(rows_to_frame(run.telemetry), path)
    return path


# ---- `locust-llm virtual` -----------------------------------------------------------------


def configure_parser(parser: Any) -> None:
    """Flags of ``locust-llm virtual``: the simulator's own flags plus the workload's."""

    sim_cli.configure_parser(parser)
    add = parser.add_argument
    add("--concurrency", default="", help="closed-loop users per stage, e.g. 1,2,4,8")
    add("--rate", default="", help="open-loop requests/s per stage, e.g. 1,2,4")
    add("--stage-requests", default="", help="completed requests per stage (one or per stage)")
    add(
        "--stage-duration",
        default="",
        help="virtual seconds per stage (one or per stage; 90, 90s, 30m, 1h)",
    )
    add("--input-len", default="256", help="prompt tokens: N or a distribution")
    add("--max-tokens", default="256", help="max_tokens per request: N or a distribution")
    add("--ignore-eos", action="store_true", help="every request generates exactly max_tokens")
    add(
        "--dataset",
        default="",
        help="prompts as --llm-dataset takes them (random, openqa, shared-prefix:..., a file);"
        " their text feeds the prefix cache (default: lengths only)",
    )
    add("--read-timeout", type=float, default=120.0, help="client read timeout (s)")
    add("--burstiness", type=float, default=1.0, help="open loop: gamma shape (1 = Poisson)")
    add("--scrape-interval", type=float, default=1.0, help="telemetry every N virtual seconds")
    add("--warmup", type=float, default=0.0, help="seconds per stage left out of the tables")
    add("--stop-timeout", type=float, default=60.0, help="drain time after the last stage (s)")
    add("--out", default="", help="run dir (default reports/virtual-<UTC time>)")
    add("--slo", default="", help="objectives, e.g. ttft_p99=2s,errors=1%% (--find-capacity)")
    capacity_flags.add_flags(parser)


def run_virtual(args: Any) -> int:
    """``locust-llm virtual``: simulate the sweep, write the run dir, print where it is."""
    from datetime import datetime, timezone

    config = sim_cli.config_from_args(args)
    planner = None
    if args.find_capacity:
        from locust_llm.live.capacity_planner import planner_from_args

        if args.concurrency or args.rate:
            raise InputError("--find-capacity plans its own stages: leave out --concurrency/--rate")
        planner = planner_from_args(args, time.time())
        stages: tuple[StagePlan, ...] = (planner.first_plan(),)
    else:
        stages = parse_stages(
            concurrency=args.concurrency,
            rate=args.rate,
            requests=args.stage_requests,
            duration=args.stage_duration,
            flags=SWEEP_FLAGS,
        )
    workload = VirtualWorkload(
        stages=stages,
        input_len=args.input_len,
        max_tokens=args.max_tokens,
        ignore_eos=args.ignore_eos,
        dataset=args.dataset,
        read_timeout_s=args.read_timeout,
        burstiness=args.burstiness,
        scrape_interval_s=args.scrape_interval,
        warmup_s=args.warmup,
        stop_timeout_s=args.stop_timeout,
        seed=config.seed,
    )
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    run_dir = Path(args.out) if args.out else Path("reports") / f"virtual-{stamp}"
    result = simulate(config, workload, start_wall_s=planner.base if planner else None,
                      planner=planner)  # fmt: skip
    result.info.command = ["locust-llm", *sys.argv[1:]]
    write_run_dir(result, run_dir)
    if planner is not None:
        print(planner.console_answer())
    print(
        f"virtual run: {len(result.records)} requests, {result.virtual_s:.1f} s simulated in "
        f"{result.compute_s:.2f} s ({result.speedup:.0f}x real time); run dir {run_dir}\n"
        f"next: locust-llm report {run_dir}"
    )
    return 0


def _roofline_entry(cfg: SimConfig) -> dict[str, Any]:
    """run.json's ``roofline`` for the simulated engine: its model and its device (the preset,
    or the device given by hand), so the report's floors use what was simulated."""
    device = (
        {"bandwidth": cfg.bandwidth, "flops": cfg.flops, "memory": cfg.memory}
        if cfg.bandwidth
        else {"gpu": cfg.gpu}
    )
    return {"model": cfg.model, **device, "tp": cfg.tp}
