"""A lean token source: OpenAI-style chat streams at a fixed token interval, to saturate a client.

The simulator's zero-cost engine runs its HTTP front, scheduler and trace in Python and tops out
at ~57,000 token events/s on one core (2,048 streams at a 20 ms interval come out at 30-36 ms,
bench/RESULTS.md): below what a client under test can read, so no client core saturates
beside it on a 2-core machine. This source does only what the capacity bench needs, in one
``epoll`` loop: HTTP/1.1 keep-alive, ``POST /v1/chat/completions`` with ``"stream": true``
(and ``GET /v1/models``), each answer ``--tokens`` tokens long, one token every
``--interval-ms`` from the request's arrival (the first one interval after it, as the zero-cost
engine's first step), each token its own ``send`` (its own TCP segment, ``TCP_NODELAY``), the
same chunk bytes the simulator writes (its :class:`~locust_llm.sim.openai_format.ChunkFormatter`;
the role chunk goes with the first token), then the usage chunk where the request asked for it
(``stream_options.include_usage``, as the simulator) and ``[DONE]``. A client that reads late
gets its tokens queued in order (the kernel's send buffer, then the source's own). Its timers
are a queue and a plain token's ``send`` is made in the loop itself: on one core of the bench's
2-core machine, with our client reading, it holds 20 ms at 3,072 streams (~137,000 token
events/s) and comes out at 24-29 ms at 4,096; a client that reads late has every token go
through the outbox, the slower path (22-24 ms at 3,072 with EvalScope:
``bench/results/cpu_per_token.md``).

Its trace (``--trace FILE``, written when it stops on SIGTERM or SIGINT) has the simulator's
per-request keys that :mod:`bench.peers.truth` reads: ``arrival``, ``first_token``,
``last_token`` (wall clock: when the token's bytes were handed to the kernel, or queued behind
bytes a late reader left in the socket's buffer: a lag measured from it starts at the queue),
``tokens_sent``,
``prompt_tokens`` (the words of the messages' contents, also the usage's), ``outcome``.

    python -m bench.peers.tokensource --port 0 --interval-ms 20 --tokens 200 --trace t.jsonl

prints its URL on the first line of stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import select
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.peers.simproc import serving_process
from locust_llm.sim.openai_format import ChunkFormatter

WORDS = (" the", " if", " even", " so", " and", " but", " then", " now")
HEADERS = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
MAX_REQUEST_BYTES = 1 << 20


def _chunked(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk (the simulator's front frames each SSE event the same way)."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


@dataclass(slots=True)
class Stream:
    """One answer in progress on a connection."""

    rid: str
    arrival: float
    tokens: int
    prompt_tokens: int
    chunks: ChunkFormatter  # the simulator's own encoder of this answer's SSE events
    conn: Conn  # a timer fires only into its stream, while this is still the connection's
    plain: tuple[bytes, ...] = ()  # a token's chunk bytes for each of WORDS (no finish reason)
    sent: int = 0
    first_token: float = 0.0


@dataclass(slots=True)
class Conn:
    sock: socket.socket
    inbox: bytearray = field(default_factory=bytearray)
    outbox: bytearray = field(default_factory=bytearray)
    stream: Stream | None = None  # the answer under way; the outbox waits for EPOLLOUT


class TokenSource:
    def __init__(self, port: int, interval_s: float, tokens: int, model: str) -> None:
        self.interval_s, self.tokens, self.model = interval_s, tokens, model
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(4096)
        self.listener.setblocking(False)
        self.epoll = select.epoll()
        self.epoll.register(self.listener.fileno(), select.EPOLLIN)
        self.conns: dict[int, Conn] = {}
        # (when, stream), a queue in the order the timers were set, not a heap: every timer is
        # set one interval after a time already passed (the token it follows, or a request's
        # arrival), so it is due no earlier than the others set before it, less however late
        # the loop took that token; a timer behind a later one fires that much late at most,
        # when the loop is late anyway (O(1) a token)
        self.due: deque[tuple[float, Stream]] = deque()
        self.trace: list[str] = []
        self.next_id = 0
        self.running = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    # -- the loop -------------------------------------------------------------------------
    def serve(self) -> None:
        while self.running:
            now = time.time()
            timeout = max(0.0, self.due[0][0] - now) if self.due else 0.05
            for fd, ev in self.epoll.poll(min(timeout, 0.05)):
                if fd == self.listener.fileno():
                    self._accept()
                elif ev & select.EPOLLOUT:
                    self._flush(fd)
                if ev & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR) and fd in self.conns:
                    self._read(fd)
            self._due_tokens(time.time())

    def _due_tokens(self, now: float) -> None:
        """Send every token due by ``now``; a plain token to a connection with nothing queued
        is sent here (the hot path, inlined), anything else by :meth:`_token`."""
        due, interval, plain = self.due, self.interval_s, len(WORDS)
        while due and due[0][0] <= now:
            _, s = due.popleft()
            conn = s.conn
            if conn.stream is not s:  # its connection closed or moved on meanwhile
                continue
            sent = s.sent + 1
            if sent == 1 or sent >= s.tokens or conn.outbox:
                self._token(s)
                continue
            s.sent = sent
            data = s.plain[sent % plain]  # made when the request came
            try:
                n = conn.sock.send(data)
            except BlockingIOError:
                n = 0
            except OSError:  # the peer has gone: its read or hang-up closes the connection
                n = len(data)
            if n < len(data):  # from now on the outbox waits for EPOLLOUT
                conn.outbox += data[n:]
                self.epoll.modify(conn.sock.fileno(), select.EPOLLIN | select.EPOLLOUT)
            due.append((s.arrival + interval * (sent + 1), s))

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except BlockingIOError:
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.conns[sock.fileno()] = Conn(sock)
            self.epoll.register(sock.fileno(), select.EPOLLIN)

    def _close(self, fd: int) -> None:
        conn = self.conns.pop(fd, None)
        if conn is None:
            return
        conn.stream = None  # its timers find it gone
        self.epoll.unregister(fd)
        conn.sock.close()

    def _read(self, fd: int) -> None:
        conn = self.conns[fd]
        try:
            data = conn.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close(fd)
            return
        conn.inbox += data
        if len(conn.inbox) > MAX_REQUEST_BYTES:
            self._close(fd)
            return
        self._parse(fd, conn)

    def _parse(self, fd: int, conn: Conn) -> None:
        if conn.stream is not None:
            return  # one request at a time per connection; the next waits in the inbox
        end = conn.inbox.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(conn.inbox[:end]).decode("latin-1").split("\r\n")
        length = 0
        for line in head[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip()) if value.strip().isdigit() else -1
        if length < 0 or len(head[0].split(" ")) < 2:
            self._refuse(fd, conn)
            return
        if len(conn.inbox) < end + 4 + length:
            return
        body = bytes(conn.inbox[end + 4 : end + 4 + length])
        del conn.inbox[: end + 4 + length]
        arrival = time.time()
        method, path = head[0].split(" ")[:2]
        if method == "GET" and path.rstrip("/").endswith("/models"):
            models = json.dumps({"object": "list", "data": [{"id": self.model, "object": "model",
                                 "owned_by": "bench"}]}).encode()  # fmt: skip
            self._send(fd, conn, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (len(models), models))  # fmt: skip
            self._parse(fd, conn)
            return
        if method != "POST" or not path.endswith("/chat/completions"):
            self._send(fd, conn, NOT_FOUND)
            self._parse(fd, conn)
            return
        try:
            req = json.loads(body)
            messages = req.get("messages", [])
            words = sum(len(str(m.get("content", "")).split()) for m in messages)
            tokens = max(1, min(self.tokens, int(req.get("max_tokens") or self.tokens)))
            usage = bool((req.get("stream_options") or {}).get("include_usage"))
        except (ValueError, TypeError, AttributeError):  # not a chat request this source can read
            self._refuse(fd, conn)
            return
        self.next_id += 1
        rid = f"chatcmpl-src{self.next_id:08d}"
        chunks = ChunkFormatter(chat=True, request_id=rid, model=self.model,
                                prompt_tokens=words, include_usage=usage)  # fmt: skip
        stream = Stream(rid, arrival, tokens, words, chunks, conn)
        stream.plain = tuple(_chunked(chunks.content(w, 0)) for w in WORDS)
        conn.stream = stream
        self._send(fd, conn, HEADERS)
        self.due.append((arrival + self.interval_s, stream))

    def _refuse(self, fd: int, conn: Conn) -> None:
        """A request this source cannot read: 400, and the connection closed."""
        with contextlib.suppress(OSError):
            conn.sock.send(BAD_REQUEST)
        self._close(fd)

    def _token(self, s: Stream) -> None:
        conn = s.conn
        fd = conn.sock.fileno()
        s.sent += 1
        last = s.sent == s.tokens
        if s.sent > 1 and not last:  # a plain token behind queued bytes (else the loop sends it)
            self._send(fd, conn, s.plain[s.sent % len(WORDS)])
        else:
            out = _chunked(s.chunks.content(WORDS[s.sent % len(WORDS)], s.sent,
                                            "stop" if last else None))  # fmt: skip
            if s.sent == 1:
                out = _chunked(s.chunks.role()) + out
            if last:
                usage = s.chunks.usage(s.sent)
                out += (_chunked(usage) if usage else b"") + _chunked(s.chunks.done)
                out += b"0\r\n\r\n"
            self._send(fd, conn, out)
            if s.sent == 1:
                s.first_token = time.time()
        if not last:
            self.due.append((s.arrival + self.interval_s * (s.sent + 1), s))
            return
        now = time.time()
        line = {"id": s.rid, "arrival": s.arrival, "first_token": s.first_token,
                "last_token": now, "tokens_sent": s.sent, "prompt_tokens": s.prompt_tokens,
                "outcome": "ok", "status": 200}  # fmt: skip
        self.trace.append(json.dumps(line))
        conn.stream = None
        if conn.inbox:
            self._parse(fd, conn)

    def _send(self, fd: int, conn: Conn, data: bytes) -> None:
        if conn.outbox:
            conn.outbox += data
            return
        try:
            n = conn.sock.send(data)
        except BlockingIOError:
            n = 0
        except OSError:
            return
        if n < len(data):  # the outbox was empty: from now on it waits for EPOLLOUT
            conn.outbox += data[n:]
            self.epoll.modify(fd, select.EPOLLIN | select.EPOLLOUT)

    def _flush(self, fd: int) -> None:
        conn = self.conns.get(fd)
        if conn is None:
            return
        try:
            n = conn.sock.send(conn.outbox)
        except BlockingIOError:
            return
        except OSError:  # the peer has gone: its read or hang-up closes the connection
            conn.outbox.clear()
            self.epoll.modify(fd, select.EPOLLIN)
            return
        del conn.outbox[:n]
        if not conn.outbox:
            self.epoll.modify(fd, select.EPOLLIN)

    def close(self) -> None:
        """Close every connection, the listener and the epoll set (the loop has stopped)."""
        for fd in list(self.conns):
            self._close(fd)
        self.listener.close()
        self.epoll.close()

    def write_trace(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in self.trace)


@contextmanager
def token_source(trace: Path, *, interval_ms: float, tokens: int, cpu: int | None = None,
                 log: Path | None = None) -> Iterator[str]:  # fmt: skip
    """A running token source writing ``trace`` when the block ends; yields its base URL."""
    cmd = [sys.executable, "-m", "bench.peers.tokensource", "--interval-ms", f"{interval_ms:g}",
           "--tokens", str(tokens), "--trace", str(trace)]  # fmt: skip
    with serving_process(cmd, cpu=cpu, log=log, what="token source") as url:
        yield url


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--interval-ms", type=float, default=20.0)
    p.add_argument("--tokens", type=int, default=200, help="tokens per answer (max_tokens caps it)")
    p.add_argument("--served-model-name", default="bench-model")
    p.add_argument("--trace", required=True)
    args = p.parse_args(argv)
    source = TokenSource(args.port, args.interval_ms / 1e3, args.tokens, args.served_model_name)

    def stop(*_: object) -> None:
        source.running = False

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(source.url, flush=True)
    try:
        source.serve()
    finally:  # what was sent is the bench's truth, whatever stopped the loop
        source.write_trace(args.trace)
        source.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
