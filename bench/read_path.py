"""The client's per-token read path alone: CPU us per token with no socket and no wait.

The real :class:`~locust_llm.client.http11.Http11Response` and
:class:`~locust_llm.client.stream.StreamReader` read a chunked SSE answer from an in-memory
connection that hands over one simulator-shaped chunk per read (as the kernel transport's
steady state does, one token per read), into its record; and ``sse.parse_chunk`` on one chunk
alone; and the kernel transport's token check (``stamped_read.split_tokens``) on one such
chunk, in C where the module is built and in Python. What is left of a token's CPU in
``bench/capacity.py``'s ``ours-core`` is the transport (the read, its stamp, the ready reader,
the switches).

    .venv/bin/python bench/read_path.py
    PYTHONPATH=/tmp/old .venv/bin/python bench/read_path.py     # another commit's code

Prints the medians of ``--rounds`` rounds (a round reads ``--requests`` answers).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import timeit

import locust_llm.client.apis.chat  # noqa: F401  (registers the chat API)
from locust_llm.client import sse, stamped_read
from locust_llm.client.apis.base import get_api
from locust_llm.client.http11 import Http11Connection, Http11Response
from locust_llm.client.stream import Exchange, StreamReader, read_to_record
from locust_llm.metrics import RequestRecord

#: a chunk as the simulator and vLLM shape it (OpenAI chat.completion.chunk)
PAYLOAD = (
    b'{"id":"chatcmpl-5f1c2e9a0b7d4c3e8a6f","object":"chat.completion.chunk","created":1733380000,'
    b'"model":"bench-model","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,'
    b'"finish_reason":null}]}'
)


def _chunk(event: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(event), event)


class _MemoryConnection(Http11Connection):
    """A connection whose reads hand over ``reads`` one by one, stamped."""

    def __init__(self, reads: list[bytes]) -> None:
        super().__init__(None)  # type: ignore[arg-type]
        self._reads = iter(reads)
        self.arrival_s = 1.0

    def _recv(self) -> bytes:
        return next(self._reads, b"")


def answer_reads(tokens: int) -> list[bytes]:
    """One answer of ``tokens`` content chunks, one chunk per read, then [DONE] and the end."""
    event = b"data: " + PAYLOAD + b"\n\n"
    return [_chunk(event)] * tokens + [_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"]


def read_answer(reader: StreamReader, reads: list[bytes], tokens: int) -> None:
    headers = {"transfer-encoding": "chunked", "content-type": "text/event-stream"}
    resp = Http11Response(_MemoryConnection(reads), "HTTP/1.1", 200, headers)
    ex = Exchange(RequestRecord(request_id="r", endpoint="/e"))
    ex.stamp_send()
    record = read_to_record(reader, resp, ex)
    if not (record.ok and record.output_tokens == tokens):
        raise SystemExit(f"read failed: {record.error_kind} {record.error_message}")


def split_check_us(rounds: int, number: int = 100_000) -> dict[str, list[float]]:
    """The token check on one chunk of :data:`PAYLOAD`, us per call per round: ``C`` (absent
    where the module is not built) and ``Python``. Each form must count the chunk first."""
    chunk = _chunk(b"data: " + PAYLOAD + b"\n\n")
    head, tail = sse.text_split(b"data: " + PAYLOAD)  # type: ignore[misc]
    forms = {"Python": stamped_read.split_tokens_py}
    if stamped_read.COMPILED:
        forms = {"C": stamped_read.split_tokens, **forms}
    out = {}
    for name, check in forms.items():
        if check(chunk, head, tail, 1 << 20) != 1:
            raise SystemExit(f"the {name} token check did not count the chunk")
        times = timeit.repeat(lambda c=check: c(chunk, head, tail, 1 << 20), number=number,
                              repeat=rounds)  # fmt: skip
        out[name] = [t / number * 1e6 for t in times]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=200, help="tokens per answer")
    ap.add_argument("--requests", type=int, default=300, help="answers per round")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    reader = StreamReader(get_api("chat"))
    reads = answer_reads(args.tokens)
    per_token = []
    for _ in range(args.rounds):
        start = time.process_time()
        for _ in range(args.requests):
            read_answer(reader, reads, args.tokens)
        per_token.append((time.process_time() - start) / (args.requests * args.tokens) * 1e6)
    times = timeit.repeat(lambda: sse.parse_chunk(PAYLOAD), number=100_000, repeat=args.rounds)
    parse = [t / 100_000 * 1e6 for t in times]
    shape = f"{args.rounds} rounds of {args.requests} x {args.tokens}"
    print(f"read path: {statistics.median(per_token):.3f} us per token "
          f"(min {min(per_token):.3f}, {shape})")  # fmt: skip
    print(f"parse_chunk: {statistics.median(parse):.3f} us per chunk (min {min(parse):.3f})")
    for name, us in split_check_us(args.rounds).items():
        print(f"split check, {name}: {statistics.median(us):.3f} us per chunk (min {min(us):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
