"""bench/capacity.py's split of a client's CPU into per request and per token: the arithmetic,
and the command run end to end at a tiny load (our client, under Locust and its core alone;
the peers are not installed in the suite)."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from bench.capacity import split_costs
from bench.peers.tokensource import WORDS, TokenSource, token_source

ROOT = Path(__file__).resolve().parents[1]


def test_the_split_recovers_known_per_request_and_per_token_costs() -> None:
    # u(L) = 12 + 400 / L: 37 us per token at 16 tokens, 14 at 200
    rows: list[dict[str, object]] = [
        {"client": "a", "output_tokens": 16, "cpu_us_per_token": 12 + 400 / 16},
        {"client": "a", "output_tokens": 200, "cpu_us_per_token": 12 + 400 / 200},
        {"client": "b", "output_tokens": 16, "cpu_us_per_token": 30 + 100 / 16},
        {"client": "b", "output_tokens": 200, "cpu_us_per_token": math.nan},
    ]
    a, b = split_costs(rows, (16, 200))
    assert a.startswith("a: 400 us per request, 12.00 us per token")
    assert b.startswith("b: nan us per request")  # a point that failed says so


def test_the_split_command_runs_and_prints_both_costs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "bench/capacity.py", "--clients", "ours,ours-core", "--streams", "2",
         "--rounds", "1", "--split-lengths", "4,12", "--work", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for client in ("ours", "ours-core"):  # under Locust, and its core alone (no Locust)
        (line,) = [x for x in done.stdout.splitlines() if x.startswith(f"{client}: ")]
        assert "us per request" in line and "us per token" in line and "nan" not in line


def test_the_lean_source_streams_what_the_clients_read_and_its_trace_matches(
    tmp_path: Path,
) -> None:
    """``--source lean`` (bench/peers/tokensource.py): our client under Locust reads every
    answer whole, each record pairs with a line of the source's trace (same prompt and output
    tokens, from the usage it sent), and the source kept its interval."""
    done = subprocess.run(
        [sys.executable, "bench/capacity.py", "--clients", "ours", "--streams", "4",
         "--rounds", "3", "--source", "lean", "--interval-ms", "10", "--work", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    row = json.loads(next(x for x in done.stdout.splitlines() if x.startswith("{")))
    assert row["source"] == "lean" and row["failed"] == 0
    assert row["records"] == row["matched"] == 12, row
    assert abs(row["sim_tpot_p50_ms"] - 10.0) < 1.0, row  # the source's own token interval


def _chat(sock: socket.socket, tokens: int) -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "a b c"}],
                       "stream": True, "max_tokens": tokens}).encode()  # fmt: skip
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
    sock.sendall(head + b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


def _read_until(sock: socket.socket, marker: bytes) -> bytes:
    data = b""
    while marker not in data:
        chunk = sock.recv(65536)
        assert chunk, data[-300:]
        data += chunk
    return data


def test_the_lean_source_keeps_a_new_streams_timing_after_a_client_hangs_up(
    tmp_path: Path,
) -> None:
    """A client that closes mid-stream leaves its timer behind; the connection that takes its
    descriptor next gets its own tokens on its own schedule (a timer fires only into the stream
    it was set for), a request the source cannot read gets 400, and the trace is written."""
    trace = tmp_path / "trace.jsonl"
    with token_source(trace, interval_ms=20, tokens=10) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as gone:
            _chat(gone, 10)
            _read_until(gone, b'"content":" ')  # its first token, then hang up
        with socket.create_connection(("127.0.0.1", port)) as bad:
            bad.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 3\r\n\r\n{x}")
            assert _read_until(bad, b"\r\n\r\n").startswith(b"HTTP/1.1 400")
        with socket.create_connection(("127.0.0.1", port)) as kept:
            _chat(kept, 10)
            _read_until(kept, b"data: [DONE]")
    (line,) = [json.loads(x) for x in trace.read_text().splitlines()]  # the kept stream's
    assert line["tokens_sent"] == 10 and line["prompt_tokens"] == 3
    assert line["first_token"] - line["arrival"] >= 0.019, line  # not a leftover timer's
    assert (line["last_token"] - line["first_token"]) / 9 >= 0.019, line


def test_the_lean_source_queues_a_late_readers_tokens_whole_and_in_order() -> None:
    """A client that reads nothing for a while (small buffers on both sides: the kernel's send
    buffer fills, then the source's own outbox takes the tokens) and then catches up gets every
    token of the answer, whole and in order: the outbox is flushed over several EPOLLOUT
    wakes, part of it at a time, and once it is empty the loop sends the next tokens itself
    again."""
    tokens = 4_000  # one every 0.5 ms: 2 s of answer

    class Counted(TokenSource):
        flushes = partial_flushes = 0
        queued: ClassVar[set[int]] = set()  # the tokens sent by the general path

        def _accept(self) -> None:
            super()._accept()
            for conn in self.conns.values():  # a fixed, small send buffer: the outbox is used
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)

        def _flush(self, fd: int) -> None:
            self.flushes += 1
            super()._flush(fd)
            conn = self.conns.get(fd)
            self.partial_flushes += bool(conn and conn.outbox)

        def _token(self, s: Any) -> None:
            self.queued.add(s.sent + 1)
            super()._token(s)

    source = Counted(0, 5e-4, tokens, "m")
    loop = threading.Thread(target=source.serve, daemon=True)
    loop.start()
    try:
        with socket.socket() as late:
            late.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
            late.settimeout(20)
            late.connect(("127.0.0.1", source.listener.getsockname()[1]))
            _chat(late, tokens)
            deadline = time.monotonic() + 20
            # the kernel's buffer is full and the outbox holds more than the buffer takes at once
            while max((len(c.outbox) for c in list(source.conns.values())), default=0) < 65536:
                assert time.monotonic() < deadline, "the source's outbox never filled"
                time.sleep(0.01)
            parts = [late.recv(4096)]
            while not b"".join(parts[-2:]).endswith(b"\r\n0\r\n\r\n"):  # the answer's end
                parts.append(late.recv(4096))
                assert parts[-1], b"".join(parts)[-300:]
    finally:
        source.running = False
        loop.join(timeout=10)
    assert not loop.is_alive()
    source.close()
    texts = _contents(b"".join(parts))
    assert texts == [WORDS[i % len(WORDS)] for i in range(1, tokens + 1)], texts[:5]
    assert json.loads(source.trace[0])["tokens_sent"] == tokens
    assert source.flushes > 1 and source.partial_flushes > 0, vars(source)
    queued = sorted(i for i in source.queued if 1 < i < tokens)
    assert queued, "no token went through the outbox"
    inline_again = set(range(queued[0], tokens)) - source.queued
    assert inline_again, "the loop never sent a token itself after the outbox took one"


def _contents(body: bytes) -> list[str]:
    """The content of each token event of a chunked SSE answer (the chunks read in order)."""
    pos = body.index(b"\r\n\r\n") + 4
    contents = []
    while True:
        size_end = body.index(b"\r\n", pos)
        size = int(body[pos:size_end], 16)
        if not size:
            return contents
        event = body[size_end + 2 : size_end + 2 + size]
        assert event.startswith(b"data: ") and event.endswith(b"\n\n"), event
        payload = event[6:-2]
        if payload != b"[DONE]":
            for choice in json.loads(payload).get("choices", []):
                if choice.get("delta", {}).get("content"):
                    contents.append(choice["delta"]["content"])
        pos = size_end + 2 + size + 2
