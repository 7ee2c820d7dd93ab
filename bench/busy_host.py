"""A host loaded by other processes, for benchmarks that must hold on one (issue 26: the verdict
through the real client on a loaded host).

:func:`busy_host` starts ``n`` processes that each spin on a core (plain Python busy loops, each
ending by itself after ``limit_s``), yields, and ends them; :func:`load_average` reads the
1-minute load average so a result can say how loaded the host was.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

#: A busy loop that ends by itself: the benchmark's own time bound, whatever happens to it.
_SPIN = "import time\nend = time.time() + {limit}\nwhile time.time() < end:\n    pass\n"


@contextmanager
def busy_host(n: int, limit_s: float = 3600.0) -> Iterator[list[subprocess.Popen]]:
    """``n`` spinning processes (each in its own process group) for the block."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SPIN.format(limit=limit_s)], start_new_session=True
        )
        for _ in range(n)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def load_average() -> float:
    """The host's 1-minute load average."""
    return os.getloadavg()[0]
