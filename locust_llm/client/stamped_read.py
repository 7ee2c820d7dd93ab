"""One kernel-stamped read, and the check that a read is nothing but a stream's plain tokens.

The two steps the kernel transport takes for every token (``kernel_transport``), each in two
equal forms: the C module ``_stamped_read`` (built with the package where a C compiler is
present: ``pyproject.toml``'s ``ext-modules``, optional) and the Python below, used where that
module is not built, or with ``LOCUST_LLM_PURE_PYTHON=1``. ``tests/test_stamped_read.py`` holds
the two to the same answers.

- :func:`recv_stamped`: one ``recvmsg`` of a non-blocking socket, with the kernel's receive
  stamp (``SO_TIMESTAMPNS``) and whether the read left the queue empty (``TCP_INQ``), and the
  clock after it: ``(bytes, stamp_ns or 0, drained, now_ns)``; None where nothing was queued.
  Python's ``socket.recvmsg`` makes a 64 KiB bytes object per read and a list of tuples of its
  ancillary data; the C read fills one buffer and copies out what came.
- :func:`split_tokens`: how many whole HTTP chunks a read holds when each is one SSE token
  event made of a stream's split (:func:`~locust_llm.client.sse.text_split`: the bytes around
  its text) around a text without a quote; 0 when any is not (the caller then reads it the
  long way, ``kernel_transport._plain_tokens``).
"""

from __future__ import annotations

import os
import socket
import struct
import time
from typing import Any

from locust_llm.client.sse import fits_split

#: Linux's ``SO_TIMESTAMPNS`` (= ``SCM_TIMESTAMPNS``); Python's socket module does not name it.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
#: Linux's ``TCP_INQ`` (= ``TCP_CM_INQ``, Linux >= 4.18): each read also says how many bytes it
#: left in the receive queue.
TCP_INQ = getattr(socket, "TCP_INQ", 36)
_TIMESPEC = struct.Struct("@qq")  # struct timespec: two 64-bit longs
_TIMESPEC_BYTES = _TIMESPEC.size
_unpack_timespec = _TIMESPEC.unpack
_INQ = struct.Struct("@i")
_NOTHING_QUEUED = _INQ.pack(0)
ANC_BYTES = (
    socket.CMSG_SPACE(_TIMESPEC_BYTES) + socket.CMSG_SPACE(_INQ.size)
    if hasattr(socket, "CMSG_SPACE")
    else 0
)
_SOL_SOCKET, _SOL_TCP = socket.SOL_SOCKET, socket.IPPROTO_TCP
_time_ns = time.time_ns
#: Bytes asked of the kernel per read (the C read's buffer: ``RECV_BYTES`` in _stamped_read.c).
RECV_BYTES = 65536
#: a chunk's hex size line ends within this many bytes of its start
SIZE_LINE_BYTES = 18
_HEX_DIGITS = b"0123456789abcdefABCDEF"

#: A read: its bytes, the kernel's receive stamp (``CLOCK_REALTIME`` ns, 0 if none), whether it
#: left nothing queued, and ``time_ns()`` after it.
Read = tuple[bytes, int, bool, int]


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


def stamp_of(ancdata: list[tuple[int, int, bytes]]) -> tuple[int, bool]:
    """:func:`read_ancillary`, with the usual read (two items: the stamp, then the queue
    length, Linux's order) unpacked without a loop."""
    if len(ancdata) == 2:
        (level, kind, stamp), (inq_level, inq_kind, inq) = ancdata
        if (kind == SO_TIMESTAMPNS and inq_kind == TCP_INQ and level == _SOL_SOCKET
                and inq_level == _SOL_TCP and len(stamp) == _TIMESPEC_BYTES):  # fmt: skip
            sec, nsec = _unpack_timespec(stamp)
            return sec * 1_000_000_000 + nsec, inq == _NOTHING_QUEUED
    return read_ancillary(ancdata)


def recv_stamped_py(sock: Any) -> Read | None:
    """:func:`recv_stamped` in Python (also the read of a blocking socket, which the C read
    must not wait on: it holds the GIL)."""
    try:
        data, ancdata, _flags, _addr = sock.recvmsg(RECV_BYTES, ANC_BYTES)
    except BlockingIOError:
        return None
    now_ns = _time_ns()
    stamp_ns, drained = stamp_of(ancdata)
    return data, stamp_ns, drained, now_ns


def event_chunk(data: bytes, pos: int, limit: int) -> tuple[int, int] | None:
    """The chunk at ``pos`` of ``data`` when it is whole and one SSE event of one ``data:``
    line (``<hex size>\r\ndata:...\n\n\r\n``, plain hex, the event at most ``limit`` + 1
    bytes): where its event starts and where the chunk ends (past its CRLF); None otherwise.
    The framing both :func:`split_tokens_py` and the kernel transport's token check read."""
    size_end = data.find(b"\r\n", pos, pos + SIZE_LINE_BYTES)
    digits = data[pos:size_end]
    if size_end <= pos or digits.lstrip(_HEX_DIGITS):  # plain hex only, as the C form
        return None
    size = int(digits, 16)
    start = size_end + 2
    stop = start + size
    if (size - 1 > limit or not data.startswith(b"\r\n", stop)
            or not data.startswith(b"data:", start)
            or data.find(b"\n", start, stop) != stop - 2 or data[stop - 1] != 10):  # fmt: skip
        return None
    return start, stop + 2


def split_tokens_py(data: bytes, head: bytes, tail: bytes, limit: int) -> int:
    """:func:`split_tokens` in Python."""
    split = (head, tail)
    tokens = pos = 0
    end = len(data)
    while pos < end:
        chunk = event_chunk(data, pos, limit)
        if chunk is None:
            return 0
        start, pos = chunk
        if not fits_split(data, start, pos - 4, split):  # the event, less its blank line
            return 0
        tokens += 1
    return tokens


def _compiled() -> Any:
    """The C module, or None (not built here, or ``LOCUST_LLM_PURE_PYTHON`` set)."""
    if os.environ.get("LOCUST_LLM_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from locust_llm.client import _stamped_read  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _stamped_read


_C = _compiled()
#: the C forms are in use
COMPILED = _C is not None
recv_stamped = _C.recv_stamped if _C is not None else recv_stamped_py
split_tokens = _C.split_tokens if _C is not None else split_tokens_py
