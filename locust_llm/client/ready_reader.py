"""Reads every ready stream of a worker in one pass: one ``epoll_wait``, one ``recvmsg`` a socket.

Waiting for a token the gevent way costs a wake-up per token: an I/O watcher started and
stopped, a ``Waiter``, a pass of the hub's loop, two greenlet switches; and a worker busy with
one stream reads the others late, so it also yields to the hub before parsing (two more
switches) to keep their stamps. That was most of a token's CPU (``bench/results/
cpu_per_token.md``). :class:`ReadyReader` keeps every connection of one gevent hub in an
edge-triggered epoll set of its own, registered once for the connection's life. When the set's
descriptor turns readable, the hub runs :meth:`ReadyReader.sweep`: one ``epoll_wait`` with no
timeout, then each ready connection's :meth:`~Readable.take_ready` (one ``recvmsg``: the bytes
and their kernel stamp, no parsing, at most one read held per connection), and only then a
direct switch to each greenlet that was parked waiting for those bytes. A batch of streams
that an engine step answered together is read, and stamped, before any of them is parsed.

A connection may record the read itself instead (``finish_in_hub``: a steady stream's plain
token event, appended to its timing as the stream loop would): then its greenlet stays parked,
and the token cost no switch at all.

A worker that finds itself late (a read's bytes waited in the kernel) sweeps from its own
greenlet instead of yielding: the bytes are read at once and the greenlets they wake are
switched to from the hub after it parks (:meth:`ReadyReader.sweep_from_worker`).
"""

from __future__ import annotations

import contextlib
import select
import sys
import time
from typing import Any, Protocol

from locust_llm.client.first_bytes import SWEEP_NS
from locust_llm.client.hub_local import for_this_hub, os_epoll

#: How often the parked reads' deadlines are checked: a read timeout fires up to this late.
CHECK_S = 0.02
_time_ns = time.time_ns
_EPOLLIN = getattr(select, "EPOLLIN", 1)
_EPOLLET = getattr(select, "EPOLLET", 1 << 31)
_NEVER = 1 << 62
#: OS thread id -> its :class:`ReadyReader`
_by_thread: dict[int, ReadyReader] = {}


class Readable(Protocol):
    """What :class:`ReadyReader` needs of a connection (``StampedConnection``)."""

    #: when the greenlet parked on it times out (time_ns; 0: never)
    deadline_ns: int
    #: the greenlet parked waiting for this connection's bytes (None: none)
    parked: Any

    def take_ready(self) -> Any:
        """The socket has new bytes: read them (or note it); the greenlet to wake, or None."""

    def still_waits(self, waiting: Any) -> bool:
        """``waiting`` still waits for this connection's bytes, and they are in."""

    def finish_in_hub(self) -> bool:
        """Those bytes are an event the connection records itself (its greenlet waits on)."""

    def fileno(self) -> int:
        """The socket's descriptor."""


class ReadyReader:
    """The connections of one gevent hub, read together as they become readable."""

    def __init__(self, hub: Any) -> None:
        self.hub = hub
        self.epoll = os_epoll()
        self.conns: dict[int, Readable] = {}
        #: the next sweep a worker may run from its own greenlet (``SWEEP_NS`` after the latest)
        self.next_ns = 0
        self.sweeps = 0  # epoll_waits made
        self.taken = 0  # sweeps' reads that woke a parked greenlet (not reads for busy ones)
        #: (connection, greenlet) pairs a worker's sweep read for, to wake from the hub
        self._woken: list[tuple[Readable, Any]] = []
        self._wake_callback: Any = None
        self.parked = 0  # greenlets parked on a read
        #: no parked read's deadline is earlier than this (time_ns); lowered as reads park,
        #: made exact by each check that passes it
        self.soonest_ns = _NEVER
        # not ref while no greenlet is parked: an idle registered connection keeps no loop alive
        self._watcher = hub.loop.io(self.epoll.fileno(), 1, ref=False)
        self._checker = hub.loop.timer(CHECK_S, CHECK_S, ref=False)

    def add(self, conn: Readable) -> None:
        """Read ``conn``'s socket with the others from now until :meth:`discard`."""
        fd = conn.fileno()
        try:
            self.epoll.register(fd, _EPOLLIN | _EPOLLET)
        except FileExistsError:  # a closed socket's number, reused before its entry went
            self.epoll.modify(fd, _EPOLLIN | _EPOLLET)
        if not self.conns:
            self._watcher.start(self._on_ready)
            self._checker.again(self._check_deadlines)
        self.conns[fd] = conn

    def discard(self, conn: Readable, fd: int) -> None:
        """``conn`` (descriptor ``fd``) is read no more; nothing if it was not registered."""
        if self.conns.get(fd) is not conn:
            return
        del self.conns[fd]
        with contextlib.suppress(OSError):  # closed already: the kernel dropped its entry
            self.epoll.unregister(fd)
        if not self.conns:
            self._watcher.stop()
            self._checker.stop()

    def park(self, conn: Readable, timeout_s: float | None) -> None:
        """``conn``'s greenlet switches out until its bytes are read, for ``timeout_s`` at most
        (None: no limit); the loop stays alive meanwhile."""
        if timeout_s is None:
            conn.deadline_ns = 0
        else:
            deadline = conn.deadline_ns = _time_ns() + int(timeout_s * 1e9)
            if deadline < self.soonest_ns:
                self.soonest_ns = deadline
        self.parked += 1
        if self.parked == 1:
            self._watcher.ref = True

    def unpark(self) -> None:
        """A parked greenlet is back (woken, timed out, or something was thrown in)."""
        self.parked -= 1
        if not self.parked:
            self._watcher.ref = False

    def _check_deadlines(self) -> None:
        """The checker's tick: a parked read past its deadline gets the socket's timeout error
        (``TimeoutError("timed out")``, what gevent's socket raises)."""
        now_ns = _time_ns()
        if now_ns < self.soonest_ns:
            return
        self.soonest_ns = _NEVER  # greenlets that park again meanwhile lower it
        soonest = _NEVER
        for conn in list(self.conns.values()):
            waiting = conn.parked
            deadline = conn.deadline_ns
            if waiting is None or not deadline:
                continue
            if now_ns >= deadline:
                try:
                    waiting.throw(TimeoutError("timed out"))
                except Exception:  # a raw greenlet that died of it: not the hub's concern
                    self.hub.handle_error(waiting, *sys.exc_info())
            elif deadline < soonest:
                soonest = deadline
        self.soonest_ns = min(self.soonest_ns, soonest)

    def sweep(self) -> list[tuple[Readable, Any]]:
        """Read every connection whose socket has new bytes; the (connection, greenlet) pairs
        whose waits those reads end."""
        self.next_ns = _time_ns() + SWEEP_NS
        self.sweeps += 1
        woken = []
        conns = self.conns
        for fd, _events in self.epoll.poll(0):
            conn = conns.get(fd)
            if conn is None:
                continue
            waiting = conn.take_ready()
            if waiting is not None:
                self.taken += 1
                woken.append((conn, waiting))
        return woken

    def sweep_from_worker(self) -> None:
        """A sweep from a worker's greenlet (it is late, or about to park): the reads are taken
        now, and their greenlets switched to from the hub once this one switches out."""
        woken = self.sweep()
        if woken:
            self._woken.extend(woken)
            if self._wake_callback is None:
                self._wake_callback = self.hub.loop.run_callback(self._wake_queued)

    def _wake_queued(self) -> None:
        self._wake_callback = None
        woken, self._woken = self._woken, []
        self._switch_to(woken)

    def _on_ready(self) -> None:
        """The hub: the set's descriptor is readable."""
        try:
            woken = self.sweep()
        except Exception:  # a watcher's callback must not raise into the hub
            self.hub.handle_error(self, *sys.exc_info())
            return
        self._switch_to(woken)

    def _switch_to(self, woken: list[tuple[Readable, Any]]) -> None:
        for conn, waiting in woken:
            # not timed out, killed or woken meanwhile, and not an ordinary token recorded
            # without the greenlet (``finish_in_hub``: no switch there and back)
            if conn.still_waits(waiting) and not conn.finish_in_hub():
                try:
                    waiting.switch()
                except Exception:  # a raw greenlet that died of it: not the hub's concern
                    self.hub.handle_error(waiting, *sys.exc_info())

    def close(self) -> None:
        self._watcher.close()
        self._checker.close()
        if self._wake_callback is not None:
            self._wake_callback.stop()
        self.epoll.close()
        self.conns.clear()


def ready_reader() -> ReadyReader:
    """This thread's :class:`ReadyReader` (a new one with a new hub)."""
    return for_this_hub(_by_thread, ReadyReader, lambda reader: not reader.conns)
