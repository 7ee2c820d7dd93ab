"""A minimal HTTP/1.1 server on ``asyncio.Protocol``: just what an OpenAI-style API needs.

Chosen by measurement over aiohttp (``bench/bench_sim.py front``; figures in
``bench/results/sim.md``): streaming a chunk here is one ``transport.write``, with no coroutine
or drain per chunk; with the whole engine running it out-streamed a bare aiohttp handler at 500
streams on one core.

Supported: request bodies with ``Content-Length``, keep-alive (HTTP/1.1 default, ``Connection:
close`` honoured), pipelined requests (answered in order, one at a time), complete responses
and chunked streaming responses. Not supported, answered with a clear 4xx: chunked request
bodies, headers over 64 KiB, bodies over 32 MiB.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 32 * 1024 * 1024

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Payload Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@dataclass(slots=True)
class HttpRequest:
    """One parsed request. Header names are lower-case."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


Handler = Callable[["HttpConnection", HttpRequest], None]


class HttpConnection(asyncio.Protocol):
    """One client connection. The handler answers with :meth:`respond` or a stream."""

    def __init__(self, handler: Handler, on_error: Callable[[int, str], bytes]) -> None:
        self._handler = handler
        self._on_error = on_error  # (status, message) -> JSON body
        self._buffer = bytearray()
        self._busy = False  # a response is in progress
        self._keep_alive = True
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.on_close: Callable[[], None] | None = None  # the active response's disconnect hook

    # ---- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if not self._busy:
            self._process()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        hook, self.on_close = self.on_close, None
        if hook is not None:
            hook()

    # ---- parsing -----------------------------------------------------------------------------
    def _process(self) -> None:
        while not self._busy and not self.closed and self._buffer:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEAD_BYTES:
                    self._fail(431, "request headers are too large")
                return
            head = bytes(self._buffer[:end]).decode("latin-1")
            lines = head.split("\r\n")
            parts = lines[0].split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                self._fail(400, f"malformed request line {lines[0][:80]!r}")
                return
            method, path, version = parts
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if not sep:
                    self._fail(400, f"malformed header line {line[:80]!r}")
                    return
                headers[name.strip().lower()] = value.strip()
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._fail(411, "chunked request bodies are not supported; send Content-Length")
                return
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                self._fail(400, "Content-Length is not an integer")
                return
            if length < 0 or length > MAX_BODY_BYTES:
                self._fail(413, f"request body must be 0..{MAX_BODY_BYTES} bytes")
                return
            total = end + 4 + length
            if len(self._buffer) < total:
                return
            body = bytes(self._buffer[end + 4 : total])
            del self._buffer[:total]
            connection = headers.get("connection", "").lower()
            keep = (
                "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
            )
            self._keep_alive = keep
            self._busy = True
            self._handler(self, HttpRequest(method, path.split("?", 1)[0], headers, body, keep))

    def _fail(self, status: int, message: str) -> None:
        self._keep_alive = False
        self._busy = True
        self.respond(status, self._on_error(status, message))

    # ---- responses ---------------------------------------------------------------------------
    def _head(self, status: int, headers: Iterable[tuple[str, str]]) -> bytearray:
        out = bytearray(f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n".encode())
        for name, value in headers:
            out += f"{name}: {value}\r\n".encode()
        if not self._keep_alive:
            out += b"Connection: close\r\n"
        return out

    def respond(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        """Send a complete response, then serve the next request on this connection."""
        if self.closed or self.transport is None:
            return
        out = self._head(
            status, [("Content-Type", content_type), ("Content-Length", str(len(body))), *headers]
        )
        out += b"\r\n"
        out += body
        self.transport.write(bytes(out))
        self._done()

    def start_stream(
        self,
        status: int = 200,
        content_type: str = "text/event-stream",
        headers: Iterable[tuple[str, str]] = (),
        first: bytes = b"",
    ) -> None:
        """Send the head of a chunked response, plus ``first`` as its first chunk."""
        if self.closed or self.transport is None:
            return
        out = self._head(
            status,
            [
                ("Content-Type", content_type),
                ("Cache-Control", "no-cache"),
                ("Transfer-Encoding", "chunked"),
                *headers,
            ],
        )
        out += b"\r\n"
        if first:
            out += b"%x\r\n%b\r\n" % (len(first), first)
        self.transport.write(bytes(out))

    def write_chunk(self, data: bytes) -> None:
        """One piece of the streamed body (empty data is skipped: it would end the stream)."""
        if data and not self.closed and self.transport is not None:
            self.transport.write(b"%x\r\n%b\r\n" % (len(data), data))

    def end_stream(self, last: bytes = b"") -> None:
        """Send ``last`` and the terminating chunk; then serve the next request."""
        if self.closed or self.transport is None:
            return
        if last:
            self.transport.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(last), last))
        else:
            self.transport.write(b"0\r\n\r\n")
        self._done()

    def abort(self) -> None:
        """Drop the connection now (no terminating chunk): a broken stream for the client."""
        self.on_close = None
        if self.transport is not None and not self.closed:
            self.transport.abort()
        self.closed = True

    def _done(self) -> None:
        self.on_close = None
        self._busy = False
        if not self._keep_alive:
            if self.transport is not None:
                self.transport.close()
            self.closed = True
            return
        if self._buffer:
            asyncio.get_running_loop().call_soon(self._process)
