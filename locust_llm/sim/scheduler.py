"""The real-time loop: engine steps on absolute deadlines, tokens handed out at each step's end.

The next deadline is the previous one plus the step's simulated duration, never "now plus the
duration", so the time the loop itself takes does not accumulate as drift: a late step is
followed by back-to-back steps until the schedule is caught up. The engine's clock is the
event loop's (``loop.time()``, monotonic). When the engine is idle the loop sleeps until
:meth:`RealTimeScheduler.wake` is called, and the schedule restarts from that moment.

Each step's *lag* is how late its tokens were handed out: the loop's time at delivery minus the
step's scheduled end (0 when on time). It is set on the step's ``StepResult.lag_s`` and
counted in :class:`~locust_llm.sim.metrics.LagStats`, so a host too busy to keep the schedule
shows on ``/metrics`` and in the step trace instead of reading as a slower GPU.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from locust_llm.sim.engine import Engine, StepResult
from locust_llm.sim.metrics import LagStats


class RealTimeScheduler:
    """Runs ``engine`` in real time; ``deliver(result)`` is called at each step's deadline."""

    def __init__(self, engine: Engine, deliver: Callable[[StepResult], None]) -> None:
        self.engine = engine
        self._deliver = deliver
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.late_steps = 0  # steps whose deadline had passed when they were due
        self.lag = LagStats()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def wake(self) -> None:
        """Tell an idle loop there is work."""
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        engine = self.engine
        deadline = loop.time()
        while True:
            if not engine.has_work:
                self._wake.clear()
                await self._wake.wait()
                deadline = max(deadline, loop.time())
                continue
            result = engine.step(deadline)
            if not result.emitted and not result.failed and result.duration_s == 0:
                await asyncio.sleep(
                    0.001
                )  # nothing could run (cannot happen with fitting requests)
                deadline = loop.time()
                continue
            deadline = result.end_s
            delay = deadline - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                self.late_steps += delay < -0.001
                await asyncio.sleep(0)  # let the front read and write between steps
            result.lag_s = max(0.0, loop.time() - deadline)
            self.lag.observe(result.lag_s)
            self._deliver(result)
