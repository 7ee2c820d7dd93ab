"""StageGate: which requests may start now, in closed-loop and open-loop stages (pure).

Closed loop with ``--llm-stage-requests``: each stage allows exactly its number of requests,
handed out as *permits*. In one process the gate holds the stage's quota itself; across workers
the master's gate holds the stage's permits (:meth:`StageGate.hold`) and a worker's gate asks
for more (the ``ask_permits`` callback) whenever it runs out, so the stage's requests go to
whichever workers have users free and no more than the stage's number start in all.

Open loop (``--llm-rate``): each process draws its own send times from an arrival process
(:mod:`locust_llm.workloads.arrivals`) at its share of the rate; a user claims the next slot and
waits for it. A slot whose stage ended before it came due is dropped, not sent in the next.
Every slot drawn is accounted (:attr:`StageGate.schedule`'s counts per stage): sent, or never
sent because the user pool ran dry, the stage ended before its time, or the run stopped.

The clock, the random generator and the way to wait are injected (Locust's runtime passes
gevent's event, tests a thread event or a fake), so this module imports neither gevent nor
Locust. Waiters sleep on the waiter and wake when the stage, the permits, the rate or the stop
flag change; they also look at ``stopping()`` (the user's own stop) every ``poll_s``.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from typing import Protocol

from locust_llm.workloads.arrivals import (
    RUN_STOPPED,
    STAGE_ENDED,
    ArrivalProcess,
    ArrivalSchedule,
    Poisson,
)

#: ``stopping()`` says whether the waiting user has been asked to stop.
Stopping = Callable[[], bool]


class Waiter(Protocol):
    """How a waiting user sleeps: until notified or ``timeout_s`` passed."""

    def wait(self, timeout_s: float) -> None: ...

    def notify_all(self) -> None: ...


class ThreadWaiter:
    """A :class:`Waiter` for threads (tests and non-gevent use): a fresh event per notify."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def wait(self, timeout_s: float) -> None:
        self._event.wait(timeout_s)

    def notify_all(self) -> None:
        event, self._event = self._event, threading.Event()
        event.set()


class StageGate:
    """Permits and open-loop slots of the current stage, for one process."""

    def __init__(
        self,
        *,
        waiter: Waiter,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        arrivals: ArrivalProcess | None = None,
        ask_permits: Callable[[int], None] | None = None,
        poll_s: float = 0.25,
    ) -> None:
        self.waiter = waiter
        self.clock = clock
        self.schedule = ArrivalSchedule(arrivals or Poisson(), rng or random.Random(0))
        self.ask_permits = ask_permits  # worker: ask the master for permits of this stage
        self.poll_s = poll_s
        self.stage = -1
        self.quota: int | None = None  # permits this process may still use (None: no limit)
        self.remaining: int | None = None  # master: the stage's permits not yet granted
        self.open_loop = False
        self.rate_per_s = 0.0
        self.stopped = False
        self.final = False  # no more permits will come once the quota is used
        self._asked = False
        self._exhausted = False
        #: users waiting in :meth:`acquire` for a permit now: a worker asks the master for this
        #: many, so the permits it holds are (all but momentarily) requests it has sent, and a
        #: lost worker's permits with no record are its requests with no record
        self.waiting = 0

    @property
    def rng(self) -> random.Random:
        """The open-loop schedule's random generator."""
        return self.schedule.rng

    @rng.setter
    def rng(self, rng: random.Random) -> None:
        self.schedule.rng = rng

    @property
    def arrivals(self) -> ArrivalProcess:
        """The open-loop arrival process."""
        return self.schedule.process

    @arrivals.setter
    def arrivals(self, process: ArrivalProcess) -> None:
        self.schedule.process = process

    # ---- stages ---------------------------------------------------------------------------
    def enter_stage(
        self,
        stage: int,
        *,
        quota: int | None,
        rate_per_s: float = 0.0,
        start_wall_s: float | None = None,
        open_loop: bool = False,
        final: bool = False,
    ) -> None:
        """Start ``stage`` here: ``quota`` permits (None: any number), this process's rate.

        ``final``: nothing will add permits (a debug run's few requests), so a user that finds
        none left stops instead of waiting for the next stage.
        """
        self.stage = stage
        self.quota = quota
        self.final = final
        self.open_loop = open_loop
        self.rate_per_s = rate_per_s
        start = self.clock() if start_wall_s is None else start_wall_s
        self.schedule.close(start)  # the last stage's unclaimed arrivals: the pool ran dry
        if open_loop and rate_per_s > 0:
            self.schedule.open(stage, rate_per_s, start)
        self._asked = False
        self._exhausted = False
        self.waiter.notify_all()

    def hold(self, stage: int, requests: int | None) -> None:
        """Master: ``stage`` is current and its ``requests`` permits are to be granted."""
        self.stage = stage
        self.remaining = requests

    def start(self) -> None:
        """A test starts (again): clear the stop flag and the last run's arrival counts."""
        self.stopped = False
        self.schedule.counts.clear()
        self.schedule.ends.clear()

    def stop(self) -> None:
        """The test stops: every waiter wakes and gets 'stop'; arrivals due but unclaimed are
        counted as unsent because the run stopped."""
        self.stopped = True
        self.schedule.close(self.clock(), RUN_STOPPED)
        self.waiter.notify_all()

    # ---- permits --------------------------------------------------------------------------
    def acquire(self, stopping: Stopping) -> bool:
        """Wait until a request may start in the current stage and take its permit.

        False: the user must stop (asked to, or the gate stopped) and sends nothing.
        """
        self.waiting += 1
        try:
            while self.quota is not None and self.quota <= 0:
                if self.stopped or self.final or stopping():
                    return False
                if self.ask_permits is not None and not self._asked and not self._exhausted:
                    self._asked = True
                    self.ask_permits(self.stage)
                self.waiter.wait(self.poll_s)
        finally:
            self.waiting -= 1
        if self.stopped or stopping():
            return False
        if self.quota is not None:
            self.quota -= 1
        return True

    def release(self, stage: int) -> None:
        """Give back a permit taken in ``stage`` for a request that was not sent after all."""
        if stage == self.stage and self.quota is not None:
            self.quota += 1
            self.waiter.notify_all()

    def receive_permits(self, stage: int, n: int) -> None:
        """Worker: the master's answer to ``ask_permits`` (0: the stage has none left)."""
        if stage != self.stage or self.quota is None:
            return
        self.quota += n
        self._asked = False
        self._exhausted = n == 0
        self.waiter.notify_all()

    def grant(self, stage: int, n: int) -> int:
        """Master: hand out up to ``n`` of the stage's remaining permits (0 for a stale stage)."""
        if stage != self.stage or self.remaining is None:
            return 0
        granted = max(min(n, self.remaining), 0)
        self.remaining -= granted
        return granted

    # ---- open loop ------------------------------------------------------------------------
    def claim_arrival(self, stopping: Stopping) -> float | None:
        """The next scheduled send time (wall clock); None in a closed-loop stage; NaN: stop.

        Between open-loop stages (rate 0) the user waits here until a rate arrives.
        """
        while self.open_loop and self.rate_per_s <= 0:
            if self.stopped or stopping():
                return math.nan
            self.waiter.wait(self.poll_s)
        if not self.open_loop:
            return None
        return self.schedule.claim(self.clock())

    def wait_for_arrival(self, when_wall_s: float, stage: int, stopping: Stopping) -> bool:
        """:meth:`wait_until` for a claimed arrival of ``stage``: False (and the arrival counted
        unsent, with its reason) when it will not be sent."""
        sent = False
        try:
            sent = self.wait_until(when_wall_s, stage, stopping)
        finally:  # an exception here (the user killed at a stop) leaves it unsent too
            if not sent:
                ended = self.stage != stage and not self.stopped  # else the run stopped
                self.schedule.drop(stage, STAGE_ENDED if ended else RUN_STOPPED, when_wall_s)
        return sent

    def wait_until(self, when_wall_s: float, stage: int, stopping: Stopping) -> bool:
        """Sleep until ``when_wall_s`` for a slot of ``stage``; False if the stage changed or
        the user must stop meanwhile (the slot is then dropped)."""
        while True:
            if self.stage != stage or self.stopped or stopping():
                return False
            delay = when_wall_s - self.clock()
            if delay <= 0:
                return True
            self.waiter.wait(min(delay, self.poll_s))
