"""The shared per-request work of the client-choice variants: one streamed chat request, timed.

Every variant locustfile in this folder differs only in its transport (how the request is sent
and how SSE lines come back). The work per line is the same as ``locust_llm.client.user``: one
``perf_counter()`` per line as it is handed over, ``locust_llm.client.sse.parse_chunk`` on the
payload,
``locust_llm.metrics.summarize_stream`` at the end. Each request sends its id as
``X-Request-Id`` so the bench matches it to the simulator's trace line exactly.

Configuration (environment): ``CHOICE_OUT`` (JSONL written at exit, one line per request),
``CHOICE_REQUESTS`` (requests per user; when every user has sent its share the runner quits),
``CHOICE_MAX_TOKENS``, ``CHOICE_MODEL``. :func:`install_gc_probe` records every garbage-collector
pause (``gc.callbacks``: wall time, ms, generation) into ``CHOICE_OUT + ".gc.json"``; the
``ours`` variant uses only that.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import time
from collections.abc import Callable, Iterable
from time import perf_counter
from typing import Any

import gevent
from locust import events
from locust.exception import StopUser

from bench.peers.common import MODEL, prompt_text
from locust_llm.client import sse
from locust_llm.metrics import RequestRecord, StreamTiming, summarize_stream

PATH = "/v1/chat/completions"
OUT = os.environ.get("CHOICE_OUT", "")
REQUESTS = int(os.environ.get("CHOICE_REQUESTS", "2"))
MAX_TOKENS = int(os.environ.get("CHOICE_MAX_TOKENS", "256"))
MODEL_NAME = os.environ.get("CHOICE_MODEL", MODEL)

_ids = itertools.count()
_prompts = itertools.count()
_results: list[dict[str, Any]] = []
_users_done = [0]
_gc: list[tuple[float, float, int]] = []  # (wall time at end, pause ms, generation)
_gc_start = [0.0]

#: a transport: (body dict, headers) -> (iterable of raw SSE lines as bytes, cleanup callable)
Transport = Callable[[dict[str, Any], dict[str, str]], tuple[Iterable[bytes], Callable[[], None]]]


class BadStream(Exception):
    """The stream ended without ``[DONE]`` or carried an error / malformed chunk."""


def request_body() -> dict[str, Any]:
    """The chat body every variant sends (the fields and prompts ``ours`` sends in this bench).

    No ``ignore_eos``: ``ours`` is run without ``--llm-ignore-eos``, so every client gets the
    simulator's fixed output length (200 tokens) rather than ``max_tokens``.
    """
    text = prompt_text(next(_prompts))
    return {"model": MODEL_NAME, "messages": [{"role": "user", "content": text}],
            "stream": True, "stream_options": {"include_usage": True},
            "max_tokens": MAX_TOKENS, "temperature": 0.0}  # fmt: skip


def consume(lines: Iterable[bytes], record: RequestRecord, timing: StreamTiming) -> int | None:
    """The per-line loop of ``locust_llm.client.user`` (timestamp, parse, token bookkeeping).

    Reads ``lines`` to their end (so the connection can be reused); returns usage tokens.
    """
    times, tokens = timing.chunk_times, timing.chunk_tokens
    parse = sse.parse_chunk
    usage: int | None = None
    prev_usage = 0
    done = False
    for line in lines:
        now = perf_counter()
        if done or line[:5] != b"data:":
            continue
        kind, chunk = parse(line[5:].strip())
        if kind == sse.KIND_CHUNK:
            assert chunk is not None
            if chunk.error is not None:
                raise BadStream(chunk.error[:200])
            if chunk.completion_tokens >= 0:
                usage = chunk.completion_tokens
                if chunk.prompt_tokens >= 0:
                    record.input_tokens = chunk.prompt_tokens
            if chunk.content or chunk.reasoning:
                times.append(now)
                if chunk.completion_tokens >= 0:
                    tokens.append(chunk.completion_tokens - prev_usage)
                    prev_usage = chunk.completion_tokens
                else:
                    tokens.append(0)
                if chunk.content and timing.first_content_time != timing.first_content_time:
                    timing.first_content_time = now
        elif kind == sse.KIND_DONE:
            done = True
            timing.end_time = now
        elif kind == sse.KIND_BAD:
            raise BadStream(f"malformed chunk: {line[:120]!r}")
    if not done:
        raise BadStream(f"stream closed after {len(times)} chunks without [DONE]")
    return usage


def one_request(user: Any, transport: Transport, *, fire_event: bool = False) -> None:
    """Send one request over ``transport`` and keep its result; quit once all users are done.

    ``fire_event``: fire Locust's ``request`` event here (for a transport that fires none
    itself), so every variant reports exactly one event per request.
    """
    sent = getattr(user, "_choice_sent", 0)
    if sent >= REQUESTS:
        _user_finished(user)
        raise StopUser()
    user._choice_sent = sent + 1
    record = RequestRecord(request_id=f"{os.getpid()}-{next(_ids)}", endpoint=PATH)
    headers = {"Content-Type": "application/json", "X-Request-Id": record.request_id}
    body = request_body()
    timing = StreamTiming(t0=0.0)
    usage: int | None = None
    error: BaseException | None = None
    record.start_wall_s = time.time()
    timing.t0 = perf_counter()
    try:
        lines, cleanup = transport(body, headers)
        try:
            usage = consume(lines, record, timing)
            record.ok = True
        finally:
            cleanup()
    except Exception as exc:  # a failed request is a result too
        error = exc
        record.error_kind, record.error_message = "failed", f"{type(exc).__name__}: {exc}"[:300]
    if timing.end_time != timing.end_time:
        timing.end_time = perf_counter()
    summarize_stream(record, timing, usage)
    if fire_event:
        user.environment.events.request.fire(
            request_type="POST", name=PATH, response_time=record.e2e_s * 1000.0,
            response_length=record.output_tokens, exception=error, context={},
        )  # fmt: skip
    _results.append({"id": record.request_id, "ok": record.ok, "error": record.error_message,
                     "start_wall_s": record.start_wall_s, "ttft_s": record.ttft_s,
                     "tpot_s": record.tpot_s, "e2e_s": record.e2e_s,
                     "last_token_s": record.last_token_s,
                     "output_tokens": record.output_tokens})  # fmt: skip


def _user_finished(user: Any) -> None:
    if getattr(user, "_choice_finished", False):
        return
    user._choice_finished = True
    _users_done[0] += 1
    env = user.environment
    if _users_done[0] >= env.parsed_options.num_users and env.runner is not None:
        gevent.spawn_later(0.2, env.runner.quit)


def _gc_callback(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _gc_start[0] = perf_counter()
        return
    if len(_gc) < 1_000_000:  # bounded
        _gc.append((time.time(), (perf_counter() - _gc_start[0]) * 1e3, info["generation"]))


def install_gc_probe() -> None:
    """Time every garbage collection of this process; written at exit next to CHOICE_OUT."""
    if _gc_callback not in gc.callbacks:
        gc.callbacks.append(_gc_callback)


@events.quitting.add_listener
def _write(**_kw: Any) -> None:
    if not OUT:
        return
    if _results:
        with open(OUT, "w", encoding="utf-8") as f:
            for row in _results:
                f.write(json.dumps(row, allow_nan=True) + "\n")
    with open(OUT + ".gc.json", "w", encoding="utf-8") as f:
        json.dump(_gc, f)


__all__ = ["PATH", "BadStream", "consume", "install_gc_probe", "one_request"]
