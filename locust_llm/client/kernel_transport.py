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
state) the connection parks until :mod:`locust_llm.client.ready_reader` has read its next
bytes (every connection of the worker in one edge-triggered epoll set: one ``epoll_wait`` and
one ``recvmsg`` per ready socket, the bytes stamped before any of them is parsed, one direct
switch per parked greenlet), instead of a ``recvmsg`` that could only say EAGAIN or an I/O
watcher started per token. A read that finds the worker more than :data:`LATE_S` late sweeps
the other ready sockets from the worker's own greenlet before its bytes are parsed, so a busy
worker reads each stream's next bytes before the token after them arrives and the kernel
merges the two (``bench/results/kernel_timestamps.md``). An idle worker is never late and pays
nothing for it. Per read the hot path takes one user-space clock (``time_ns``); the clock pair
that maps stamps to ``perf_counter`` is read per request.

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

import atexit
import contextlib
import errno
import functools
import math
import os
import socket
import sys
import time
from time import perf_counter
from typing import Any
from urllib.parse import urlsplit

import gevent
from gevent.exceptions import ConcurrentObjectUseError
from greenlet import getcurrent

from locust_llm.client.first_bytes import FirstBytes, first_bytes
from locust_llm.client.http11 import Http11Client, Http11Connection
from locust_llm.client.ready_reader import ReadyReader, ready_reader
from locust_llm.client.sse import CONTENT_TOKEN, fits_split, parse_chunk, text_split
from locust_llm.client.stamped_read import (
    ANC_BYTES,
    SO_TIMESTAMPNS,
    TCP_INQ,
    event_chunk,
    read_ancillary,
    recv_stamped,
    recv_stamped_py,
    split_tokens,
)
from locust_llm.client.transport import Transport
from locust_llm.errors import InputError

_time_ns = time.time_ns
#: a clock pair whose perf_counter bracket is this narrow is taken at once (else the tightest
#: of ``_PAIR_TRIES``): a pause between the two reads would shift every stamp of the request
_PAIR_TIGHT_S = 20e-6
_PAIR_TRIES = 3
_SOL_TCP = socket.IPPROTO_TCP

#: The ``--llm-transport`` choices.
TRANSPORT_CHOICES = ("auto", "kernel", "ghc")

#: A read whose bytes waited longer than this in the kernel finds the worker busy: other
#: streams' bytes are likely waiting too, and are read (swept) before this read is parsed.
LATE_S = 0.001
LATE_NS = round(LATE_S * 1e9)
#: ... unless the read holds more SSE events than this (a response's first read holds two: the
#: role and the first token): the worker is already a token gap behind this stream, and so
#: behind the others that became readable with it; the sweep would save no stamp.
MERGED_EVENTS = 2
#: The sweep reads a response's first bytes until they held :data:`MERGED_EVENTS` SSE data
#: lines, or for this many reads (a body that is no event stream).
FIRST_READS = 4


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
    time is set. ``reads``, ``late_sweeps`` and ``unstamped_reads`` count what the reads did.
    """

    def __init__(self, sock: Any) -> None:
        super().__init__(sock)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        with contextlib.suppress(OSError):  # an older kernel: no queue length with each read
            sock.setsockopt(_SOL_TCP, TCP_INQ, 1)
        self.reads = 0  # reads that returned
        self.late_sweeps = 0  # late reads that read the other ready streams before parsing
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
        #: what a sweep read for this connection (a :data:`~locust_llm.client.stamped_read.
        #: Read`: the bytes, their stamp, drained, time_ns after the read), or the error it
        #: raised, until the reader takes it
        self._early: Any = None
        #: the greenlet parked waiting for this connection's bytes (None: none)
        self.parked: Any = None
        self._wake: Any = None  # the queued switch back to it
        self._fb: FirstBytes | None = None
        self._fd = sock.fileno() if hasattr(sock, "fileno") else -1
        self.start_request()
        # a gevent socket's own non-blocking socket (read directly; the ready reader waits)
        self._raw = getattr(sock, "_sock", None) if hasattr(sock, "_wait") else None
        #: when a parked read times out (time_ns; 0: never), checked by the ready reader: no
        #: timer started and stopped per wait (gevent's own wait makes a ``Timeout`` and a timer)
        self.deadline_ns = 0
        #: what the ready reader read for this connection (a ``Read``, as ``_early``), or the
        #: error it raised, until :meth:`_recv` takes it: one at most
        self._pending: Any = None
        #: the socket had new bytes that no read has taken yet (its edge came while a read was
        #: pending, or while the sweep reads the response's first bytes)
        self._edge = False
        self._reader: ReadyReader | None = None
        #: the response being read, past its first content token, whose ordinary token events
        #: the ready reader records while its greenlet waits (``stream.SteadyStream``; None:
        #: every read goes to the greenlet): see :meth:`finish_in_hub`
        self.steady: Any = None
        self.hub_reads = 0  # reads the ready reader recorded itself (no switch to the greenlet)
        if self._raw is not None:
            self._reader = ready_reader()
            self._reader.add(self)

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
            read = recv_stamped_py(self.sock)
            if read is None:  # a socket set non-blocking by its owner: as its own read says
                raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
            data, stamp_ns, drained, now_ns = read
        elif self._first and self._pending is None:  # a response's first events: read by
            data, stamp_ns, drained, now_ns = self._first_read()  # the first-bytes sweep
        else:  # read now if bytes may be queued, else take (or wait for) the ready reader's
            if self._pending is None:
                if self._edge or not self.drained:
                    self._edge = False
                    self._take_bytes(raw)
                if self._pending is None:
                    self._await_pending()
            pending, self._pending = self._pending, None
            if pending.__class__ is not tuple:  # the error a read raised (here or in the hub)
                raise pending
            data, stamp_ns, drained, now_ns = pending
        if not stamp_ns:
            self.unstamped_reads += 1
            stamp_ns = now_ns
        self._took_read(now_ns, stamp_ns, drained and bool(data))
        if self._first:
            self._first_events += data.count(b"data:")
            self._first_reads += 1
            self._first = (
                bool(data)
                and self._first_events < MERGED_EVENTS
                and self._first_reads < FIRST_READS
            )
            return data  # read when it arrived (or as soon as the worker swept): no sweep
        # now, not when the read returned: a read the ready reader took may have waited for
        # this greenlet's turn through a whole batch of streams
        check_ns = _time_ns()
        reader = self._reader
        if now_ns - stamp_ns > LATE_NS and data.count(b"\n\n") <= MERGED_EVENTS:
            # busy, but in time for this stream: read the other ready streams before parsing
            self.late_sweeps += 1
            self._sweep(check_ns)
            if reader is not None and check_ns >= reader.next_ns:
                reader.sweep_from_worker()
            return data
        fb = self._fb  # other streams' first bytes may have come meanwhile (``_sweep``, inlined)
        if fb is not None and fb.waiting and check_ns >= fb.next_ns:
            fb.sweep()
        # read long before this turn (the worker is going through a batch): what came since
        if check_ns - now_ns > LATE_NS and reader is not None and check_ns >= reader.next_ns:
            reader.sweep_from_worker()
        return data

    def _await_pending(self) -> None:
        """Park until the ready reader has read this socket's next bytes (the socket's timeout
        as for any read); they are in ``_pending`` then, for the caller to take."""
        fb = self._fb
        if fb is not None and fb.waiting:  # the worker switches out: take what came first
            self._sweep(_time_ns())
        while self._pending is None:
            self._park()

    def take_ready(self) -> Any:
        """The ready reader saw new bytes: read them (no parsing) unless a read is held already
        or the response's first bytes are the first-bytes sweep's to read (then only note the
        edge); the greenlet waiting for them, or None."""
        if self._pending is not None or self._first or self._raw is None:
            self._edge = True
            return None
        self._edge = False
        return self.parked if self._take_bytes(self._raw) else None

    def _take_bytes(self, raw: Any) -> bool:
        """Read what ``raw`` (the non-blocking socket) holds into ``_pending``: the bytes, their
        stamp, whether it drained the queue and the clock after the read (``recv_stamped``), or
        the error the read raised (reset, ...: the greenlet raises it); False, nothing read,
        where it held nothing."""
        try:
            read = recv_stamped(raw)
        except OSError as exc:
            self._pending = exc
            return True
        if read is None:
            return False
        self._pending = read
        return True

    def _took_read(self, now_ns: int, stamp_ns: int, drained: bool) -> None:
        """A read is taken (by the greenlet, or in the hub): the read's clock, its stamp as the
        arrival time (the records' clock), whether it left the socket's queue empty."""
        self._now_ns = now_ns
        self.reads += 1
        self.drained = drained
        self._low_ns = self._empty_ns
        if drained:
            self._empty_ns = now_ns
        self.arrival_s = self._base_s + (stamp_ns - self._base_ns) * 1e-9

    def finish_in_hub(self) -> bool:
        """The read the ready reader took for the parked greenlet is whole chunks of ordinary
        token events of the steady stream: record it here, as the stream loop would (the
        kernel stamp, a token count of 0, the loop's clock as the user-side time), and leave
        the greenlet parked, its read timeout counted from this read. Where another edge came
        while that read waited (the hub went through a long queue of wakes), the bytes no read
        has taken are read here too, and recorded the same way while they are such tokens: a
        worker that falls behind does not hand each of those reads to its greenlet. False for
        a read that is anything else, which is left for the greenlet (its ``_pending``): no
        steady stream, an error, a chunk or line under way, bytes still queued, no stamp, a
        read of part of a chunk, an event of more than one line, over the limit, or classified
        as anything but :data:`~locust_llm.client.sse.CONTENT_TOKEN` (the first token, usage,
        a finish reason, the end, an error)."""
        steady, raw = self.steady, self._raw
        if steady is None or raw is None:
            return False
        resp = steady.response
        if not resp.between_chunks() or self.pos != len(self.buf):
            return False
        while self._record_in_hub(steady):
            if not self._edge:
                return True
            # the bytes that came meanwhile: read here (edge-triggered: a read that drains the
            # queue leaves the next bytes a new edge); an error is the greenlet's to raise
            self._edge = False
            if not self._take_bytes(raw):
                return True
        return False

    def _record_in_hub(self, steady: Any) -> bool:
        """Record the pending read in the stream's timing if it is whole chunks of ordinary
        token events, kernel-stamped and draining the socket; False, the read left pending and
        the timing unchanged, else (the stream's split may have been made again meanwhile: a
        cache, see :func:`_plain_tokens`)."""
        pending = self._pending
        if pending.__class__ is not tuple:
            return False
        data, stamp_ns, drained, now_ns = pending
        if not (stamp_ns and drained):
            return False
        tokens = _plain_tokens(data, steady)
        if not tokens:
            return False
        self._pending = None
        self.hub_reads += 1
        self._took_read(now_ns, stamp_ns, True)
        arrival = self.arrival_s
        timing = steady.timing
        if tokens == 1:
            timing.chunk_times.append(arrival)
            timing.chunk_tokens.append(0)
        else:  # one read's lines share its stamp, as the loop stamps them
            timing.chunk_times.extend([arrival] * tokens)
            timing.chunk_tokens.extend([0] * tokens)
        timing.last_user_time = steady.clock()
        timeout = self.sock.timeout
        if self.deadline_ns and timeout is not None:  # a read came: the wait starts again
            self.deadline_ns = now_ns + int(timeout * 1e9)
        return True

    def still_waits(self, waiting: Any) -> bool:
        """``waiting`` is still parked on this connection, and its read is in."""
        return self.parked is waiting and self._pending is not None

    def _sweep(self, now_ns: int) -> None:
        """Take the other connections' first bytes that arrived, unless a sweep ran less than
        ``SWEEP_NS`` ago (or none waits): a worker busy with this stream reads them before
        it parses on or switches out."""
        fb = self._fb
        if fb is not None and fb.waiting and now_ns >= fb.next_ns:
            fb.sweep()

    def _first_read(self) -> tuple[bytes, int, bool, int]:
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
            read = recv_stamped(raw)
        except OSError as exc:  # reset, ...: the reader raises it
            read = exc
        if read is None:  # not readable after all: wait on
            if self._fb is not None:
                self._fb.add(self, empty_ns)
            return
        self._early = read
        self.first_reads += 1
        self._empty_ns = empty_ns
        waiting = self.parked
        if waiting is not None and self._wake is None:
            self._wake = self._hub_now().loop.run_callback(_wake, self, waiting)

    def _hub_now(self) -> Any:
        hub = self._hub
        if hub is None:
            hub = self._hub = gevent.get_hub()
        return hub

    def _park(self) -> None:
        """Switch to the hub until the ready reader or :meth:`take_first` wakes this greenlet
        (or the reader throws the socket's timeout in, or anything else is thrown in)."""
        if self.parked is not None:
            raise ConcurrentObjectUseError(
                f"This socket is already used by another greenlet: {self.parked!r}"
            )
        reader = self._reader
        assert reader is not None  # a gevent socket's connection is registered
        self.parked = getcurrent()
        reader.park(self, self.sock.timeout)
        try:
            reader.hub.switch()
        finally:
            self.parked = None
            reader.unpark()
            if self._wake is not None:
                self._wake.stop()
                self._wake = None

    def close(self) -> None:
        if self._fb is not None:
            self._fb.discard(self, self._fd)
        if self._reader is not None:
            self._reader.discard(self, self._fd)
        super().close()


def _plain_tokens(data: bytes, steady: Any) -> int:
    """How many plain token events ``data`` holds when it is whole chunks of one such event
    each (``<hex size>\\r\\n<event>\\r\\n``: a ``data:`` line and its blank line, within the
    event limit, classified as :data:`~locust_llm.client.sse.CONTENT_TOKEN`); 0 otherwise. An
    event that fits the stream's latest split (:func:`~locust_llm.client.sse.text_split`: the
    bytes around its text are the previous token event's) is that class without the scan."""
    split = steady.split
    if split:  # every event fits the split: counted in one pass (C where built)
        tokens = split_tokens(data, split[0], split[1], steady.max_event_bytes)
        if tokens:
            steady.split_hits += tokens
            return tokens
    tokens = pos = 0
    end = len(data)
    classify, limit = steady.classify, steady.max_event_bytes
    while pos < end:
        chunk = event_chunk(data, pos, limit)
        if chunk is None:
            return 0
        start, pos = chunk
        stop = pos - 2  # the event's end
        split = steady.split
        if split and fits_split(data, start, stop - 2, split):
            steady.split_hits += 1
        elif classify(data[start + 5 : stop].strip())[1] is not CONTENT_TOKEN:
            return 0
        elif classify is parse_chunk and split is not False:
            # the server's token events differ only in their text, while a split fits: a
            # split that fitted no event (a stamp or a count in every event) is not made again
            steady.split = text_split(data[start : stop - 2]) if split is None or (
                steady.split_hits) else False  # fmt: skip
            steady.split_hits = 0
        tokens += 1
    return tokens


def _wake(conn: StampedConnection, waiting: Any) -> None:
    """The sweep's switch back: to the greenlet only if it still waits for that read."""
    conn._wake = None
    if conn.parked is waiting:
        waiting.switch()


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
    when every connection closed; it is closed at exit), and returns once a segment on it came
    back stamped (False after ``timeout_s``, or where stamps are not available). Once per
    process: later calls return the first one's answer."""
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
        _data, ancdata, _flags, _addr = receiver.recvmsg(1, ANC_BYTES)
        stamped = read_ancillary(ancdata)[0] != 0
        if not stamped:
            time.sleep(0.005)
    if not _STAMP_KEEPER:  # closed as the process exits (not left to the collector)
        atexit.register(_close_stamp_keeper)
    _STAMP_KEEPER.extend((sender, receiver))
    return stamped


def _close_stamp_keeper() -> None:
    while _STAMP_KEEPER:
        _STAMP_KEEPER.pop().close()


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
