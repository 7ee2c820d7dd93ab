"""The stage gate in-process: permits across workers, arrivals, stale slots, stop (no Locust).

The gate takes its clock, random generator and way of waiting as arguments, so these tests
drive it with a fake clock and a waiter that advances that clock, or with real threads.
"""

from __future__ import annotations

import itertools
import math
import random
import threading
import time
from collections import deque

import pytest

from locust_llm.client.gate import StageGate, ThreadWaiter
from locust_llm.client.messages import PermitAsk, PermitGrant, StageMessage
from locust_llm.workloads.arrivals import (
    POOL_RAN_DRY,
    RUN_STOPPED,
    STAGE_ENDED,
    Constant,
    Gamma,
    Poisson,
    arrival_process,
)


class FakeClock:
    def __init__(self, start_s: float = 1000.0) -> None:
        self.now_s = start_s

    def __call__(self) -> float:
        return self.now_s


class AdvancingWaiter:
    """Waiting moves the fake clock on by the timeout; notifications are counted."""

    def __init__(self, clock: FakeClock, on_wait: object = None) -> None:
        self.clock = clock
        self.waits: list[float] = []
        self.notified = 0
        self.on_wait = on_wait

    def wait(self, timeout_s: float) -> None:
        self.waits.append(timeout_s)
        self.clock.now_s += timeout_s
        if callable(self.on_wait):
            self.on_wait()

    def notify_all(self) -> None:
        self.notified += 1


def never() -> bool:
    return False


class Cluster:
    """A master gate and worker gates joined by an in-memory message queue (typed payloads
    through their dict form, as on the wire)."""

    def __init__(self, workers: int, users_per_worker: int) -> None:
        self.clock = FakeClock()
        self.queue: deque[tuple[str, str, dict]] = deque()
        self.master = StageGate(waiter=AdvancingWaiter(self.clock), clock=self.clock)
        self.users = users_per_worker
        self.workers: dict[str, StageGate] = {}
        for i in range(workers):
            name = f"w{i}"
            self.workers[name] = StageGate(
                waiter=AdvancingWaiter(self.clock, on_wait=self.deliver),
                clock=self.clock,
                ask_permits=lambda stage, name=name: self.ask(name, stage),
            )
        self.asks = 0

    def ask(self, worker: str, stage: int) -> None:
        self.asks += 1
        self.queue.append(("master", "ask", PermitAsk(worker, stage, self.users).to_dict()))

    def start_stage(self, stage: int, requests: int) -> None:
        self.master.hold(stage, requests)
        for gate in self.workers.values():
            msg = StageMessage.from_dict(
                StageMessage(stage=stage, quota=0, workers=len(self.workers)).to_dict()
            )
            gate.enter_stage(msg.stage, quota=msg.quota)

    def deliver(self) -> None:
        while self.queue:
            to, _kind, data = self.queue.popleft()
            if to == "master":
                ask = PermitAsk.from_dict(data)
                n = self.master.grant(ask.stage, ask.n)
                self.queue.append((ask.worker, "grant", PermitGrant(ask.stage, n).to_dict()))
            else:
                grant = PermitGrant.from_dict(data)
                self.workers[to].receive_permits(grant.stage, grant.n)


def test_a_stage_of_n_requests_starts_exactly_n_across_two_workers() -> None:
    cluster = Cluster(workers=2, users_per_worker=3)
    cluster.start_stage(0, requests=10)
    started = {"w0": 0, "w1": 0}
    give_up_after = {"w0": 0, "w1": 0}
    # users of both workers take permits in turn until the stage has none left
    for _ in range(40):
        for name, gate in cluster.workers.items():
            if give_up_after[name] > 3:
                continue
            waits_before = len(gate.waiter.waits)  # type: ignore[attr-defined]
            stop_when_waiting_long = lambda g=gate, w=waits_before: len(g.waiter.waits) - w > 8  # noqa: E731
            if gate.acquire(stop_when_waiting_long):
                started[name] += 1
            else:
                give_up_after[name] += 1
    assert started["w0"] + started["w1"] == 10
    assert started["w0"] > 0 and started["w1"] > 0  # whoever has users free gets permits
    assert cluster.master.remaining == 0
    # a worker that heard "none left" stops asking until the next stage
    asks = cluster.asks
    assert not cluster.workers["w0"].acquire(lambda: len(cluster.workers["w0"].waiter.waits) > 50)  # type: ignore[attr-defined]
    assert cluster.asks == asks
    cluster.start_stage(1, requests=4)
    assert cluster.workers["w0"].acquire(never)
    assert cluster.master.remaining == 4 - 3  # w0 asked for as many as it has users


def test_a_stale_permit_request_gets_nothing_and_a_late_grant_is_ignored() -> None:
    clock = FakeClock()
    master = StageGate(waiter=AdvancingWaiter(clock), clock=clock)
    master.hold(2, 5)
    assert master.grant(1, 3) == 0  # asked during stage 1, answered in stage 2
    assert master.grant(2, 3) == 3 and master.grant(2, 3) == 2 and master.grant(2, 3) == 0
    worker = StageGate(waiter=AdvancingWaiter(clock), clock=clock)
    worker.enter_stage(3, quota=0)
    worker.receive_permits(2, 4)  # a grant for the stage before
    assert worker.quota == 0


def test_a_single_process_stage_and_a_released_permit() -> None:
    clock = FakeClock()
    gate = StageGate(waiter=AdvancingWaiter(clock), clock=clock)
    gate.enter_stage(0, quota=2)
    assert gate.acquire(never) and gate.acquire(never)
    gate.release(0)  # a request not sent after all
    assert gate.acquire(never)
    gate.release(7)  # a permit of another stage is not given back
    assert gate.quota == 0
    gate.enter_stage(1, quota=1, final=True)
    assert gate.acquire(never)
    assert not gate.acquire(never)  # final: none will come, so the user stops at once
    assert gate.waiter.waits == []  # type: ignore[attr-defined]


def test_open_loop_slots_follow_the_seeded_arrival_process_on_a_fake_clock() -> None:
    clock = FakeClock(5000.0)
    gate = StageGate(
        waiter=AdvancingWaiter(clock), clock=clock, rng=random.Random(7), arrivals=Poisson()
    )
    gate.enter_stage(0, quota=None, rate_per_s=4.0, start_wall_s=5000.0, open_loop=True)
    slots = [gate.claim_arrival(never) for _ in range(2000)]
    assert slots[0] == 5000.0
    gaps = [b - a for a, b in itertools.pairwise(slots)]  # type: ignore[operator]
    assert sum(gaps) / len(gaps) == pytest.approx(0.25, rel=0.06)
    replay = random.Random(7)
    assert gaps[:5] == pytest.approx([replay.expovariate(4.0) for _ in range(5)])
    # a user waits for its slot on the fake clock, then sends
    gate.enter_stage(1, quota=None, rate_per_s=2.0, start_wall_s=clock() + 1.0, open_loop=True)
    when = gate.claim_arrival(never)
    assert when == pytest.approx(clock() + 1.0)
    assert gate.wait_until(when, 1, never)  # type: ignore[arg-type]
    assert clock() >= when  # type: ignore[operator]


def test_a_stage_change_drops_a_slot_still_waiting() -> None:
    clock = FakeClock()
    gate: StageGate

    def next_stage_meanwhile() -> None:
        if clock() > 1000.5 and gate.stage == 0:
            gate.enter_stage(1, quota=None, rate_per_s=1.0, open_loop=True)

    gate = StageGate(waiter=AdvancingWaiter(clock, on_wait=next_stage_meanwhile), clock=clock)
    gate.enter_stage(0, quota=None, rate_per_s=0.5, start_wall_s=1002.0, open_loop=True)
    when = gate.claim_arrival(never)
    assert when == 1002.0
    assert not gate.wait_until(when, 0, never)  # stage 1 began at ~1000.5: slot dropped
    assert clock() < 1002.0


def test_an_arrival_belongs_to_the_stage_whose_window_holds_its_time() -> None:
    # idle users claim their next arrival ahead of time: at a stage's end they hold arrivals
    # drawn for after it. Those were never due in its window: not its arrivals, nor unsent
    # ("70 of 143 arrivals unsent (stage ended)" at 25% of capacity, where all 73 of the
    # window were sent); one due inside the window and not sent is counted unsent
    clock = FakeClock(0.0)
    gate = StageGate(
        waiter=AdvancingWaiter(clock), clock=clock, rng=random.Random(1), arrivals=Constant()
    )
    gate.enter_stage(0, quota=None, rate_per_s=2.0, start_wall_s=0.0, open_loop=True)
    held = [gate.claim_arrival(never) for _ in range(10)]  # 0.0, 0.5, ... 4.5
    for when in held[:4]:  # 0.0-1.5: sent in the window
        clock.now_s = max(clock.now_s, when)  # type: ignore[type-var]
        assert gate.wait_for_arrival(when, 0, never)  # type: ignore[arg-type]
    clock.now_s = 1.8
    gate.enter_stage(1, quota=None)  # stage 0's window is [0, 1.8)
    for when in held[4:]:  # 2.0-4.5: drawn for after the window ended
        assert not gate.wait_for_arrival(when, 0, never)  # type: ignore[arg-type]
    counts = gate.schedule.counts[0]
    assert counts.drawn == 4 and counts.unsent_total == 0
    # due inside the window but not sent (the stage ended while its user was late)
    gate.enter_stage(2, quota=None, rate_per_s=2.0, start_wall_s=10.0, open_loop=True)
    late = gate.claim_arrival(never)
    clock.now_s = 10.2
    gate.enter_stage(3, quota=None)
    assert not gate.wait_for_arrival(late, 2, never)  # type: ignore[arg-type]
    assert gate.schedule.counts[2].drawn == 1
    assert gate.schedule.counts[2].unsent == {POOL_RAN_DRY: 0, STAGE_ENDED: 1, RUN_STOPPED: 0}


def test_between_open_loop_stages_users_wait_for_a_rate_and_closed_loop_has_no_slots() -> None:
    clock = FakeClock()
    calls = []

    def rate_arrives() -> None:
        calls.append(1)
        if len(calls) == 3:
            gate.enter_stage(4, quota=None, rate_per_s=10.0, open_loop=True)

    gate = StageGate(waiter=AdvancingWaiter(clock, on_wait=rate_arrives), clock=clock)
    gate.enter_stage(3, quota=None, rate_per_s=0.0, open_loop=True)
    assert gate.claim_arrival(never) == pytest.approx(clock())
    assert len(calls) == 3 and gate.stage == 4
    gate.enter_stage(5, quota=None)
    assert gate.claim_arrival(never) is None
    # a user asked to stop while it waits for a rate gets NaN (send nothing)
    gate.enter_stage(6, quota=None, rate_per_s=0.0, open_loop=True)
    assert math.isnan(gate.claim_arrival(lambda: True))  # type: ignore[arg-type]


def test_stop_wakes_every_waiting_thread_at_once() -> None:
    gate = StageGate(waiter=ThreadWaiter(), poll_s=30.0)  # only a notify can wake them in time
    gate.enter_stage(0, quota=0)
    results: list[bool] = []
    threads = [
        threading.Thread(target=lambda: results.append(gate.acquire(never))) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    time.sleep(0.2)
    assert not results  # all three are waiting for permits
    started = time.monotonic()
    gate.stop()
    for thread in threads:
        thread.join(5.0)
    assert results == [False, False, False]
    assert time.monotonic() - started < 2.0
    gate.start()  # a new test: the gate lets requests through again
    gate.enter_stage(1, quota=1)
    assert gate.acquire(never)


def test_arrival_processes_have_the_right_mean_and_spread() -> None:
    rng = random.Random(3)
    for process, cv in ((Poisson(), 1.0), (Gamma(4.0), 0.5), (Gamma(0.25), 2.0), (Constant(), 0)):
        gaps = [process.gap_s(5.0, rng) for _ in range(20_000)]
        mean = sum(gaps) / len(gaps)
        sd = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5
        assert mean == pytest.approx(0.2, rel=0.05), process
        assert sd / mean == pytest.approx(cv, abs=0.08), process
    assert arrival_process(1.0) == Poisson()
    assert arrival_process(0.0) == Constant()
    assert arrival_process(2.0) == Gamma(2.0)
