"""The kernel-receive-timestamp transport: each token timed by when its bytes reached the host.

On Linux the kernel stamps every arriving TCP segment when ``SO_TIMESTAMPNS`` is set on the
socket; ``recvmsg`` hands back, as ancillary data, the stamp of the latest segment the read
consumed (segments that queued up while the reader was busy are merged by the kernel and keep
the latest stamp). :class:`StampedConnection` reads that way and converts the stamp
(``CLOCK_REALTIME``) to the ``perf_counter`` clock the records use, from the two clocks read
side by side before each request is written: ``arrival = base_perf + (stamp - base_ns)``. A
line is stamped with the read that completed it, so a token's time no longer includes how long
the worker took to get to it; the user-space time is kept beside it as the client delay.

Two things keep it cheap and its first tokens exact. ``TCP_INQ`` makes each read also say how
many bytes it left queued: after a read that emptied the queue (one token per read, the steady
state) the next one first waits for the socket to become readable, instead of a ``recvmsg``
that could only fail with EAGAIN (a syscall and an exception per token). And a read that finds
the worker more than :data:`LATE_S` late hands it back to gevent's hub before its bytes are
parsed: the hub then reads, and so stamps, the other sockets already readable before it
returns to parse any of them, so a busy worker reads each stream's next bytes before the token
after them arrives and the kernel merges the two (``bench/results/kernel_timestamps.md``). An
idle worker is never late and pays nothing for it. Per read the hot path takes one user-space
clock (``time_ns``); the clock pair that maps stamps to ``perf_counter`` is read per request.

A response's first bytes are not left to the worker's turn: :mod:`locust_llm.client.first_bytes`
reads them as soon as the hub polls or any connection's read, wait or request start sweeps
(at most every 0.5 ms), so a busy worker's first tokens keep their own stamps. Where a first
token was merged anyway (the worker did not run for a token gap), :attr:`StampedConnection.
earliest_s` is the latest time the socket was known empty before the read: the record's
``ttft_error_bound_s``.

:class:`KernelTransport` is :class:`~locust_llm.client.transport.Transport` with its own
HTTP/1.1 reader (:mod:`locust_llm.client.http11`) for ``http://`` servers; ``https://`` servers
stay on geventhttpclient (TLS records are decrypted in user space, after the kernel stamp, and
Python's ``SSLSocket`` has no ``recvmsg``), as does everything off Linux.
:func:`select_transport` maps ``--llm-transport`` (``auto``, ``kernel``, ``ghc``) to a class.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import socket
import struct
import sys
import time
from time import perf_counter
from typing import Any
from urllib.parse import urlsplit

import gevent
from gevent.exceptions import ConcurrentObjectUseError
from greenlet import getcurrent

from locust_llm.client.first_bytes import FirstBytes, first_bytes
from locust_llm.client.http11 import RECV_BYTES, Http11Client, Http11Connection
from locust_llm.client.transport import Transport
from locust_llm.errors import InputError

#: Linux's ``SO_TIMESTAMPNS`` (= ``SCM_TIMESTAMPNS``); Python's socket module does not name it.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
#: Linux's ``TCP_INQ`` (= ``TCP_CM_INQ``, Linux >= 4.18): each read also says how many bytes it
#: left in the receive queue.
TCP_INQ = getattr(socket, "TCP_INQ", 36)
_TIMESPEC = struct.Struct("@qq")  # struct timespec: two 64-bit longs
_TIMESPEC_BYTES = _TIMESPEC.size
_unpack_timespec = _TIMESPEC.unpack
_time_ns = time.time_ns
#: a clock pair whose perf_counter bracket is this narrow is taken at once (else the tightest
#: of ``_PAIR_TRIES``): a pause between the two reads would shift every stamp of the request
_PAIR_TIGHT_S = 20e-6
_PAIR_TRIES = 3
_INQ = struct.Struct("@i")
_NOTHING_QUEUED = _INQ.pack(0)
_ANC_BYTES = (
    socket.CMSG_SPACE(_TIMESPEC_BYTES) + socket.CMSG_SPACE(_INQ.size)
    if hasattr(socket, "CMSG_SPACE")
    else 0
)
_SOL_SOCKET, _SOL_TCP = socket.SOL_SOCKET, socket.IPPROTO_TCP

#: The ``--llm-transport`` choices.
TRANSPORT_CHOICES = ("auto", "kernel", "ghc")

#: A read whose bytes waited longer than this in the kernel finds the worker busy: other
#: streams' bytes are likely waiting too, and are read before this read is parsed.
LATE_S = 0.001
LATE_NS = round(LATE_S * 1e9)
#: ... unless the read holds more SSE events than this (a response's first read holds two: the
#: role and the first token): the worker is already a token gap behind this stream, and so
#: behind the others that became readable with it; the yield would save no stamp.
MERGED_EVENTS = 2
#: The sweep reads a response's first bytes until they held :data:`MERGED_EVENTS` SSE data
#: lines, or for this many reads (a body that is no event stream).
FIRST_READS = 4


def read_ancillary(ancdata: list[tuple[int, int, bytes]]) -> tuple[int, bool]:
    """A read's ancillary data -> (its receive stamp in ``CLOCK_REALTIME`` ns, 0 if none; True
    when it says the read left nothing queued)."""
    stamp_ns, drained = 0, False
    for level, kind, cdata in ancdata:
        if kind == SO_TIMESTAMPNS and level == _SOL_SOCKET and len(cdata) >= _TIMESPEC_BYTES:
            sec, nsec = _TIMESPEC.unpack_from(cdata)
            stamp_ns = sec * 1_000_000_000 + nsec
        elif kind == TCP_INQ and level == _SOL_TCP:
            drained = cdata == _NOTHING_QUEUED
    return stamp_ns, drained


def clock_pair() -> tuple[int, float]:
    """``CLOCK_REALTIME`` (ns, the kernel stamps' clock) and ``perf_counter`` (s, the records'
    clock) read side by side: the realtime read between two perf_counter reads, at their
    midpoint, the tightest bracket of up to ``_PAIR_TRIES``. Read once, in that order, a pause
    between the two (a preempted worker on a busy host) shifted every kernel stamp of the
    request later by its length, past the user-space reads that followed them."""
    best_width, best = math.inf, (0, 0.0)
    for _ in range(_PAIR_TRIES):
        before = perf_counter()
        ns = _time_ns()
        after = perf_counter()
        if after - before < best_width:
            best_width, best = after - before, (ns, (before + after) / 2)
        if best_width <= _PAIR_TIGHT_S:
            break
    return best


class StampedConnection(Http11Connection):
    """A connection whose reads carry the kernel's receive stamp (``arrival_s``).

    Per read it takes one user-space clock (``time_ns``, the kernel stamp's own clock: the
    late-read check is one integer comparison) and converts the stamp to ``perf_counter`` time
    with the pair of clocks read side by side once per request (:meth:`start_request`):
    ``CLOCK_REALTIME`` and the monotonic clock are slewed alike and differ only when the system
    time is set. ``reads``, ``late_yields`` and ``unstamped_reads`` count what the reads did.
    """

    def __init__(self, sock: Any) -> None:
        super().__init__(sock)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        with contextlib.suppress(OSError):  # an older kernel: no queue length with each read
            sock.setsockopt(_SOL_TCP, TCP_INQ, 1)
        self.reads = 0  # reads that returned
        self.late_yields = 0  # late reads that handed the worker to the hub before parsing
        self.unstamped_reads = 0  # reads that came back without a stamp
        self.first_reads = 0  # reads of a response's first bytes taken by a sweep
        #: the latest read emptied the receive queue: wait for bytes before the next read
        #: (no recvmsg that can only say EAGAIN)
        self.drained = False
        self._base_ns = 0  # time_ns() read beside ...
        self._base_s = 0.0  # ... perf_counter(): the two clocks, side by side
        self._now_ns = 0  # time_ns() when the latest read returned
        self._hub: Any = None  # this thread's gevent hub, on the first late read
        #: time_ns when the socket was last known to hold no unread byte (the request's start,
        #: a read that emptied the queue, a sweep that found it not ready) ...
        self._empty_ns = 0
        #: ... and its value before the latest read: that read's bytes arrived after it
        self._low_ns = 0
        #: the response's first events are still to come: its reads go through the sweep
        #: (:mod:`locust_llm.client.first_bytes`), until :data:`MERGED_EVENTS` SSE data lines
        #: are in (the role and the first token) or after :data:`FIRST_READS` reads
        self._first = True
        self._first_events = self._first_reads = 0
        #: what a sweep read for this connection (bytes, ancillary data, time_ns after the
        #: read), or the error it raised, until the reader takes it
        self._early: Any = None
        self._parked: Any = None  # the greenlet waiting for the sweep (None: none)
        self._wake: Any = None  # the queued switch back to it
        self._fb: FirstBytes | None = None
        self._fd = sock.fileno() if hasattr(sock, "fileno") else -1
        self.start_request()
        # a gevent socket's non-blocking socket and its wait for readability (gevent's own
        # recvmsg is this loop, but always reads first)
        self._wait_readable: Any = getattr(sock, "_wait", None)
        self._read_event: Any = getattr(sock, "_read_event", None)
        self._raw = getattr(sock, "_sock", None) if self._wait_readable is not None else None
        #: the read timeout's libev timer, made once and restarted per wait (gevent's own wait
        #: makes a ``Timeout`` and a timer per wait: several Python calls per token)
        self._timer: Any = None
        self._timer_s: float | None = None

    def start_request(self) -> None:
        """Read the two clocks side by side (before each request is written); the response's
        first bytes will be read by the sweep. A busy worker sweeps here too (a worker that
        finishes a response, records it and writes the next request reads no socket
        meanwhile)."""
        now_ns, self._base_s = clock_pair()
        self._base_ns = self._empty_ns = now_ns
        self._first = True
        self._first_events = self._first_reads = 0
        self._sweep(now_ns)

    def fileno(self) -> int:
        """The socket's descriptor (as it was when the connection opened)."""
        return self._fd

    @property
    def earliest_s(self) -> float:
        """The earliest the bytes of the latest read can have arrived (perf_counter seconds):
        the latest time before that read when the socket was known to hold none of them."""
        return self._base_s + (self._low_ns - self._base_ns) * 1e-9

    @property
    def user_s(self) -> float:
        """When the latest read returned (perf_counter seconds; nan before any read)."""
        if not self._now_ns:
            return math.nan
        return self._base_s + (self._now_ns - self._base_ns) * 1e-9

    def _recv(self) -> bytes:
        raw = self._raw
        if raw is None:  # not a gevent socket: its own blocking read
            data, ancdata, _flags, _addr = self.sock.recvmsg(RECV_BYTES, _ANC_BYTES)
            now_ns = _time_ns()
        elif self._first:  # a response's first events: read by the sweep as they arrive
            data, ancdata, now_ns = self._first_read()
        else:  # gevent's read loop, without a recvmsg that can only say EAGAIN
            if self.drained:
                self._wait_for_bytes()  # raises the socket's timeout
            while True:
                try:
                    data, ancdata, _flags, _addr = raw.recvmsg(RECV_BYTES, _ANC_BYTES)
                    break
                except BlockingIOError:
                    self._wait_for_bytes()
            now_ns = _time_ns()
        self._now_ns = now_ns
        self.reads += 1
        if len(ancdata) == 2:  # the usual read: the stamp, then the queue length (Linux's order)
            (level, kind, stamp), (inq_level, inq_kind, inq) = ancdata
            if (kind == SO_TIMESTAMPNS and inq_kind == TCP_INQ and level == _SOL_SOCKET
                    and inq_level == _SOL_TCP and len(stamp) == _TIMESPEC_BYTES):  # fmt: skip
                sec, nsec = _unpack_timespec(stamp)
                stamp_ns, drained = sec * 1_000_000_000 + nsec, inq == _NOTHING_QUEUED
            else:
                stamp_ns, drained = read_ancillary(ancdata)
        else:
            stamp_ns, drained = read_ancillary(ancdata)
        self.drained = drained and bool(data)
        self._low_ns = self._empty_ns
        if self.drained:
            self._empty_ns = now_ns
        if not stamp_ns:
            self.unstamped_reads += 1
            stamp_ns = now_ns
        self.arrival_s = self._base_s + (stamp_ns - self._base_ns) * 1e-9
        if self._first:
            self._first_events += data.count(b"data:")
            self._first_reads += 1
            self._first = (
                bool(data)
                and self._first_events < MERGED_EVENTS
                and self._first_reads < FIRST_READS
            )
            return data  # read when it arrived (or as soon as the worker swept): no yield
        if now_ns - stamp_ns > LATE_NS and data.count(b"\n\n") <= MERGED_EVENTS:
            self.late_yields += 1
            self._yield_to_hub()  # busy, but in time for this stream: read the other ready ones
        else:  # other streams' first bytes may have come meanwhile (``_sweep``, inlined)
            fb = self._fb
            if fb is not None and fb.waiting and now_ns >= fb.next_ns:
                fb.sweep()
        return data

    def _sweep(self, now_ns: int) -> None:
        """Take the other connections' first bytes that arrived, unless a sweep ran less than
        ``SWEEP_NS`` ago (or none waits): a worker busy with this stream reads them before
        it parses on or switches out."""
        fb = self._fb
        if fb is not None and fb.waiting and now_ns >= fb.next_ns:
            fb.sweep()

    def _first_read(self) -> tuple[bytes, list[Any], int]:
        """A response's first bytes, as a sweep read them: this greenlet waits in the hub
        (the socket's timeout as for any read) until a sweep found the socket readable."""
        if self._early is None:
            fb = self._fb
            if fb is None or fb.hub is not self._hub_now():
                fb = self._fb = first_bytes()
            fb.add(self, self._empty_ns)
            self._sweep(_time_ns())  # the worker switches out: take what came first
            try:
                while self._early is None:
                    self._park()
            finally:
                fb.discard(self, self._fd)
        early, self._early = self._early, None
        if isinstance(early, BaseException):
            raise early
        return early  # type: ignore[no-any-return]

    def take_first(self, empty_ns: int) -> None:
        """The sweep found the socket readable: read what is there (the bytes and their stamp,
        no parsing), note ``empty_ns`` (the latest time the socket was known to hold none of
        them), and queue the switch back to the waiting greenlet."""
        raw = self._raw
        assert raw is not None  # only a gevent socket's reads go through the sweep
        try:
            self._early = (*raw.recvmsg(RECV_BYTES, _ANC_BYTES)[:2], _time_ns())
        except BlockingIOError:  # not readable after all: wait on
            if self._fb is not None:
                self._fb.add(self, empty_ns)
            return
        except OSError as exc:  # reset, ...: the reader raises it
            self._early = exc
        self.first_reads += 1
        self._empty_ns = empty_ns
        waiting = self._parked
        if waiting is not None and self._wake is None:
            self._wake = self._hub_now().loop.run_callback(_wake, self, waiting)

    def _hub_now(self) -> Any:
        hub = self._hub
        if hub is None:
            hub = self._hub = gevent.get_hub()
        return hub

    def _park(self) -> None:
        """Switch to the hub until :meth:`take_first` wakes this greenlet (or the read timer
        throws the socket's timeout, or an exception is thrown in)."""
        timer = self._arm_timer()
        self._parked = getcurrent()
        try:
            self._hub_now().switch()
        finally:
            self._parked = None
            if timer is not None:
                timer.stop()
            if self._wake is not None:
                self._wake.stop()
                self._wake = None

    def _arm_timer(self) -> Any:
        """The connection's read timer, started for the socket's timeout (None: no timeout)."""
        timeout_s = self.sock.timeout
        if timeout_s is None:
            return None
        hub = self._hub_now()
        timer = self._timer
        if timer is None or self._timer_s != timeout_s:
            if timer is not None:
                timer.close()
            # repeating: ``again`` restarts it the full timeout from now (a stopped one-shot
            # libev timer restarted with ``start`` keeps only what was left of its timeout)
            timer = self._timer = hub.loop.timer(timeout_s, timeout_s, ref=True, priority=-1)
            self._timer_s = timeout_s
        timer.again(_expire, getcurrent(), update=True)  # the loop's clock updated first
        return timer

    def _wait_for_bytes(self) -> None:
        """Wait until the socket is readable, as gevent's socket does (``socket.timeout``, i.e.
        ``TimeoutError("timed out")``, after the socket's timeout; the same check against two
        greenlets waiting on one socket), with one timer per connection restarted per wait."""
        fb = self._fb
        if fb is not None and fb.waiting:  # the worker switches out: take what came first
            self._sweep(_time_ns())
        timeout_s = self.sock.timeout
        if timeout_s is None:
            self._wait_readable(self._read_event)  # no timeout: gevent's wait makes no timer
            return
        event = self._read_event
        if event.callback is not None:
            raise ConcurrentObjectUseError(
                f"This socket is already used by another greenlet: {event.callback!r}"
            )
        hub = self._hub_now()
        timer = self._arm_timer()
        try:
            hub.wait(event)
        finally:
            timer.stop()

    def close(self) -> None:
        if self._fb is not None:
            self._fb.discard(self, self._fd)
        if self._timer is not None:
            self._timer.close()
            self._timer = None
        super().close()

    def _yield_to_hub(self) -> None:
        """``gevent.sleep(0)`` without its ``Waiter``: the hub switches back to this greenlet
        once the ones ready before it have run; an exception thrown in meanwhile (a kill, a
        timeout) cancels that switch."""
        self._sweep(self._now_ns)
        hub = self._hub_now()
        back = hub.loop.run_callback(getcurrent().switch)
        try:
            hub.switch()
        except BaseException:
            back.stop()
            raise


def _wake(conn: StampedConnection, waiting: Any) -> None:
    """The sweep's switch back: to the greenlet only if it still waits for that read."""
    conn._wake = None
    if conn._parked is waiting:
        waiting.switch()


def _expire(waiting: Any) -> None:
    """The read timer's callback: the waiting greenlet gets the socket's own timeout error."""
    waiting.throw(TimeoutError("timed out"))  # what socket.timeout is


class StampedClient(Http11Client):
    """:class:`Http11Client` over :class:`StampedConnection`."""

    connection_class = StampedConnection


class KernelTransport(Transport):
    """:class:`Transport` with kernel receive stamps on ``http://`` servers."""

    #: the responses of this transport carry ``arrival_s`` (kernel stamp) per line read
    stamped = True

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        # made with its user, before any request: the first request's timed path holds no wait
        keep_kernel_stamps_on()

    def _client(self, base_url: str) -> Any:
        parts = urlsplit(base_url)
        if parts.scheme == "https":
            return super()._client(base_url)  # geventhttpclient: no stamp through TLS
        client: Any = self._clients.get(base_url)
        if client is None:
            client = StampedClient(
                parts.hostname or "127.0.0.1",
                parts.port or 80,
                connection_timeout=self.connect_timeout_s,
                network_timeout=self.read_timeout_s,
            )
            self._clients[base_url] = client  # type: ignore[assignment]
        return client


@functools.cache
def kernel_stamps_available() -> bool:
    """True when this system stamps received TCP segments for ``recvmsg`` (Linux)."""
    if not sys.platform.startswith("linux") or not hasattr(socket.socket, "recvmsg"):
        return False
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            return bool(probe.getsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS))
    except OSError:
        return False


#: The loopback pair that holds the kernel's receive stamping on (see keep_kernel_stamps_on).
_STAMP_KEEPER: list[socket.socket] = []


@functools.cache
def keep_kernel_stamps_on(timeout_s: float = 2.0) -> bool:
    """Turn the kernel's receive stamping on for good before the first request is timed.

    Linux stamps arriving segments only while some socket asks for stamps, and the first such
    socket turns that on through a deferred work item: on a busy host the first segments that
    reach a new stamped connection can come before it ran, and TCP hands them up unstamped (the
    read then falls back to the user-space clock). This opens one loopback TCP pair that asks
    for stamps, holds it for the life of the process (so stamping never turns off between runs
    when every connection closed), and returns once a segment on it came back stamped (False
    after ``timeout_s``, or where stamps are not available). Once per process: later calls
    return the first one's answer."""
    if not kernel_stamps_available():
        return False
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        sender = socket.create_connection(listener.getsockname(), timeout=timeout_s)
        receiver, _ = listener.accept()
    receiver.settimeout(timeout_s)
    receiver.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    deadline = time.monotonic() + timeout_s
    stamped = False
    while not stamped and time.monotonic() < deadline:
        sender.sendall(b".")
        _data, ancdata, _flags, _addr = receiver.recvmsg(1, _ANC_BYTES)
        stamped = read_ancillary(ancdata)[0] != 0
        if not stamped:
            time.sleep(0.005)
    _STAMP_KEEPER.extend((sender, receiver))
    return stamped


def select_transport(name: str) -> type[Transport]:
    """The transport class of ``--llm-transport`` ``name``: ``kernel`` where the kernel
    stamps reads (``auto``: else geventhttpclient), ``ghc`` geventhttpclient."""
    name = (name or "auto").lower()
    if name == "auto":  # in-process users (no Locust parser) still honour the env variable
        name = os.environ.get("LOCUST_LLM_TRANSPORT", "auto").lower() or "auto"
    if name not in TRANSPORT_CHOICES:
        raise InputError(
            f"--llm-transport {name!r}: expected one of {', '.join(TRANSPORT_CHOICES)}",
        )
    if name == "ghc":
        return Transport
    if kernel_stamps_available():
        return KernelTransport
    if name == "kernel":
        raise InputError("--llm-transport kernel: this system has no kernel receive stamps")
    return Transport
