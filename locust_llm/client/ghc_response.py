"""A geventhttpclient response read with bounded lines: the ``Response`` the stream reader needs.

geventhttpclient's own ``readline`` keeps reading until its separator arrives: a server that
sends one endless line (no newline) grows the response's buffer without bound, and since it
scans the whole buffer again after every 4 KiB read, the worker's gevent loop stalls long
before memory runs out (a 2 GB line took 8.3 GB and the worker was declared lost).
:class:`GhcResponse` wraps the library's response and reads lines itself, from the same
parser's body buffer: ``readline(sep, limit)`` returns at most ``limit`` bytes (a longer line
comes back cut, without its separator), scanning each byte once. The rest of the surface
(``status_code``, ``get``, ``read``, ``message_complete``, ``should_close``, ``release``) is
the library's, so :class:`~locust_llm.client.transport.Transport` and the user treat both
transports' responses alike; it raises the library's own exceptions.
"""

from __future__ import annotations

from typing import Any

from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError


class GhcResponse:
    """A geventhttpclient ``HTTPSocketResponse`` whose lines are read with a bound."""

    __slots__ = ("_resp",)

    def __init__(self, resp: Any) -> None:
        self._resp = resp

    @property
    def status_code(self) -> int:
        return int(self._resp.status_code)

    @property
    def message_complete(self) -> bool:
        return bool(self._resp.message_complete)

    @property
    def headers(self) -> Any:
        return self._resp.headers

    def get(self, key: str, default: Any = None) -> Any:
        return self._resp.get(key, default)

    def read(self, length: int | None = None) -> bytes:
        """Up to ``length`` body bytes (all of the rest when None: callers bound it)."""
        return bytes(self._resp.read(length))

    def should_close(self) -> bool:
        return bool(self._resp.should_close())

    def release(self) -> None:
        self._resp.release()

    def readline(self, sep: bytes = b"\n", limit: int = -1) -> bytes:
        """The body up to and including the next ``sep`` (one byte); the rest at the end of the
        body; b"" once it is read. With ``limit`` >= 1 at most ``limit`` bytes."""
        resp = self._resp
        scanned = 0  # bytes of the buffer already searched for sep
        while True:
            buf = resp._body_buffer
            stop = len(buf) if limit < 0 else min(len(buf), limit)
            end = buf.find(sep, scanned, stop)
            if end >= 0:
                return _take(buf, end + 1)
            if 0 <= limit <= len(buf):
                return _take(buf, limit)
            scanned = stop
            if resp.message_complete:
                return _take(buf, len(buf))
            sock = resp._sock
            if sock is None:
                raise HTTPConnectionClosed("connection closed.")
            try:
                data = sock.recv(resp.block_size)
                resp.feed(data)
                if not data and not resp.message_complete:
                    raise HTTPParseError("connection closed before the end of the body")
            except BaseException:
                resp.release()
                raise


def _take(buf: bytearray, n: int) -> bytes:
    line = bytes(buf[:n])
    del buf[:n]
    return line
