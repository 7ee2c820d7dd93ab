"""The floor: a minimal blocking-socket client (one thread per stream), no HTTP library.

It writes the request with one ``sendall`` and timestamps every ``recv`` that carries a
token-bearing line, so its errors against the trace are what this machine's loopback, kernel
and simulator cost any client. Closed loop only (threads, one keep-alive connection each).
"""

from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from bench.peers.common import (
    MAX_TOKENS,
    MODEL,
    ClientRun,
    CpuMeter,
    Load,
    Timed,
    prompt_text,
)

_TOKEN = re.compile(rb'"content": ?"[^"]')
_COMPLETION = re.compile(rb'"completion_tokens": ?(\d+)')
_PROMPT = re.compile(rb'"prompt_tokens": ?(\d+)')


def _one(sock: socket.socket, index: int) -> Timed:
    body = json.dumps(
        {
            "model": MODEL,
            "stream": True,
            "max_tokens": MAX_TOKENS,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": prompt_text(index)}],
        }
    ).encode()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
    req = head + b"Content-Length: %d\r\n\r\n%b" % (len(body), body)  # fmt: skip
    wall, t0 = time.time(), time.perf_counter()
    sock.sendall(req)
    buf, first, last, now = bytearray(), math.nan, math.nan, t0
    while not buf.endswith(b"0\r\n\r\n"):
        data = sock.recv(65536)
        now = time.perf_counter()
        if not data:
            raise ConnectionError("closed mid-stream")
        buf += data
        if _TOKEN.search(data):
            if math.isnan(first):
                first = now
            last = now
    n = int(_COMPLETION.search(buf).group(1))  # type: ignore[union-attr]
    prompt = int(_PROMPT.search(buf).group(1))  # type: ignore[union-attr]
    tpot = (last - first) / (n - 1) if n > 1 else math.nan
    return Timed(start_wall_s=wall, ttft_s=first - t0, e2e_s=now - t0, tpot_s=tpot,
                 itl_mean_s=tpot, output_tokens=n, last_token_s=last - t0,
                 input_tokens=prompt)  # fmt: skip


def run(url: str, load: Load, work: Path, *, cpu: int | None = None,
        timeout_s: float = 300, together: bool = False) -> ClientRun:  # fmt: skip
    """Closed loop in this process (``cpu`` pinning is not applied here). ``together``: every
    thread connects, then all start their first request at once (a barrier), so the burst is
    as dense as the machine allows; else each thread starts as soon as it has connected, and
    the threads' start-up spreads the first requests out (~0.5 ms per thread)."""
    if load.open_loop:
        return ClientRun("raw", load, [], note="closed loop only")
    parts = urlsplit(url)
    records: list[Timed] = []
    failed = [0]
    counter = iter(range(load.requests))
    lock = threading.Lock()
    deadline = time.time() + timeout_s
    start = threading.Barrier(load.concurrency) if together else None

    def worker() -> None:
        sock = socket.create_connection((parts.hostname, parts.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if start is not None:
            try:
                start.wait(timeout=max(deadline - time.time(), 1.0))
            except threading.BrokenBarrierError:  # a thread that never connected: none starts
                sock.close()
                with lock:
                    failed[0] += 1
                return
        with sock:
            while time.time() < deadline:
                with lock:
                    index = next(counter, None)
                if index is None:
                    return
                try:
                    rec = _one(sock, index)
                except (OSError, AttributeError, ValueError):
                    failed[0] += 1
                    return
                with lock:
                    records.append(rec)

    import os

    meter = CpuMeter(os.getpid()).start()
    started = time.time()
    threads = [threading.Thread(target=worker) for _ in range(load.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ClientRun("raw", load, records, failed=failed[0], wall_s=time.time() - started,
                     cpu_samples=meter.stop(), note="reference floor")  # fmt: skip
