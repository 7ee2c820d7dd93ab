"""A streaming HTTP/1.1 client of our own on a gevent socket: one keep-alive connection per server.

It writes a request and reads the response head (status line, headers, 1xx interim answers
skipped), then the body as it arrives: ``Transfer-Encoding: chunked``, ``Content-Length`` or
until the server closes. :meth:`Http11Response.readline` returns one line as soon as its bytes
are in (an SSE line), :meth:`Http11Response.read` a bounded or whole body. It exists so that a
transport can see each ``recv`` the line's bytes came from: :class:`Http11Connection._recv` is
the hook where ``locust_llm.client.kernel_transport`` reads the kernel's receive stamp.

The client and response offer the surface of geventhttpclient's that ``Transport`` and
``LLMUser`` use (``request``/``get``/``close``; ``status_code``, ``readline``, ``read``,
``message_complete``, ``should_close``, ``release``), and fail the same way, raising
geventhttpclient's own exception classes so the transport's one error-kind mapping serves both:
``HTTPConnectionClosed`` when the connection closed (or was reset) before any byte of the
response, ``HTTPParseError`` for a garbled or cut head or body framing, ``TimeoutError`` and
other ``OSError`` as the socket raises them.
"""

from __future__ import annotations

import errno
import ipaddress
import math
from collections.abc import Callable, Mapping
from time import perf_counter
from typing import Any

import gevent.socket
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError

from locust_llm.client.stamped_read import RECV_BYTES

#: The longest response head accepted.
MAX_HEAD_BYTES = 65536

_BODY_CHUNKED, _BODY_LENGTH, _BODY_UNTIL_CLOSE, _BODY_NONE = range(4)


class Http11Connection:
    """One TCP connection and its receive buffer (``buf[pos:]`` is unread)."""

    def __init__(self, sock: gevent.socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.pos = 0
        self.eof = False
        #: when the bytes of the latest read arrived (perf_counter seconds; nan: unknown)
        self.arrival_s = math.nan

    @property
    def earliest_s(self) -> float:
        """The earliest the bytes of the latest read can have arrived (perf_counter seconds;
        nan: unknown, a stamped read says)."""
        return math.nan

    def start_request(self) -> None:
        """Called before each request is written (the hook where a stamped read syncs clocks)."""

    def _recv(self) -> bytes:
        """One read from the socket (the hook for a stamped read)."""
        return self.sock.recv(RECV_BYTES)

    def fill(self) -> bool:
        """Read more bytes into the buffer; False at the end of the stream."""
        if self.eof:
            return False
        data = self._recv()
        if not data:
            self.eof = True
            return False
        self.buf = self.buf[self.pos :] + data if self.pos < len(self.buf) else data
        self.pos = 0
        return True

    def close(self) -> None:
        self.sock.close()


class Http11Response:
    """A response whose head is read; the body is read on demand."""

    def __init__(
        self, conn: Http11Connection, version: str, status: int, headers: dict[str, str]
    ) -> None:
        self.conn = conn
        self.version = version
        self.status_code = status
        self.headers = headers
        self._released = False
        self._chunk_left = 0  # chunked: bytes left in the current chunk
        self._length_left = 0  # content-length: body bytes left
        self._crlf_due = False  # chunked: the current chunk's closing CRLF is still unread
        encoding = headers.get("transfer-encoding", "").lower()
        if status < 200 or status in (204, 304):
            self._mode = _BODY_NONE
        elif "chunked" in encoding:
            self._mode = _BODY_CHUNKED
        elif "content-length" in headers:
            try:
                self._length_left = int(headers["content-length"])
            except ValueError:
                raise HTTPParseError(f"bad content-length: {headers['content-length']!r}") from None
            self._mode = _BODY_LENGTH if self._length_left > 0 else _BODY_NONE
        else:
            self._mode = _BODY_UNTIL_CLOSE
        self.message_complete = self._mode == _BODY_NONE
        connection = headers.get("connection", "").lower()
        if version == "HTTP/1.0":
            self._keep_alive = "keep-alive" in connection
        else:
            self._keep_alive = "close" not in connection
        if self._mode == _BODY_UNTIL_CLOSE:
            self._keep_alive = False

    def get(self, name: str, default: str | None = None) -> str | None:
        """A response header by case-insensitive name (geventhttpclient's ``resp.get``)."""
        return self.headers.get(name.lower(), default)

    @property
    def arrival_s(self) -> float:
        """When the bytes that completed the latest line or read arrived (perf_counter s)."""
        return self.conn.arrival_s

    @property
    def stamp_holder(self) -> Http11Connection:
        """What holds ``arrival_s`` as a plain attribute (the per-token loop reads it there)."""
        return self.conn

    @property
    def earliest_s(self) -> float:
        """The earliest those bytes can have arrived (perf_counter s; nan: unknown)."""
        return self.conn.earliest_s

    # ---- body framing -------------------------------------------------------------------------
    def _available(self) -> int:
        """Body bytes of the current piece available in the buffer, reading if none; 0 at the
        end of the body. Raises HTTPParseError when the stream ends inside the framing."""
        conn = self.conn
        while True:
            have = len(conn.buf) - conn.pos
            if self._mode == _BODY_CHUNKED:
                if self._chunk_left == 0:
                    if not self._next_chunk():
                        return 0
                    continue
                if have > 0:
                    return min(have, self._chunk_left)
            elif self._mode == _BODY_LENGTH:
                if self._length_left == 0:
                    self.message_complete = True
                    return 0
                if have > 0:
                    return min(have, self._length_left)
            elif self._mode == _BODY_UNTIL_CLOSE:
                if have > 0:
                    return have
                if conn.eof:
                    self.message_complete = True
                    return 0
            else:
                return 0
            if not conn.fill():
                if self._mode == _BODY_UNTIL_CLOSE:
                    continue
                raise HTTPParseError("connection closed before the end of the body")

    def _line_of_framing(self) -> bytes:
        """One CRLF-ended framing line (chunk size, trailer), without its end."""
        conn = self.conn
        while True:
            end = conn.buf.find(b"\r\n", conn.pos)
            if end >= 0:
                line = conn.buf[conn.pos : end]
                conn.pos = end + 2
                return line
            if len(conn.buf) - conn.pos > 1024:
                raise HTTPParseError("chunk framing line too long")
            if not conn.fill():
                raise HTTPParseError("connection closed inside the chunk framing")

    def _next_chunk(self) -> bool:
        """Start the next chunk (after the CRLF of the previous); False at the last chunk."""
        if self.message_complete:
            return False
        if self._open_chunk():
            return True
        if self._crlf_due:
            if self._line_of_framing() != b"":
                raise HTTPParseError("chunk not followed by CRLF")
            self._crlf_due = False
        size_line = self._line_of_framing().split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise HTTPParseError(f"bad chunk size: {size_line[:40]!r}") from None
        if size < 0:
            raise HTTPParseError(f"bad chunk size: {size_line[:40]!r}")
        if size == 0:
            while self._line_of_framing() != b"":  # trailers, up to the empty line
                pass
            self.message_complete = True
            return False
        self._chunk_left = size
        self._crlf_due = True
        return True

    def _open_chunk(self) -> int:
        """The fast path of :meth:`_next_chunk`: the previous chunk's CRLF and a plain size line
        (reading once when the buffer is empty, the usual case of one event per read). Returns
        the new chunk's size, or 0 where :meth:`_next_chunk`'s careful path must take over (an
        extension, the last chunk, a size line split across reads, the end of the stream)."""
        conn = self.conn
        buf, pos = conn.buf, conn.pos
        if self._crlf_due:
            if not buf.startswith(b"\r\n", pos):
                return 0
            pos = conn.pos = pos + 2
            self._crlf_due = False
        if pos == len(buf):
            if not conn.fill():
                return 0
            buf, pos = conn.buf, conn.pos
        end = buf.find(b"\r\n", pos, pos + 18)
        if end < 0:
            return 0
        try:
            size = int(buf[pos:end], 16)
        except ValueError:
            return 0
        if size <= 0:
            return 0
        conn.pos = end + 2
        self._chunk_left = size
        self._crlf_due = True
        return size

    def _take(self, n: int) -> bytes:
        conn = self.conn
        data = conn.buf[conn.pos : conn.pos + n]
        conn.pos += n
        if self._mode == _BODY_CHUNKED:
            self._chunk_left -= n
        elif self._mode == _BODY_LENGTH:
            self._length_left -= n
            if self._length_left == 0:
                self.message_complete = True
        return data

    # ---- the reading API ----------------------------------------------------------------------
    def readline(self, sep: bytes = b"\n", limit: int = -1) -> bytes:
        """The body up to and including the next ``sep`` (one byte); the rest at the end of the
        body; b"" once the body is read. With ``limit`` >= 0 at most ``limit`` bytes: a longer
        line comes back cut, without its ``sep`` (the caller tells it by that), so one line
        never holds more memory than ``limit``, whatever the server sends."""
        return self._line(sep, limit, False)

    def between_chunks(self) -> bool:
        """No chunk's data or closing CRLF is left unread: the next body bytes start a chunk."""
        return not (self._chunk_left or self._crlf_due)

    def read_in_hub(self, stream: Any) -> None:
        """Let the connection's reader record ``stream``'s ordinary token events while the
        stream's greenlet waits (a ``SteadyStream``; None: no more), where the connection can
        (``kernel_transport.StampedConnection``); otherwise nothing."""
        if hasattr(self.conn, "steady"):
            self.conn.steady = stream  # type: ignore[attr-defined]

    def read_sse_line(self, sep: bytes = b"\n", limit: int = -1) -> bytes:
        """:meth:`readline`, and the blank line after the line when its ``sep`` is already in
        the same chunk within ``limit``: the line then ends with ``sep`` twice (an SSE event's
        last line and the blank line that ends the event in one call, the usual chunk)."""
        return self._line(sep, limit, True)

    def _line(self, sep: bytes, limit: int, blank: bool) -> bytes:
        conn = self.conn
        if self._mode == _BODY_CHUNKED:  # fast path: the line is in this (or the next) chunk
            left = self._chunk_left or (not self.message_complete and self._open_chunk())
            if left > 0:
                buf, pos = conn.buf, conn.pos
                stop = pos + (left if limit < 0 or left < limit else limit)
                end = buf.find(sep, pos, stop)
                if end >= 0:
                    end += 1
                    # its blank line, taken too (not after a line of two bytes or less: the
                    # stream loop reads such a line, blank or whitespace, as a blank line)
                    if blank and end - pos > 2 and buf.startswith(sep, end, stop):
                        end += 1
                    left -= end - pos
                    if left == 0 and buf.startswith(b"\r\n", end):  # the chunk's own CRLF
                        conn.pos = end + 2
                        self._crlf_due = False
                    else:
                        conn.pos = end
                    self._chunk_left = left
                    return buf[pos:end]
        parts: list[bytes] = []
        room = math.inf if limit < 0 else limit  # bytes the line may still take
        while room > 0:
            n = self._available()
            if n == 0:
                break
            n = int(min(n, room))
            end = conn.buf.find(sep, conn.pos, conn.pos + n)
            if end >= 0:
                piece = self._take(end + 1 - conn.pos)
                if not parts:
                    return piece
                parts.append(piece)
                break
            parts.append(self._take(n))
            room -= n
        return b"".join(parts)

    def read(self, length: int | None = None) -> bytes:
        """Up to ``length`` body bytes (all of the rest when None)."""
        parts: list[bytes] = []
        left = math.inf if length is None else length
        while left > 0:
            n = self._available()
            if n == 0:
                break
            piece = self._take(int(min(n, left)))
            parts.append(piece)
            left -= len(piece)
        return b"".join(parts)

    def should_close(self) -> bool:
        """True when the connection cannot carry another request."""
        return not self.message_complete or not self._keep_alive

    def release(self) -> None:
        """Done with the response: a connection that cannot be reused is closed."""
        if not self._released:
            self._released = True
            if self.should_close():
                self.conn.close()


def read_head(conn: Http11Connection) -> Http11Response:
    """Read a response head (skipping 1xx interim answers)."""
    while True:
        start = True
        while True:
            end = conn.buf.find(b"\r\n\r\n", conn.pos)
            if end >= 0:
                break
            if len(conn.buf) - conn.pos > MAX_HEAD_BYTES:
                raise HTTPParseError("response head too long")
            try:
                got = conn.fill()
            except ConnectionResetError:
                if start and conn.pos == len(conn.buf):
                    raise HTTPConnectionClosed("connection closed.") from None
                raise
            if not got:
                if start and conn.pos == len(conn.buf):
                    raise HTTPConnectionClosed("connection closed.")
                raise HTTPParseError("connection closed before the end of the headers")
            start = False
        head = conn.buf[conn.pos : end].decode("latin-1")
        conn.pos = end + 4
        resp = _parse_head(conn, head)
        if resp.status_code >= 200 or resp.status_code == 101:
            return resp


def _parse_head(conn: Http11Connection, head: str) -> Http11Response:
    lines = head.split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or parts[0] not in ("HTTP/1.1", "HTTP/1.0"):
        raise HTTPParseError(f"bad status line: {lines[0][:80]!r}")
    try:
        status = int(parts[1])
    except ValueError:
        raise HTTPParseError(f"bad status line: {lines[0][:80]!r}") from None
    if not 100 <= status <= 999:
        raise HTTPParseError(f"bad status code: {status}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HTTPParseError(f"bad header line: {line[:80]!r}")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return Http11Response(conn, parts[0], status, headers)


def _ip_family(host: str) -> int | None:
    """The address family of an IP literal (``127.0.0.1``, ``::1``); None for a name."""
    try:
        version = ipaddress.ip_address(host).version
    except ValueError:
        return None
    return gevent.socket.AF_INET if version == 4 else gevent.socket.AF_INET6


class Http11Client:
    """Requests to one server over one keep-alive connection, opened on first use."""

    connection_class: type[Http11Connection] = Http11Connection
    #: :meth:`request` says when the request's last byte went to the kernel (``on_sent``)
    stamps_sends = True

    def __init__(
        self, host: str, port: int, *, connection_timeout: float, network_timeout: float
    ) -> None:
        self.host = host
        self.port = port
        self.connection_timeout = connection_timeout
        self.network_timeout = network_timeout
        self._conn: Http11Connection | None = None

    def _open(self) -> Http11Connection:
        family = _ip_family(self.host)
        if family is None:  # a name: the resolver (gevent's runs getaddrinfo on a thread)
            sock = gevent.socket.create_connection(
                (self.host, self.port), timeout=self.connection_timeout
            )
        else:  # an address: no resolver round trip on the connect's path
            sock = gevent.socket.socket(family, gevent.socket.SOCK_STREAM)
            try:
                sock.settimeout(self.connection_timeout)
                sock.connect((self.host, self.port))
            except BaseException:
                sock.close()
                raise
        sock.setsockopt(gevent.socket.IPPROTO_TCP, gevent.socket.TCP_NODELAY, 1)
        sock.settimeout(self.network_timeout)
        return self.connection_class(sock)

    def connect(self) -> bool:
        """Open the connection now unless one is open; True when this opened it."""
        conn = self._conn
        if conn is not None and conn.sock.fileno() >= 0 and not conn.eof:
            return False
        if conn is not None:  # ended by the server: closed here, not left to the collector
            self._conn = None  # (a stamped connection stays registered until it is closed)
            conn.close()
        self._conn = self._open()
        return True

    def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        on_sent: Callable[[float], None] | None = None,
    ) -> Http11Response:
        """Write a request and return the response once its head is in. ``on_sent`` gets
        ``perf_counter()`` as the final send returns: the request's last byte is in the kernel
        (one clock read per request; a send that fails never calls it)."""
        self.connect()
        conn = self._conn
        assert conn is not None
        host = self.host if self.port in (80, None) else f"{self.host}:{self.port}"
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
        given = {k.lower() for k in (headers or {})}
        for name, value in (headers or {}).items():
            lines.append(f"{name}: {value}")
        if "user-agent" not in given:
            lines.append("User-Agent: locust-llm")
        if body or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        conn.start_request()
        try:
            try:
                conn.sock.sendall(head + body)
                if on_sent is not None:
                    on_sent(perf_counter())
            except (BrokenPipeError, ConnectionResetError):  # a kept connection the server closed
                raise HTTPConnectionClosed("connection closed.") from None
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.ECONNRESET):
                    raise HTTPConnectionClosed("connection closed.") from None
                raise
            return read_head(conn)
        except BaseException:
            self._drop()
            raise

    def get(self, path: str, headers: Mapping[str, str] | None = None) -> Http11Response:
        return self.request("GET", path, headers=headers)

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        self._drop()
