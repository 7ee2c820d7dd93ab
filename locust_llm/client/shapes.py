"""The seed's test procedure as a Locust shape: a staircase of concurrency (or rate) stages.

``--llm-concurrency 1,10,50,100,200`` steps closed-loop users; each stage ends after
``--llm-stage-requests`` completed requests (the seed's ``number``) or ``--llm-stage-duration``
seconds. ``--llm-soak 30m@50`` appends a long hold at one concurrency. ``--llm-rate 1,2,4,8`` runs
open-loop stages instead: a pool of users sends requests at scheduled times (Poisson, or gamma
with ``--llm-burstiness``), each worker its share of the rate, and the record keeps the scheduled
send time so dispatch delay is measured.

Locust asks the shape for users every second, so a stage switches within ~1 s of its condition;
the stage windows written to run.json are the instants the switch happened, and a request
belongs to the stage whose window holds its start time. The first ``--llm-warmup`` seconds of
each stage are kept in the records but left out of the report's tables.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any, Protocol, runtime_checkable

from locust import LoadTestShape
from locust.env import Environment
from locust.runners import MasterRunner

from locust_llm.capacity import flags as capacity_flags
from locust_llm.capacity.search import CapacitySearch
from locust_llm.client import lifecycle
from locust_llm.client.messages import StageMessage
from locust_llm.client.runtime import Runtime, runtime
from locust_llm.client.shares import send_partitions
from locust_llm.errors import InputError
from locust_llm.live.capacity_planner import CapacityPlanner
from locust_llm.options import lengths
from locust_llm.options.config import ClientOptions
from locust_llm.report.diagnosis.thresholds import DEFAULT_THRESHOLDS
from locust_llm.workloads.replay import Replay
from locust_llm.workloads.stages import StagePlan, parse_stages

logger = logging.getLogger(__name__)

SPAWN_RATE_MIN = 50.0  # users per second: stages should reach their concurrency quickly


def plan_stages(opts: ClientOptions) -> list[StagePlan]:
    """The stages the ``--llm-*`` options ask for (an empty list when none are asked)."""
    return list(
        parse_stages(
            concurrency=opts.concurrency,
            rate=opts.rate,
            requests=opts.stage_requests,
            duration=opts.stage_duration,
            soak=opts.soak,
        )
    )


def open_loop_users(opts: ClientOptions, plans: list[StagePlan]) -> int:
    """Users an open-loop run needs so that scheduled requests rarely wait for a free one."""
    if opts.max_users:
        return opts.max_users
    top = max((p.rate or 0.0) for p in plans)
    tokens = lengths.max_tokens(opts.max_tokens).mean
    return max(32, int(4 * top * max(tokens, 1.0) / 100))


class StagesShape(LoadTestShape):
    """Steps through the planned stages; returns None (end of test) after the last one."""

    use_common_options = False

    def __init__(self) -> None:
        super().__init__()
        self._plans: list[StagePlan] | None = None
        self._index = -1
        self._users = 0
        self._planner: CapacityPlanner | None = None  # --llm-find-capacity: plans as it goes

    def _environment(self) -> Environment:
        """The runner's environment (Locust sets ``runner`` before it calls the shape)."""
        assert self.runner is not None, "the shape is used before Locust attached its runner"
        return self.runner.environment

    def reset_time(self) -> None:
        """Locust calls this when a test starts (and again, on a master, at its first spawn):
        a new test starts over from the first stage; a running one is left as it is."""
        rt = runtime(self._environment())
        if rt.run_info is not None and not rt.run_ended:
            return
        super().reset_time()
        self._index = -1
        self._plans = None  # a new test: its plan from its options (the web UI's form may differ)
        rt.plan_done = False
        lifecycle.begin_run(rt)  # a new run dir and no stages yet, before the first tick

    def check_options(self, options: ClientOptions) -> None:
        """Before any load (:class:`locust_llm.client.lifecycle.ChecksOptions`): the stage plan
        the options ask for parses."""
        if options.find_capacity:
            capacity_planner(options)
            return
        plans = plan_stages(options)
        if options.open_loop and plans:
            open_loop_users(options, plans)

    def _setup(self) -> list[StagePlan]:
        if self._plans is None and runtime(self._environment()).options.find_capacity:
            rt = runtime(self._environment())
            planner = self._planner = capacity_planner(rt.options)
            rt.recorder.row_sink = planner.on_row
            rt.capacity_info = planner.capacity_info
            self._plans = [planner.first_plan()]
            rt.plan = list(self._plans)
        if self._plans is None:
            rt = runtime(self._environment())
            plans = plan_stages(rt.options)
            if not plans:
                raise InputError("the sweep locustfile needs --llm-concurrency or --llm-rate")
            self._plans = plans
            self._users = open_loop_users(rt.options, plans) if plans[0].rate else 0
            rt.plan = list(plans)  # run.json's stages_planned; the cut stage's words
        return self._plans

    def tick(self) -> tuple[int, float] | None:
        plans = self._setup()
        rt = runtime(self._environment())
        if rt.stop_requested:  # SIGTERM: end as after the last stage (drain, run dir, quit)
            return None
        now = time.time()
        stage_over = self._index < 0 or self._stage_done(rt, plans[self._index], now)
        if stage_over and not self._advance(rt, plans, now):
            return None
        plan = plans[self._index]
        users = plan.concurrency if plan.concurrency is not None else self._users
        return users, max(float(users), SPAWN_RATE_MIN)

    def _stage_done(self, rt: Runtime, plan: StagePlan, now: float) -> bool:
        stage = rt.stages[-1]
        if plan.duration_s is not None and now - stage.start_wall_s >= plan.duration_s:
            return True
        if plan.requests is not None:  # a lost worker's permits with no record count as ended
            lost = lifecycle.lost_unrecorded(rt, stage.index) if rt.is_master else 0
            if rt.recorder.ended_in(stage.index) + lost >= plan.requests:
                return True
        if self._planner is not None:  # steady enough: records reach the master in a batch
            seen_by = now - rt.options.record_batch_s
            return self._planner.stage_over(stage.index, seen_by, _none_in_flight)
        return False

    def _advance(self, rt: Runtime, plans: list[StagePlan], now: float) -> bool:
        if rt.stages and math.isnan(rt.stages[-1].end_wall_s):
            rt.stages[-1].end_wall_s = now
        if self._planner is not None and self._index >= 0:
            planned = self._planner.next_plan(self._index, now - rt.options.record_batch_s)
            warmup = self._planner.warmup_s(self._index)
            if warmup is not None:  # the warm-up it found: the report leaves it out
                rt.stages[-1].warmup_s = warmup
            if planned is not None:
                plans.append(planned)
                rt.plan = list(plans)
        if self._planner is not None:
            self._planner.stage_opened(self._index + 1, now)
        self._index += 1
        if self._index >= len(plans):
            rt.plan_done = True
            self._broadcast(rt, stage=-1, rate=0.0, start=now)
            return False
        plan = plans[self._index]
        rt.stages.append(plan.window(self._index, now, warmup_s=rt.options.warmup_s))
        logger.info("locust-llm: stage %d/%d %s", self._index + 1, len(plans), plan.name)
        self._broadcast(
            rt,
            stage=self._index,
            rate=plan.rate or 0.0,
            start=now,
            requests=plan.requests,
            open_loop=plan.rate is not None,
        )
        return True

    def _broadcast(
        self,
        rt: Runtime,
        *,
        stage: int,
        rate: float,
        start: float,
        requests: int | None = None,
        open_loop: bool = False,
    ) -> None:
        """Tell every worker (or this process) the stage, its request quota and open-loop rate.

        A stage's requests are handed out as permits (``locust_llm.client.gate``); the end of
        the test (stage -1) allows no more requests.
        """
        if stage < 0:
            requests = 0
        workers: list[str] = []
        if rt.is_master:
            runner = self.runner
            assert isinstance(runner, MasterRunner)  # rt.is_master means the runner is a master
            workers = sorted(c.id for c in runner.clients.all if c.state != "missing")
        message = StageMessage(
            stage=stage, quota=requests, rate=rate, start=start, open_loop=open_loop
        )
        lifecycle.broadcast_stage(rt, message, workers)


def capacity_planner(options: ClientOptions) -> CapacityPlanner:
    """The capacity search's planner from ``--llm-find-capacity``, ``--llm-capacity-slo`` and
    ``--llm-capacity-search`` (InputError when they do not parse). Closed loop only: an open
    loop left overloaded hands its queue to the next stage unless the server idles between
    them, which the virtual driver does and this shape does not yet."""
    if options.find_capacity == "rate":
        raise InputError(
            "--find-capacity rate runs on virtual time (locust-llm virtual --find-capacity rate);"
            " against a server, search users"
        )
    settings, rule, slo = capacity_flags.from_spec(
        options.find_capacity, options.capacity_slo, options.capacity_search,
        flat_gain=DEFAULT_THRESHOLDS.flat_gain,
    )  # fmt: skip
    return CapacityPlanner(CapacitySearch(settings), slo, rule, 0.0)


def _none_in_flight() -> int:
    """The master does not count an earlier stage's requests in flight (closed loop: the users
    a smaller stage stops end theirs); their records still mark the backlog's end."""
    return 0


def replay_pool_users(peak_rate_per_s: float) -> int:
    """Users a trace replay needs so a free one waits for every line: each user holds the next
    line it claimed, so the pool covers the lines in flight and due within the next seconds."""
    return max(32, math.ceil(4 * peak_rate_per_s))


@runtime_checkable
class ReplaySource(Protocol):
    """A user class that replays a trace, as :class:`TraceShape` finds it among the locustfile's
    user classes (:class:`locust_llm.client.workload_users.TraceReplayUser`; the shape does not
    import it)."""

    def load_replay(self) -> Replay:
        """The trace the class replays (a classmethod)."""
        ...

    def lost_lines(self, environment: Any) -> int:
        """Master: the lines recorded as lost with their worker in this run."""
        ...


class TraceShape(StagesShape):
    """Replays the locustfile's :class:`~locust_llm.client.workload_users.TraceReplayUser` trace:
    one stage, ``trace replay``, whose origin (trace time 0) is ``lead_s`` after it starts, sent
    with each worker's partition so every line is sent once, by one worker, on one clock.

    The stage ends when every line has ended (sent and answered), or ``drain_s`` after the last
    line's time. Lines the run could not send are recorded as ``cancelled``.
    """

    lead_s: float = 2.0  # users spawn before the trace's time 0
    drain_s: float = 30.0  # the last answers' time after the last line is sent

    def __init__(self) -> None:
        super().__init__()
        self._lines = 0
        self._source: Any = None  # the ReplaySource user class

    def _setup(self) -> list[StagePlan]:
        if self._plans is None:
            env = self._environment()
            classes = [c for c in env.user_classes if issubclass(c, ReplaySource)]
            if not classes:
                raise InputError("TraceShape needs a TraceReplayUser class in the locustfile")
            self._source = classes[0]
            replay = self._source.load_replay()
            if not replay.lines:
                raise InputError(f"trace {self._source.trace!r}: no line inside trace_window_s")
            self._lines = len(replay.lines)
            users = self._source.replay_users or replay_pool_users(replay.peak_rate_per_s())
            duration = self.lead_s + replay.span_s + self.drain_s
            self._plans = [StagePlan(name="trace replay", concurrency=users, duration_s=duration)]
            runtime(env).plan = list(self._plans)
        return self._plans

    def _stage_done(self, rt: Runtime, plan: StagePlan, now: float) -> bool:
        ended = rt.recorder.ended_in(rt.stages[-1].index)
        lost = self._source.lost_lines(self._environment())  # with a lost worker: never to end
        return ended + lost >= self._lines or super()._stage_done(rt, plan, now)

    def _advance(self, rt: Runtime, plans: list[StagePlan], now: float) -> bool:
        if self._index == -1:  # the replay starts: one origin for every worker
            send_partitions(self._environment(), origin_wall_s=now + self.lead_s)
        return super()._advance(rt, plans, now)
