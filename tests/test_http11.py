"""The HTTP/1.1 reader of ``locust_llm.client.http11`` against scripted raw-socket servers.

Each server (a plain thread in this process) answers one or more requests with bytes given
here, cut into pieces written with pauses between them, so lines, chunk sizes and heads arrive
split at awkward places. The reader must return what geventhttpclient (an HTTP parser we did
not write) returns for the same bytes, and fail the same way: the same exception classes, which
the transport maps to error kinds.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError

from locust_llm.client.http11 import Http11Client
from locust_llm.client.kernel_transport import StampedClient

SSE_LINES = [b'data: {"choices":[{"delta":{"content":"tok%d"}}]}\n' % i for i in range(5)]


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


HEAD_CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
WHOLE = HEAD_CHUNKED + chunked(*SSE_LINES)
ALL = b"".join(SSE_LINES)


@contextmanager
def scripted(answers: list[list[bytes]], close_after: bool = False) -> Iterator[tuple[int, list]]:
    """A server on 127.0.0.1:0 answering its n-th request (over any connection) with the n-th
    answer's pieces, written 5 ms apart. Yields (port, connections seen)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(5)
    seen: list[int] = []
    stop = threading.Event()
    queue = list(answers)

    def serve_conn(conn: socket.socket) -> None:
        buf = b""
        with conn:
            while queue and not stop.is_set():
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                for piece in queue.pop(0):
                    conn.sendall(piece)
                    time.sleep(0.005)
                if close_after:
                    return
            if not close_after:
                stop.wait(5)  # keep the connection open (a silent server) until the test ends

    def serve() -> None:
        while not stop.is_set() and queue:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            seen.append(1)
            serve_conn(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], seen
    finally:
        stop.set()
        listener.close()
        thread.join(5)


def ours(port: int) -> Http11Client:
    return Http11Client("127.0.0.1", port, connection_timeout=2, network_timeout=2)


def stamped(port: int) -> StampedClient:
    """Ours with kernel stamps: its own read path (recvmsg, the wait on a drained queue)."""
    return StampedClient("127.0.0.1", port, connection_timeout=2, network_timeout=2)


def theirs(port: int) -> HTTPClient:
    return HTTPClient("127.0.0.1", port, connection_timeout=2, network_timeout=2, concurrency=1)


def read_lines(resp: object) -> list[bytes]:
    lines = []
    while line := resp.readline(b"\n"):  # type: ignore[attr-defined]
        lines.append(line)
    return lines


def split_every(data: bytes, n: int) -> list[bytes]:
    return [data[i : i + n] for i in range(0, len(data), n)]


BODIES: dict[str, list[bytes]] = {
    "one chunk per line": [HEAD_CHUNKED, *[chunked(line)[:-5] for line in SSE_LINES], b"0\r\n\r\n"],
    "lines across chunks": [HEAD_CHUNKED + chunked(ALL[:7], ALL[7:])],
    "byte by byte": [*split_every(WHOLE, 1)[:400], WHOLE[400:]],
    "content-length": [
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(b"".join(SSE_LINES)),
        b"".join(SSE_LINES),
    ],
    "chunk extension and trailer": [
        HEAD_CHUNKED
        + b"%x;ext=1\r\n%b\r\n0\r\nX-Trailer: 1\r\n\r\n"
        % (len(b"".join(SSE_LINES)), b"".join(SSE_LINES))
    ],
    "interim 100 first": [b"HTTP/1.1 100 Continue\r\n\r\n", HEAD_CHUNKED + chunked(*SSE_LINES)],
}


@pytest.mark.parametrize("name", list(BODIES))
def test_lines_match_geventhttpclient_and_the_connection_is_reused(name: str) -> None:
    pieces = BODIES[name]
    results = {}
    for label, make in (("ours", ours), ("stamped", stamped), ("theirs", theirs)):
        with scripted([pieces, pieces]) as (port, seen):
            client = make(port)
            got = []
            for _ in range(2):
                resp = client.request("POST", "/v1/x", body=b"{}", headers={"A": "b"})
                got.append((resp.status_code, read_lines(resp), resp.should_close()))
                resp.release()
            client.close()
            results[label] = (got, len(seen))
    assert results["ours"] == results["theirs"] == results["stamped"]
    (status, lines, close), _ = results["ours"][0][0], None
    assert status == 200 and b"".join(lines) == b"".join(SSE_LINES) and not close
    assert results["ours"][1] == 1  # both requests on one connection


def test_connection_close_and_http10_bodies_end_at_close() -> None:
    body = b"".join(SSE_LINES)
    for head in (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", b"HTTP/1.0 200 OK\r\n\r\n"):
        with scripted([[head, body]], close_after=True) as (port, _):
            client = ours(port)
            resp = client.request("POST", "/", body=b"{}")
            assert read_lines(resp) == SSE_LINES
            assert resp.message_complete and resp.should_close()
            resp.release()
            client.close()


def test_read_is_bounded_and_reads_the_rest() -> None:
    with scripted([[HEAD_CHUNKED + chunked(b"0123456789", b"abcdef")]]) as (port, _):
        client = ours(port)
        resp = client.request("POST", "/", body=b"{}")
        assert resp.read(4) == b"0123"
        assert not resp.message_complete and resp.should_close()
        assert resp.read() == b"456789abcdef"
        assert resp.message_complete and not resp.should_close()
        client.close()


FAILURES: dict[str, tuple[list[bytes], type[BaseException], str]] = {
    "closed before any byte": ([], HTTPConnectionClosed, "head"),
    "garbled status line": ([b"HTPT/1.1 2OO OK\r\n\r\n"], HTTPParseError, "head"),
    "garbled header": ([b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"], HTTPParseError, "head"),
    "cut inside the head": ([b"HTTP/1.1 200 OK\r\nContent-Ty"], HTTPParseError, "head"),
    "bad chunk size": ([HEAD_CHUNKED + b"zz\r\n"], HTTPParseError, "body"),
    "cut inside a chunk": ([HEAD_CHUNKED + b"40\r\n" + SSE_LINES[0][:20]], HTTPParseError, "body"),
}


@pytest.mark.parametrize("name", list(FAILURES))
def test_failures_raise_what_geventhttpclient_raises(name: str) -> None:
    pieces, expected, where = FAILURES[name]
    for make in (ours, stamped, theirs):
        with scripted([pieces], close_after=True) as (port, _):
            client: Callable = make(port)  # type: ignore[assignment]
            with pytest.raises(expected):
                resp = client.request("POST", "/", body=b"{}")  # type: ignore[attr-defined]
                assert where == "body", f"{make.__name__}: head accepted"
                read_lines(resp)
            client.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("client_class", [Http11Client, StampedClient])
def test_a_silent_server_times_out(client_class: type) -> None:
    """The stamped reader's wait for a response's first bytes (the sweep's) keeps the socket's
    own timeout too."""
    with scripted([[b"HTTP/1.1 200 OK\r\n"]]) as (port, _):
        client = client_class("127.0.0.1", port, connection_timeout=2, network_timeout=0.2)
        start = time.perf_counter()
        with pytest.raises(TimeoutError):
            client.request("POST", "/", body=b"{}")
        assert 0.15 < time.perf_counter() - start < 2
        client.close()


@pytest.mark.parametrize("client_class", [Http11Client, StampedClient])
def test_a_server_silent_after_a_line_times_out_the_next_read(client_class: type) -> None:
    """The stamped reader waits for a drained socket before reading it: the wait keeps the
    socket's own timeout."""
    with scripted([[HEAD_CHUNKED + chunked(SSE_LINES[0])[:-5]]]) as (port, _):
        client = client_class("127.0.0.1", port, connection_timeout=2, network_timeout=0.2)
        resp = client.request("POST", "/", body=b"{}")
        assert resp.readline(b"\n") == SSE_LINES[0]
        start = time.perf_counter()
        with pytest.raises(TimeoutError):
            while resp.readline(b"\n"):
                pass
        assert 0.15 < time.perf_counter() - start < 2
        client.close()
