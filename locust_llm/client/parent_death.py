"""The signal a Locust child of ``locust-llm run`` gets when ``run`` dies (pure: no gevent).

``run`` asks the kernel, for each master and worker it starts, for :data:`PARENT_DIED` when
it dies (``prctl(PR_SET_PDEATHSIG)``, :mod:`locust_llm.launch.orphans`). A signal of its own,
not SIGTERM, because the kernel sends it each time the child is handed to another parent: a
``run`` SIGKILLed while its threads exit one by one hands its children from thread to thread
first, so one death can arrive as two signals (seen here under load), and a second SIGTERM
means "cancel what is in flight". :mod:`locust_llm.client.lifecycle` acts on the first only:
the master (or single process) stops as after one SIGTERM; a worker leaves its stop to the
master (a worker stopping on its own while the master's stop reaches it ran two stops at once,
and Locust's second waited forever) and only exits by itself when no master quit it: once the
master is silent (it died too) or after :func:`worker_wait_s`.
"""

from __future__ import annotations

import signal

#: Locust ignores it; a ``run`` in a terminal never sends it to its children (each child has
#: a session of its own), so it means only "``run`` died"
PARENT_DIED = signal.SIGHUP


def worker_wait_s(stop_timeout_s: float, drain_grace_s: float, quit_grace_s: float) -> float:
    """How long an orphaned worker waits for its master's quit: the master's drain
    (``--stop-timeout`` and its grace) and its own quit, then as long again as the quit."""
    return stop_timeout_s + drain_grace_s + 2 * quit_grace_s
