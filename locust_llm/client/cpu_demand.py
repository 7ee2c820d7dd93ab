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


def _thread_wait(task: Path) -> tuple[str, float] | None:
    """A thread's start time (clock ticks since boot: with its id, what names it across id
    reuse) and its run-queue wait so far (s); None if it has gone or has no schedstat."""
    try:
        stat = (task / "stat").read_text()
        wait_ns = int((task / "schedstat").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # past the command name, which may hold spaces
    return (fields[19] if len(fields) > 19 else "", wait_ns / 1e9)


class ProcessSchedstat:
    """``read()``: this process's CPU time so far (every thread, ended ones included) plus the
    run-queue wait of every thread seen alive at a read (each one's wait up to its last read),
    in seconds; None where the kernel keeps no schedstat. A thread that starts and ends between
    two reads adds its run time (the process's CPU clock keeps it) but not its wait."""

    def __init__(self, tasks: Path = TASKS) -> None:
        self._tasks = tasks
        self._waits: dict[tuple[str, str], float] = {}  # (tid, start) -> wait at the last read
        self._ended_wait = 0.0

    def read(self) -> float | None:
        try:
            tids = os.listdir(self._tasks)
        except OSError:
            return None
        now: dict[tuple[str, str], float] = {}
        for tid in tids:
            seen = _thread_wait(self._tasks / tid)
            if seen is not None:
                now[(tid, seen[0])] = seen[1]
        if not now:
            return None
        alive = set(tids)
        read = {tid for tid, _ in now}
        for key, wait in self._waits.items():
            if key in now:
                continue
            if key[0] in alive and key[0] not in read:
                now[key] = wait  # alive, its files unread this time: its wait as last read
            else:
                self._ended_wait += wait  # gone, or its id now names a newer thread
        self._waits = now
        return time.process_time() + self._ended_wait + sum(now.values())


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
