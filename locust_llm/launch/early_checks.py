"""``run``/``demo``'s checks of their own flags, before any process starts or request is sent.

Each check refuses one flag value as an ``InputError`` naming the flag (one line, exit 2):

* ``--host`` (:func:`check_url`, the plugin's check of every server URL too): an ``http://``
  or ``https://`` URL with a host part (other schemes were sent as HTTP before; one without a
  scheme is refused with the URL to write, never guessed);
* ``--timeout`` > 0 seconds; ``--stop-timeout`` >= 0 seconds (0: streams still running at the
  end are cancelled at once; Locust takes whole seconds, so it is rounded, at least 1);
* ``--roofline-model`` (:func:`locust_llm.options.validate.roofline_model`, the check of
  ``--llm-roofline-model`` too): a preset, a config.json / .gguf path or a cached Hugging Face
  id, an unknown name listing the close preset names;
* the largest stage concurrency against what the workers can hold (:func:`user_capacity`).
"""

from __future__ import annotations

import math
import resource
from collections.abc import Sequence

__all__ = [
    "check_concurrency",
    "check_timeouts",
    "check_url",
    "user_capacity",
    "worker_open_files",
]
from locust_llm.errors import InputError
from locust_llm.options.validate import http_url as check_url
from locust_llm.workloads.stages import StagePlan

#: descriptors a Locust worker keeps for itself (its master connection, logs, Python's own)
FD_RESERVE = 64
#: Locust raises a process's soft open-file limit to this when the hard limit allows
LOCUST_MIN_NOFILE = 10_000


def check_timeouts(timeout_s: float, stop_timeout_s: float) -> None:
    """``--timeout`` > 0 and ``--stop-timeout`` >= 0, both finite."""
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise InputError(f"--timeout {timeout_s:g}: expected a number of seconds > 0")
    if not (math.isfinite(stop_timeout_s) and stop_timeout_s >= 0):
        raise InputError(f"--stop-timeout {stop_timeout_s:g}: expected a number of seconds >= 0")


def worker_open_files() -> int:
    """The open-file limit a Locust worker started from this process runs with: this process's
    soft ``RLIMIT_NOFILE`` (inherited), raised by Locust to 10,000 when the hard limit allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    if soft == unlimited:
        return 1 << 30
    if soft < LOCUST_MIN_NOFILE and (hard == unlimited or hard >= LOCUST_MIN_NOFILE):
        return LOCUST_MIN_NOFILE
    return int(soft)


def user_capacity(workers: int, servers: int, open_files: int) -> int:
    """Users ``workers`` processes can hold at once: each user keeps one connection per server
    (one descriptor each), and each worker keeps :data:`FD_RESERVE` descriptors for itself."""
    per_worker = max(0, open_files - FD_RESERVE) // max(1, servers)
    return max(1, workers) * per_worker


def check_concurrency(
    plan: Sequence[StagePlan], *, workers: int, servers: int, open_files: int
) -> None:
    """The largest stage concurrency fits :func:`user_capacity`, else an InputError with the
    limit and where it comes from."""
    wanted = max((stage.concurrency or 0 for stage in plan), default=0)
    limit = user_capacity(workers, servers, open_files)
    if wanted > limit:
        raise InputError(
            f"--concurrency {wanted}: more users than the workers can hold (at most {limit}: "
            f"{max(1, workers)} worker(s) x ({open_files} open files, less {FD_RESERVE} of the "
            f"worker's own) / {max(1, servers)} connection(s) per user); raise the open-file "
            "limit (ulimit -n) or --workers"
        )
