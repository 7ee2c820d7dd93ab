"""Reads a response's first bytes as soon as they arrive, wherever the worker is busy.

A burst of streams starting together gets its first tokens within a few milliseconds; the
worker then parses them and records them one stream at a time, and gevent's hub polls the
sockets only between batches of up to 50 runnable greenlets. A stream whose first token came
just after a poll waits for the next one, and when that is more than a token gap away its
second token is in the receive queue too: the kernel has merged the two segments and kept the
later stamp (``tcp_try_coalesce``), so the first token is stamped a token gap late.

:class:`FirstBytes` keeps the connections waiting for a response's first bytes in an epoll set
of its own (one per gevent hub). Its :meth:`~FirstBytes.sweep` (one ``epoll_wait`` with no
timeout) takes what arrived on each ready socket with one ``recvmsg`` (the bytes and their
kernel stamp: no parsing) into the connection, and queues a switch back to its greenlet, which
parses later. It runs from the hub (a libev watcher on the epoll set's own descriptor: an idle
worker reads a first byte at once) and from the worker's own reads, waits, late reads and request
starts, at most once per :data:`SWEEP_NS` (a busy worker reads the first bytes between two
other streams' reads, not when the hub next polls). Each sweep also tells each connection it
did not find ready that its socket was empty then: the earliest its first bytes can have
arrived, the lower end of a stamp the kernel merged anyway (a worker stalled outside Python, by
the OS or by blocking code).
"""

from __future__ import annotations

import contextlib
import select
import sys
import time
from typing import Any, Protocol

from locust_llm.client.hub_local import for_this_hub, os_epoll

#: A busy worker sweeps at most this often (ns of ``time.time_ns``) from its own reads.
SWEEP_NS = 500_000
_time_ns = time.time_ns
_EPOLLIN = getattr(select, "EPOLLIN", 1)
#: OS thread id -> its :class:`FirstBytes`
_by_thread: dict[int, FirstBytes] = {}


class Waiting(Protocol):
    """What :class:`FirstBytes` needs of a connection (``StampedConnection``)."""

    def take_first(self, empty_ns: int) -> None:
        """Read what arrived (the socket is readable), keep it and wake the reader."""

    def fileno(self) -> int:
        """The socket's descriptor."""


class FirstBytes:
    """The connections of one gevent hub waiting for a response's first bytes."""

    def __init__(self, hub: Any) -> None:
        self.hub = hub
        self.epoll = os_epoll()
        #: fd -> (connection, time_ns when it joined, the latest time_ns its socket was known
        #: empty before it joined)
        self.waiting: dict[int, tuple[Waiting, int, int]] = {}
        #: time_ns just before the latest ``epoll_wait``: a waiting socket it did not report
        #: was empty then
        self.polled_ns = 0
        #: the next sweep a worker's read may run (``SWEEP_NS`` after the latest)
        self.next_ns = 0
        self.sweeps = 0  # epoll_waits made
        self.taken = 0  # first reads taken by a sweep
        self._watcher = hub.loop.io(self.epoll.fileno(), 1)  # libev: readable

    def add(self, conn: Waiting, empty_ns: int) -> None:
        """``conn`` waits for its first bytes (its greenlet is about to switch out); its socket
        held none of them at ``empty_ns``."""
        fd = conn.fileno()
        try:
            self.epoll.register(fd, _EPOLLIN)
        except FileExistsError:  # a closed socket's number, reused before its entry went
            self.epoll.modify(fd, _EPOLLIN)
        if not self.waiting:
            self._watcher.start(self._on_ready)
        self.waiting[fd] = (conn, _time_ns(), empty_ns)

    def discard(self, conn: Waiting, fd: int) -> None:
        """``conn`` (descriptor ``fd``) waits no longer; nothing if it was not waiting."""
        entry = self.waiting.get(fd)
        if entry is None or entry[0] is not conn:
            return
        del self.waiting[fd]
        with contextlib.suppress(OSError):  # closed already: the kernel dropped its entry
            self.epoll.unregister(fd)
        if not self.waiting:
            self._watcher.stop()

    def sweep(self) -> None:
        """Take the first bytes of every waiting connection whose socket is readable."""
        now_ns = _time_ns()
        self.next_ns = now_ns + SWEEP_NS
        polled_ns, self.polled_ns = self.polled_ns, now_ns
        self.sweeps += 1
        ready = self.epoll.poll(0)
        for fd, _events in ready:
            entry = self.waiting.get(fd)
            if entry is None:
                continue
            conn, joined_ns, empty_ns = entry
            self.discard(conn, fd)
            self.taken += 1
            # the socket was empty before it joined (``empty_ns``) and at every sweep since
            # that did not report it: the previous sweep's time if it was waiting by then
            if polled_ns > joined_ns:
                empty_ns = polled_ns
            conn.take_first(empty_ns)

    def _on_ready(self) -> None:
        try:
            self.sweep()
        except Exception:  # a watcher's callback must not raise into the hub
            self.hub.handle_error(self, *sys.exc_info())

    def close(self) -> None:
        self._watcher.close()
        self.epoll.close()
        self.waiting.clear()


def first_bytes() -> FirstBytes:
    """This thread's :class:`FirstBytes` (a new one with a new hub)."""
    return for_this_hub(_by_thread, FirstBytes, lambda fb: not fb.waiting)
