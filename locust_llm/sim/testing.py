"""Start a real simulator from a test or a script: ``with running_sim(**config) as url: ...``.

:func:`stream_chat` sends one streamed chat request to it with the standard library and
returns the usage chunk (tests and benchmarks use it as an independent little client).

The server runs on its own event loop in a background thread, on 127.0.0.1 port 0 unless the
config says otherwise; leaving the block stops it, closes its connections and its trace file,
and joins the thread. Startup errors (a bad config) are raised in the caller's thread.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from locust_llm.sim.config import SimConfig, config_from_mapping
from locust_llm.sim.server import SimServer


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
