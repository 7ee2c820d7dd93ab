"""The host to one measurement: a reader-writer lock across pytest-xdist's worker processes.

The suite runs three test processes, and tests that compare timings within one run bear the
others as load. A conformance measurement that compares our clock with another program's (a real
engine's own histograms) cannot: when the other process takes the cores, the engine's front end
falls behind its engine core and the client sees latency the engine never stamps (a fresh-clone CI
run measured our TTFT 582 ms above vLLM's at 4 users while the other stages agreed within 8 ms).

Every test holds the lock shared (:func:`shared`, around each test's run in conftest's
``pytest_runtest_protocol``, outside pytest-timeout's timer); a measurement
takes it exclusively (:func:`exclusive`), which waits for the other processes' tests under way
to end and holds their next ones until the measurement is done. A second lock, the gate, keeps a
stream of shared holders from starving the exclusive one. The lock files are named by the xdist
run, so two pytest sessions on one machine do not wait on each other.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _lock_path(name: str) -> Path:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", f"pid{os.getpid()}")
    return Path(tempfile.gettempdir()) / f"locust-llm-tests-{run}.{name}.lock"


def _locked(name: str, mode: int) -> int:
    """An open descriptor of lock ``name`` holding it in ``mode``; closing it releases it."""
    fd = os.open(_lock_path(name), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, mode)
    return fd


#: This process's shared hold of the host (its descriptor), if it has one: a measurement taken
#: inside a test or a fixture (where conftest holds the host shared) lets it go first, or its
#: own shared hold would keep its exclusive one waiting for ever (flock locks of two descriptors
#: of one file conflict even in one process).
_held: list[int] = []


@contextmanager
def shared() -> Iterator[None]:
    """Held by every test: many at once, none while a measurement runs."""
    gate = _locked("gate", fcntl.LOCK_SH)  # waits while a measurement waits or runs
    try:
        host = _locked("host", fcntl.LOCK_SH)
    finally:
        os.close(gate)
    _held.append(host)
    try:
        yield
    finally:
        _held.remove(host)
        os.close(host)


@contextmanager
def exclusive() -> Iterator[None]:
    """The host to this process alone: no other test runs until the block ends. This process's
    own shared hold, if any, is let go while it waits and taken back after."""
    for fd in _held:
        fcntl.flock(fd, fcntl.LOCK_UN)
    try:
        gate = _locked("gate", fcntl.LOCK_EX)
        try:
            host = _locked("host", fcntl.LOCK_EX)
            try:
                yield
            finally:
                os.close(host)
        finally:
            os.close(gate)
    finally:
        for fd in _held:
            fcntl.flock(fd, fcntl.LOCK_SH)
