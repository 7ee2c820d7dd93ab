"""CPU demand of this process: the share of wall time its main thread ran or waited for a core.

Locust's CPU figure (``psutil`` percent) is the share of a core a process *got*. On a machine
shared with other busy processes, a load generator that wants a whole core may get 60% of one,
and then reads as "not CPU-bound" although every token waited for it. Linux's scheduler keeps,
per thread, the time spent running and the time spent runnable but waiting in the run queue
(``/proc/<pid>/schedstat``: run ns, wait ns, slices). Their sum over a window, divided by the
window, is the thread's *demand*: 1.0 when it never blocked on I/O, whatever share it was given.
A gevent worker does all its work on its main thread (the thread-group leader), whose schedstat
is the process's. Elsewhere (no schedstat) the demand is NaN: no data, never 0.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

SCHEDSTAT = Path("/proc/self/schedstat")


def read_schedstat(path: Path = SCHEDSTAT) -> float | None:
    """Run + run-queue wait of the main thread so far, in seconds; None where not available."""
    try:
        run_ns, wait_ns, *_ = path.read_text().split()
        return (int(run_ns) + int(wait_ns)) / 1e9
    except (OSError, ValueError):
        return None


class CpuDemandMeter:
    """``sample()``: the demand ratio since the previous sample (NaN on the first or without
    schedstat). Clock and reader are injected for tests."""

    def __init__(
        self,
        read: Callable[[], float | None] = read_schedstat,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
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
