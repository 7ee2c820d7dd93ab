"""Two ways to read an SSE stream from a geventhttpclient response, for the hot-path benchmark.

``readline``: what ``locust_llm.client.user`` does today: ``resp.readline(b"\\n")`` per line (two
lines
per token: the ``data:`` line and the blank line after it), ``perf_counter()`` after each line,
``sse.parse_chunk`` on every ``data:`` line.

``drain``: one ``perf_counter()`` per socket read; every complete line already in the
response's body buffer is handled in one pass (blank lines skipped by a length check), and the
buffer is trimmed once per read. Lines that came in one read share its timestamp, which is
their true arrival time (the per-line clock instead advances with the parsing of the lines
before it). Uses the response's ``_body_buffer``/``_sock``/``feed`` (geventhttpclient 2.x).

Both return (t_first_token, t_last_token, t_end, token_chunks, usage completion tokens,
usage prompt tokens).
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

from locust_llm.client import sse

Result = tuple[float, float, float, int, int, int]


def read_readline(resp: Any) -> Result:
    parse = sse.parse_chunk
    readline = resp.readline
    first = last = end = 0.0
    chunks, usage, prompt = 0, -1, -1
    while True:
        line = readline(b"\n")
        now = perf_counter()
        if not line:
            break
        if line[:5] != b"data:":
            continue
        kind, chunk = parse(line[5:].strip())
        if kind == sse.KIND_CHUNK:
            if chunk.completion_tokens >= 0:  # type: ignore[union-attr]
                usage = chunk.completion_tokens  # type: ignore[union-attr]
                prompt = chunk.prompt_tokens  # type: ignore[union-attr]
            if chunk.content or chunk.reasoning:  # type: ignore[union-attr]
                if not chunks:
                    first = now
                last = now
                chunks += 1
        elif kind == sse.KIND_DONE:
            end = now
            break
    return first, last, end or perf_counter(), chunks, usage, prompt


def read_drain(resp: Any) -> Result:
    parse = sse.parse_chunk
    buf: bytearray = resp._body_buffer
    sock = resp._sock
    block = resp.block_size
    first = last = end = 0.0
    chunks, usage, prompt = 0, -1, -1
    now = perf_counter()  # the head (and maybe the first lines) arrived just now
    while True:
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            if nl - start > 5 and buf[start : start + 5] == b"data:":
                kind, chunk = parse(bytes(buf[start + 5 : nl]).strip())
                if kind == sse.KIND_CHUNK:
                    if chunk.completion_tokens >= 0:  # type: ignore[union-attr]
                        usage = chunk.completion_tokens  # type: ignore[union-attr]
                        prompt = chunk.prompt_tokens  # type: ignore[union-attr]
                    if chunk.content or chunk.reasoning:  # type: ignore[union-attr]
                        if not chunks:
                            first = now
                        last = now
                        chunks += 1
                elif kind == sse.KIND_DONE:
                    del buf[: nl + 1]
                    return first, last, now, chunks, usage, prompt
            start = nl + 1
        if start:
            del buf[:start]
        if resp.message_complete or sock is None:
            return first, last, end or perf_counter(), chunks, usage, prompt
        data = sock.recv(block)
        now = perf_counter()
        if not data:
            return first, last, perf_counter(), chunks, usage, prompt
        resp.feed(data)


VARIANTS = {"readline": read_readline, "drain": read_drain}
