"""Open-loop arrivals accounted (issue 15 item 6): every arrival the schedule draws is sent or
counted unsent with its reason (the user pool ran dry, the stage ended before its time, the run
stopped), per stage, and the counts travel worker -> master intact. Fake clock, no Locust."""

from __future__ import annotations

import random

import pytest

from locust_llm.client.gate import StageGate
from locust_llm.client.messages import RecordBatch
from locust_llm.client.recorder import Recorder
from locust_llm.workloads.arrivals import (
    POOL_RAN_DRY,
    RUN_STOPPED,
    STAGE_ENDED,
    ArrivalCounts,
    ArrivalSchedule,
    Constant,
)


class Clock:
    def __init__(self, now_s: float = 100.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


class Waiter:
    """Waiting moves the clock on; ``hook`` runs at each wait (a stage switch meanwhile)."""

    def __init__(self, clock: Clock, hook=None) -> None:
        self.clock, self.hook = clock, hook

    def wait(self, timeout_s: float) -> None:
        self.clock.now_s += timeout_s
        if self.hook:
            self.hook()

    def notify_all(self) -> None:
        pass


def never() -> bool:
    return False


def test_unclaimed_arrivals_due_before_the_stage_end_are_the_pool_running_dry() -> None:
    schedule = ArrivalSchedule(Constant(), random.Random(0))
    schedule.open(0, 10.0, start_s=0.0)  # 10/s for 2 s: 20 arrivals at 0.0, 0.1, ... 1.9
    claimed = [schedule.claim(now_s=0.0) for _ in range(5)]  # a pool of users took 5
    assert claimed == [0.0, 0.1, 0.2, 0.30000000000000004, 0.4]
    schedule.close(end_s=2.0)
    counts = schedule.counts[0]
    assert counts.drawn == 20 and counts.unsent[POOL_RAN_DRY] == 15
    assert counts.to_list() == [20, 15, 0, 0]
    assert ArrivalCounts.from_list(counts.to_list()) == counts
    schedule.close(end_s=99.0)  # closed: nothing more is drawn
    assert schedule.counts[0].drawn == 20


def test_the_gate_counts_each_reason_and_sent_plus_unsent_is_drawn() -> None:
    clock = Clock(100.0)
    switch_at: list[float] = []  # a stage switch the shape makes while a user waits

    def shape_tick() -> None:
        if switch_at and clock() >= switch_at[0]:
            gate.enter_stage(1, quota=None, rate_per_s=4.0, start_wall_s=switch_at.pop(),
                             open_loop=True)  # fmt: skip

    gate = StageGate(waiter=Waiter(clock, shape_tick), clock=clock, poll_s=0.05)
    gate.arrivals = Constant()  # 4/s: one arrival every 0.25 s
    gate.enter_stage(0, quota=None, rate_per_s=4.0, start_wall_s=100.0, open_loop=True)
    sent = {0: 0, 1: 0, 2: 0}

    def user(stage: int) -> bool:
        ok = gate.wait_for_arrival(gate.claim_arrival(never), stage, never)
        sent[stage] += ok
        return ok

    assert user(0) and user(0)  # 100.0 and 100.25 sent
    switch_at.append(100.4)
    assert not user(0)  # holds 100.5, but stage 0 ends at 100.4: not its arrival at all
    assert user(1)  # stage 1's first arrival, 100.4
    clock.now_s = 101.0  # every user busy: 100.65 and 100.9 come due, nobody claims them
    gate.enter_stage(2, quota=None, rate_per_s=4.0, start_wall_s=101.0, open_loop=True)
    assert user(2)  # 101.0
    held = gate.claim_arrival(never)  # 101.25: due, and still held when the run stops
    clock.now_s = 101.3
    gate.stop()
    assert not gate.wait_for_arrival(held, 2, never)
    counts = gate.schedule.counts
    assert [counts[s].to_list() for s in (0, 1, 2)] == [
        [2, 0, 0, 0],  # drawn, pool ran dry, stage ended, run stopped
        [3, 2, 0, 0],
        [2, 0, 0, 1],
    ]
    for stage, c in counts.items():
        assert c.drawn == sent[stage] + c.unsent_total, (stage, c)


def test_a_user_killed_while_waiting_leaves_its_arrival_counted() -> None:
    clock = Clock()
    gate = StageGate(waiter=Waiter(clock), clock=clock)
    gate.enter_stage(0, quota=None, rate_per_s=1.0, start_wall_s=clock() + 5, open_loop=True)
    when = gate.claim_arrival(never)

    def killed() -> bool:
        raise SystemExit  # what a greenlet kill looks like from inside the wait

    with pytest.raises(SystemExit):
        gate.wait_for_arrival(when, 0, killed)
    assert gate.schedule.counts[0].unsent[RUN_STOPPED] == 1


def test_the_master_sums_every_worker_s_last_counts() -> None:
    master = Recorder(is_worker=False)
    for name, drawn, dry in (("w1", 10, 4), ("w2", 7, 1)):
        worker = Recorder(is_worker=True)
        counts = {0: ArrivalCounts(drawn, {POOL_RAN_DRY: dry, STAGE_ENDED: 1, RUN_STOPPED: 0})}
        wire = worker.take_batch(name, counts).to_dict()
        master.receive_batch(RecordBatch.from_dict(wire))
    later = Recorder(is_worker=True).take_batch("w1", {0: ArrivalCounts(12)}).to_dict()
    master.receive_batch(RecordBatch.from_dict(later))  # a worker's newer counts replace its last
    total = master.arrivals_total({})
    assert total[0].drawn == 12 + 7 and total[0].unsent[POOL_RAN_DRY] == 1


def test_the_live_stats_list_each_stage_s_unsent_arrivals() -> None:
    from types import SimpleNamespace

    from locust_llm.rundir.layout import Stage
    from locust_llm.webui.data import stages_begun

    master = Recorder(is_worker=False)
    counts = {0: ArrivalCounts(9, {POOL_RAN_DRY: 4, STAGE_ENDED: 1, RUN_STOPPED: 0})}
    master.receive_batch(
        RecordBatch.from_dict(Recorder(is_worker=True).take_batch("w", counts).to_dict())
    )
    gate = StageGate(waiter=Waiter(Clock()))
    stages = [Stage(index=0, name="rate 8/s", start_wall_s=0.0), Stage(1, "c=4", 1.0)]
    begun = stages_begun(SimpleNamespace(recorder=master, gate=gate, stages=stages))
    assert begun[0]["unsent"] == {POOL_RAN_DRY: 4, STAGE_ENDED: 1, RUN_STOPPED: 0}
    assert begun[1]["unsent"] is None  # no arrivals counted: closed loop
