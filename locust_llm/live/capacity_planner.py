"""The capacity search's stages, planned from the records as they arrive: one planner for the
simulator's virtual time (``locust-llm virtual --find-capacity``, through
:mod:`locust_llm.sim.virtual`'s ``StagePlanner`` hooks) and for the Locust master
(``locust-llm run --find-capacity``: :class:`locust_llm.client.shapes.StagesShape` feeds it the
record rows the master receives, as :mod:`locust_llm.live.stage_tally` is fed).

:class:`CapacityPlanner` keeps each stage's samples, ends a stage when
:func:`~locust_llm.capacity.measure.stop_reason` says it has run long enough (checked each
time the stage's records have grown by 5%, and not while requests of an earlier stage are
still in flight: their backlog is the stage's warm-up), measures it, hands it to the
:class:`~locust_llm.capacity.search.CapacitySearch` and plans the next load as an ordinary
stage; each stage's warm-up goes into run.json (the report leaves it out), the answer into
run.json's ``extra.capacity``. An open-loop stage completing less than
``Thresholds.open_loop_shortfall`` of its offered rate is overloaded, as the verdict says it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from locust_llm.capacity import flags
from locust_llm.capacity.measure import (
    CONFIRM_TIME_CAPS,
    UNCLEAR,
    Sample,
    StageMeasurement,
    StageRule,
    measure,
    pool,
    stop_reason,
)
from locust_llm.capacity.search import CONFIRM, GROW, CapacitySearch
from locust_llm.capacity.sequential import LOOK_GROWTH
from locust_llm.capacity.slo import Slo
from locust_llm.metrics import (
    CLIENT_SIDE_KINDS,
    COL_E2E,
    COL_KIND,
    COL_OK,
    COL_STAGE,
    COL_START,
    COL_TPOT,
    COL_TTFT,
    RequestRecord,
)
from locust_llm.report.diagnosis.thresholds import DEFAULT_THRESHOLDS
from locust_llm.workloads.stages import StagePlan


def capacity_plan(
    load: float, *, closed: bool, rule: StageRule, name: str = "", confirm: bool = False
) -> StagePlan:
    """The stage that measures ``load``: capped by the rule's time and requests (a
    confirmation's time by ``CONFIRM_TIME_CAPS`` of them: its stop rule ends it sooner)."""
    duration = rule.max_duration_s * (CONFIRM_TIME_CAPS if confirm else 1)
    if closed:
        return StagePlan(
            concurrency=int(load), max_sends=rule.max_requests, duration_s=duration,
            requests=rule.max_requests, name=name,
        )  # fmt: skip
    return StagePlan(rate=load, duration_s=duration, requests=rule.max_requests, name=name)


def overload_reason(m: StageMeasurement, rate: float | None) -> str:
    """Open loop: the completions fell short of the offered rate (the verdict's rule), beyond
    the count's own noise, while the TTFT climbs (a queue growing)."""
    if rate is None or not math.isfinite(m.throughput_hi):
        return ""
    # on evidence: even the rate's upper bound falls short, and the latencies show the queue.
    # The count alone is the arrivals' own Poisson draw, and a short stage's draw falls that
    # short now and then (the bench: 23 arrivals in the first 30 s at 1.41/s, TTFT flat at a
    # fifth of its limit, read as overload, twice in one search)
    if m.drifting and m.throughput_hi < DEFAULT_THRESHOLDS.open_loop_shortfall * rate:
        return f"achieved {m.throughput:.3g} of {rate:.3g} requests/s offered"
    return ""


class CapacityPlanner:
    """Ends stages when steady and plans the next load (see the module docstring)."""

    def __init__(
        self, search: CapacitySearch, slo: Slo, rule: StageRule, base_wall_s: float
    ) -> None:
        self.search = search
        self.slo = slo
        self.rule = rule.steering(slo)
        self.base = base_wall_s
        self.closed = search.settings.closed
        self.samples: dict[int, list[Sample]] = defaultdict(list)
        self.starts: dict[int, float] = {0: 0.0}  # stage -> virtual start (s)
        self.loads: dict[int, float] = {}
        self.measured: dict[int, StageMeasurement] = {}
        self.reasons: dict[int, str] = {}
        self._check_at = rule.min_requests
        #: stage -> when the last request of an earlier stage ended in it (wall s): its
        #: measurement starts after that backlog
        self.backlog_end: dict[int, float] = {}
        self._names: set[str] = set()
        #: stage -> the search's phase that planned it (only a confirmation is never screened)
        self.phases: dict[int, str] = {}

    def first_plan(self) -> StagePlan:
        load = self.search.next_load()
        assert load is not None
        return self._plan(0, load)

    def _plan(self, stage: int, load: float) -> StagePlan:
        self.loads[stage] = load
        self.phases[stage] = self.search.phase
        plan = capacity_plan(load, closed=self.closed, rule=self.rule)
        name, again = plan.name, 2
        while name in self._names:  # a load measured again keeps a name of its own
            name, again = f"{plan.name} #{again}", again + 1
        self._names.add(name)
        confirm = self.phases[stage] == CONFIRM
        return capacity_plan(load, closed=self.closed, rule=self.rule, name=name, confirm=confirm)

    # ---- StagePlanner -------------------------------------------------------------------
    def on_record(self, record: RequestRecord) -> None:
        """One record (the virtual driver's)."""
        self.add(
            record.stage, record.error_kind,
            Sample(record.start_wall_s, record.ok, record.ttft_s, record.tpot_s, record.e2e_s),
        )  # fmt: skip

    def on_row(self, row: tuple[Any, ...]) -> None:
        """One record row in ``RECORD_FIELDS`` order (the master's recorder keeps them so)."""
        self.add(
            row[COL_STAGE], row[COL_KIND],
            Sample(row[COL_START], bool(row[COL_OK]), row[COL_TTFT], row[COL_TPOT], row[COL_E2E]),
        )  # fmt: skip

    def add(self, stage: int, error_kind: str, sample: Sample) -> None:
        """A request of ``stage`` ended (the load test's own cancellations are left out)."""
        if error_kind in CLIENT_SIDE_KINDS or stage < 0:
            return
        current = max(self.starts)
        if stage < current and math.isfinite(sample.e2e_s):  # an earlier stage's tail
            end = sample.start_s + sample.e2e_s
            self.backlog_end[current] = max(self.backlog_end.get(current, 0.0), end)
        self.samples[stage].append(sample)

    def _measure(self, stage: int, now_s: float) -> StageMeasurement:
        m = measure(
            self.samples[stage], self.slo, load=self.loads[stage],
            stage_start_s=self.base + self.starts[stage], now_s=self.base + now_s,
            rule=self.rule, not_before_s=self.backlog_end.get(stage, 0.0),
        )  # fmt: skip
        if not self.closed:
            reason = overload_reason(m, self.loads[stage])
            if reason:
                m = measure(
                    self.samples[stage], self.slo, load=self.loads[stage],
                    stage_start_s=self.base + self.starts[stage], now_s=self.base + now_s,
                    rule=self.rule, overload=reason,
                    not_before_s=self.backlog_end.get(stage, 0.0),
                )  # fmt: skip
        return m

    def stage_over(self, stage: int, now_s: float, older_in_flight: Callable[[], int]) -> bool:
        n = len(self.samples[stage])
        if n < self._check_at:
            return False
        self._check_at = max(n + 1, math.ceil(n * LOOK_GROWTH))
        if older_in_flight() and now_s - self.starts[stage] < self.rule.max_duration_s:
            return False  # the server still serves an earlier stage's backlog
        m = self._measure(stage, now_s)
        phase = self.phases.get(stage)
        elapsed = now_s - self.starts[stage]
        # a closed loop's growing stage may end once clearly below every limit, and its stages
        # that only steer the search stop at the probe cap. An open loop's stages run the full
        # rule: screened, its short stages had not met a queue episode yet and passed loads
        # 1.5x its capacity; capped at 500 requests, it judged more loads by their point
        # estimates and still never came under the seed sweep's 730 requests
        # (bench/results/capacity_search.md)
        reason = stop_reason(
            m, self.rule, elapsed, screening=self.closed and phase == GROW,
            probe=self.closed and phase != CONFIRM,
        )  # fmt: skip
        if reason:
            self.reasons[stage] = reason
        return bool(reason)

    def stage_opened(self, stage: int, at_s: float) -> None:
        self.starts[stage] = at_s

    def idle_first(self, ended_stage: int) -> bool:
        """After a stage that failed, the next one waits until nothing is in flight: a queue
        left behind would be measured as the next load's."""
        m = self.measured.get(ended_stage)
        return m is not None and not m.passes

    def warmup_s(self, stage: int) -> float | None:
        m = self.measured.get(stage)
        return m.warmup_s if m is not None else None

    def next_plan(self, ended_stage: int, ended_s: float) -> StagePlan | None:
        if ended_stage not in self.measured:
            m = self._measure(ended_stage, ended_s)
            self.measured[ended_stage] = m
            if self.phases.get(ended_stage) == CONFIRM and m.state == UNCLEAR:
                m = self._pooled(ended_stage, m)
            self.reasons.setdefault(ended_stage, "time cap" if ended_s > 0 else "")
            self.search.record(m, ended_stage)
        load = self.search.next_load()
        if load is None:
            return None
        stage = ended_stage + 1
        self.starts[stage] = ended_s  # or later, after a pause (stage_opened says)
        self._check_at = self.rule.min_requests
        return self._plan(stage, load)

    def _pooled(self, stage: int, m: StageMeasurement) -> StageMeasurement:
        """An unclear confirmation judged on every stage that measured its load."""
        same = [k for k in sorted(self.measured) if k < stage and self.loads[k] == m.load]
        if not same:
            return m
        parts = [(self.measured[k], self.samples[k]) for k in same]
        return pool([*parts, (m, self.samples[stage])], self.slo, self.rule)

    def console_answer(self) -> str:
        """What the console says once the search ended: the answer and what it cost."""
        answer = self.search.answer()
        return (
            f"{answer.sentence()}\n"
            f"search: {answer.stages} stages, {answer.requests} requests "
            f"(slo {self.slo.describe()})"
        )

    def capacity_info(self) -> dict[str, Any]:
        """run.json's ``extra.capacity`` as of now."""
        return capacity_info(self.search, self.slo, self.rule, self.reasons)

    def run_info(self) -> dict[str, Any]:
        return {"capacity": self.capacity_info()}


def capacity_info(
    search: CapacitySearch, slo: Slo, rule: StageRule, reasons: dict[int, str]
) -> dict[str, Any]:
    """run.json's ``extra.capacity``: the answer, its steps, the SLOs and the rules."""
    answer = search.answer()
    s = search.settings
    out = answer.to_dict()
    steps: list[dict[str, Any]] = out["steps"]  # type: ignore[assignment]
    for step in steps:
        step["ended_by"] = reasons.get(step["stage"], "")
    out.update(
        sentence=answer.sentence(),
        slo=slo.describe(),
        done=search.next_load() is None,
        phase=search.phase,
        next_load=search.next_load(),
        settings={
            "start": s.start, "factor": s.factor, "resolution": s.resolution,
            "max_load": s.max_load, "width": rule.width, "min_requests": rule.min_requests,
            "max_requests": rule.max_requests, "max_duration_s": rule.max_duration_s,
            "confidence": rule.confidence, "screen": rule.screen,
        },
    )  # fmt: skip
    return out


def planner_from_args(args: Any, base_wall_s: float) -> CapacityPlanner:
    """``locust-llm virtual --find-capacity``'s planner from its flags."""
    settings, rule, slo = flags.from_args(args, args.slo, flat_gain=DEFAULT_THRESHOLDS.flat_gain)
    return CapacityPlanner(CapacitySearch(settings), slo, rule, base_wall_s)
