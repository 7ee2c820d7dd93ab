"""A tiny OpenAI-style streaming server for client tests that need a server the simulator is not.

It streams ``tokens`` chat chunks ``interval_s`` apart and can misbehave on purpose: leave out the
usage chunk (servers that ignore ``stream_options``), or put reasoning before content. Runs its
own asyncio loop in a thread on 127.0.0.1, port 0.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass


@dataclass
class FakeConfig:
    tokens: int = 5
    interval_s: float = 0.01
    usage: bool = True
    reasoning_tokens: int = 0
    model: str = "fake-model"
    terminator_delay_s: float = 0.0  # send the chunked terminator this long after [DONE]
    garbage_head: bool = False  # answer completions with a response head that is not HTTP
    connections: list[int] | None = None  # if given, one entry is appended per connection


def _chunk(delta: dict[str, str], usage: dict[str, int] | None = None) -> bytes:
    body: dict[str, object] = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
    }
    if usage is not None:
        body = {"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": usage}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def _handle(
    cfg: FakeConfig, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    if cfg.connections is not None:
        cfg.connections.append(1)
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length:
                await reader.readexactly(length)
            if head.startswith(b"GET /v1/models"):
                body = json.dumps({"data": [{"id": cfg.model}]}).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(body) + body
                )
                await writer.drain()
                continue
            if cfg.garbage_head:
                writer.write(b"HTTQ/9 what\r\n\r\n")
                await writer.drain()
                break
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )

            async def send(data: bytes) -> None:
                writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                await writer.drain()

            for i in range(cfg.reasoning_tokens):
                await asyncio.sleep(cfg.interval_s)
                await send(_chunk({"reasoning_content": f"r{i} "}))
            for i in range(cfg.tokens):
                await asyncio.sleep(cfg.interval_s)
                await send(_chunk({"content": f"t{i} "}))
            if cfg.usage:
                total = cfg.tokens + cfg.reasoning_tokens
                await send(_chunk({}, {"prompt_tokens": 7, "completion_tokens": total}))
            await send(b"data: [DONE]\n\n")
            if cfg.terminator_delay_s:
                await asyncio.sleep(cfg.terminator_delay_s)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


@contextmanager
def fake_openai_server(cfg: FakeConfig | None = None) -> Iterator[str]:
    """Yields the base URL of a running fake server; stops it on exit."""
    cfg = cfg or FakeConfig()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, object] = {}

    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: _handle(cfg, r, w), "127.0.0.1", 0)
        holder["port"] = server.sockets[0].getsockname()[1]
        holder["server"] = server
        started.set()
        async with server:
            await server.serve_forever()

    def run() -> None:
        with suppress(asyncio.CancelledError):
            loop.run_until_complete(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(5)
    try:
        yield f"http://127.0.0.1:{holder['port']}"
    finally:

        def stop() -> None:
            for task in asyncio.all_tasks(loop):
                task.cancel()

        loop.call_soon_threadsafe(stop)
        thread.join(5)
        loop.close()
