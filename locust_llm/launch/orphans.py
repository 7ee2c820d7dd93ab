"""Children that die with ``locust-llm run``: no master or worker left loading a server.

``run`` and ``demo`` start the Locust master, its workers and (demo) the simulator each in a
process group of its own, so a Ctrl+C in the terminal reaches ``run`` alone and it can stop
them in order. That also means a SIGKILL of ``run`` (the OOM killer, ``kill -9``, a CI job
cancelled hard) reaches none of them. On Linux each child therefore asks the kernel, between
fork and exec, for a signal when its parent dies (``prctl(PR_SET_PDEATHSIG)``): the simulator
gets SIGTERM; the master and workers get ``client.parent_death.PARENT_DIED``, on which the master
stops as after one SIGTERM (the load stops, the run dir is written as ``interrupted``) and each
worker is stopped by its master. The kernel sends it however the parent dies (once per parent
thread the child is handed to: it may come twice), and it survives ``exec``; a parent that died
before the ``prctl`` is caught by comparing the parent pid afterwards.
Elsewhere (no ``prctl``) nothing is set, and only ``run``'s own clean-up stops the children.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(signum: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen`: the child gets ``signum`` when this
    process dies (Linux); None where the kernel offers no such request."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:  # runs in the child, between fork and exec
        prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), signum)

    return preexec
