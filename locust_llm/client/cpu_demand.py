"""CPU demand of this process: the share of wall time its threads ran or waited for a core.

Locust's CPU figure (``psutil`` percent) is the share of a core a process *got*. On a machine
shared with other busy processes, a load generator that wants a whole core may get 60% of one,
and then reads as "not CPU-bound" although every token waited for it. Linux's scheduler keeps,
per thread, the time spent running and the time spent runnable but waiting in the run queue
(``/proc/self/task/<tid>/schedstat``: run ns, wait ns, slices). Their sum over a window,
divided by the window, is the *demand*: 1.0 for one thread that never blocked on I/O, whatever
share it was given. A gevent worker does its own work on its main thread, but a locustfile's
native threads (gevent's thread pool, a library's workers) spend the same process's CPU, and
Locust's percent counts them: so the demand counts every thread too, the time they ran from the
process's CPU clock (threads that ended included) and the time they waited from each live
thread's schedstat. Elsewhere (no schedstat) the demand is NaN: no data, never 0.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path

TASKS = Path("/proc/self/task")


def _wait_s(stat: Path) -> float | None:
    """A thread's run-queue wait so far (s), None if it has gone or has no schedstat."""
    try:
        return int(stat.read_text().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


class ProcessSchedstat:
    """``read()``: this process's CPU time so far (every thread, ended ones included) plus the
    run-queue wait of every thread seen alive at a read (each one's wait up to its last read),
    in seconds; None where the kernel keeps no schedstat."""

    def __init__(self, tasks: Path = TASKS) -> None:
        self._tasks = tasks
        self._waits: dict[str, float] = {}
        self._ended_wait = 0.0

    def read(self) -> float | None:
        try:
            tids = os.listdir(self._tasks)
        except OSError:
            return None
        now: dict[str, float] = {}
        for tid in tids:
            wait = _wait_s(self._tasks / tid / "schedstat")
            if wait is not None:
                now[tid] = wait
        if not now:
            return None
        # a thread gone, or its id taken by a new thread (a wait that went back): what it had
        self._ended_wait += sum(w for tid, w in self._waits.items() if now.get(tid, -1.0) < w)
        self._waits = now
        return time.process_time() + self._ended_wait + sum(now.values())


def read_schedstat() -> float | None:
    """Run + run-queue wait of this process's threads so far (s); None where not available
    (one reading, no memory of threads that ended: :class:`ProcessSchedstat` keeps that)."""
    return ProcessSchedstat().read()


class CpuDemandMeter:
    """``sample()``: the demand ratio since the previous sample (NaN on the first or without
    schedstat). Clock and reader are injected for tests."""

    def __init__(
        self,
        read: Callable[[], float | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read if read is not None else ProcessSchedstat().read
        self._clock = clock
        self._last: tuple[float, float] | None = None

    def sample(self) -> float:
        busy, now = self._read(), self._clock()
        if busy is None:
            return math.nan
        last, self._last = self._last, (now, busy)
        if last is None or now <= last[0]:
            return math.nan
        return max(busy - last[1], 0.0) / (now - last[0])
