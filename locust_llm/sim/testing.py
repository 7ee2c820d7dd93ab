"""Start a real simulator from a test or a script: ``with running_sim(**config) as url: ...``.

:func:`ideal_engine` makes a bare engine whose steps take exactly their roofline time (full
efficiency, no host time): the physics tests' reference.

:func:`burst_connect_times` fires thousands of connects at once at a port and times each (the
listen-backlog check). :func:`stream_chat` sends one streamed chat request with the standard
library and returns its usage chunk (tests and benchmarks use it as a small independent client).

The server runs on its own event loop in a background thread, on 127.0.0.1 port 0 unless the
config says otherwise; leaving the block stops it, closes its connections and its trace file,
and joins the thread. Startup errors (a bad config) are raised in the caller's thread.
"""

from __future__ import annotations

import asyncio
import json
import math
import selectors
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from locust_llm.sim.config import SimConfig, config_from_mapping
from locust_llm.sim.engine import Engine, SimRequest
from locust_llm.sim.server import SimServer

#: Settings that leave a step its roofline time alone: full efficiency, no host time.
IDEAL_PHYSICS: dict[str, float] = {
    "bandwidth_efficiency": 1.0,
    "compute_efficiency": 1.0,
    "step_overhead_s": 0.0,
    "step_overhead_per_seq_s": 0.0,
    "tp_step_overhead_s": 0.0,
}


def ideal_engine(**config: Any) -> Engine:
    """An engine on :data:`IDEAL_PHYSICS` and ``config`` (SimConfig fields)."""
    return Engine(config_from_mapping({**IDEAL_PHYSICS, **config}))


def tpot(req: SimRequest) -> float:
    """A finished request's time per output token after the first (engine clock)."""
    return (req.finished_s - req.first_token_s) / (req.generated - 1)


class SimThread:
    """A :class:`SimServer` on a private loop in a daemon thread."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.server: SimServer | None = None
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="locust-llm-sim", daemon=True)

    def start(self, timeout_s: float = 10.0) -> str:
        """Start and return the base URL (``http://127.0.0.1:PORT``)."""
        self._thread.start()
        if not self._started.wait(timeout_s):
            raise RuntimeError(f"simulator did not start within {timeout_s} s")
        if self._error is not None:
            raise self._error
        assert self.server is not None
        return self.server.url

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._stop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout_s)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        finally:
            self.loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        try:
            self.server = SimServer(self.config)
            await self.server.start()
        except BaseException as exc:
            self._error = exc
            self._started.set()
            return
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            await self.server.stop()


@contextmanager
def running_sim(**config: Any) -> Iterator[str]:
    """A running simulator for the block; yields its base URL. Keywords are SimConfig fields."""
    config.setdefault("port", 0)
    thread = SimThread(config_from_mapping(config))
    url = thread.start()
    try:
        yield url
    finally:
        thread.stop()


def stream_chat(
    url: str, text: str, *, max_tokens: int, request_id: str = "", timeout_s: float = 60.0
) -> dict[str, Any]:
    """Stream one chat completion (``ignore_eos``, usage asked) and return its usage object."""
    body = {
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"Content-Type": "application/json"}
    if request_id:
        headers["X-Request-Id"] = request_id
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(), headers)
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        events = [x[6:] for x in resp.read().decode().splitlines() if x[:6] == "data: "]
    usage: dict[str, Any] = json.loads(events[-2])["usage"]
    return usage


def burst_connect_times(port: int, n: int, *, timeout_s: float = 10.0) -> list[float]:
    """Fire ``n`` non-blocking connects at once; each one's seconds from its own connect call
    until it completed (completions are polled between batches of 50 calls)."""
    sel = selectors.DefaultSelector()
    socks: list[socket.socket] = []
    started: list[float] = []
    done: dict[int, float] = {}

    def poll(timeout: float) -> None:
        for key, _ in sel.select(timeout=timeout):
            done[key.data] = time.perf_counter() - started[key.data]
            sel.unregister(key.fileobj)

    try:
        for i in range(n):
            s = socket.socket()
            s.setblocking(False)
            started.append(time.perf_counter())
            s.connect_ex(("127.0.0.1", port))
            sel.register(s, selectors.EVENT_WRITE, i)
            socks.append(s)
            if i % 50 == 49:
                poll(0)
        end = time.perf_counter() + timeout_s
        while len(done) < n and time.perf_counter() < end:
            poll(0.05)
        for s in socks[:: n // 10]:  # and the server serves them
            s.setblocking(True)
            s.settimeout(10.0)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(64).startswith(b"HTTP/1.1 200")
    finally:
        sel.close()
        for s in socks:
            s.close()
    return [done.get(i, math.inf) for i in range(n)]
