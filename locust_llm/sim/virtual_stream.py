"""One streamed answer in virtual time, as the client receives it: chunks, faults, read timeout.

The real-time simulator's front (:mod:`locust_llm.sim.server`) turns engine tokens into chunks
and applies the request's injected fault; the client (:mod:`locust_llm.client.user`) reads them and
classifies what went wrong. :class:`VirtualStream` does both on virtual time, with the same
rules, so a virtual run's records carry the same error kinds a real run's do
(``tests/test_user_faults.py`` holds the real client to the same mapping):

===================  ====================================================  ===============
fault                what the front does                                   client's record
===================  ====================================================  ===============
``http500/503``      error answer at once, no engine request               ``http_5xx``
``http429``          429 at once                                           ``http_429``
``disconnect:N``     closes the connection after the chunk that brings     ``stream_broken``
                     the N-th token (unless it was the last)
``malformed:K``      the K-th chunk is not JSON                            ``bad_payload``
``stall:S``          holds every byte for S s after the first chunk        ``timeout`` if S
                                                                           > read timeout
``slow_first_byte``  holds every byte for S s after arrival                ``timeout`` if S
                                                                           > read timeout
===================  ====================================================  ===============

A chunk leaves when ``tokens_per_chunk`` tokens are pending or with the last token; a held chunk
leaves when the hold ends. The client's read timeout is the longest wait for the next byte (the
head comes with the first chunk): when no byte arrives for ``read_timeout_s`` the client gives
up, with a ``timeout`` record at that instant, and only then does the request leave the engine
(until the client hangs up the engine keeps generating, as the real-time front does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from locust_llm.metrics import classify_http_error
from locust_llm.sim.faults import Fault

HTTP_FAULT_STATUS = {"http500": 500, "http503": 503, "http429": 429}
_HTTP_FAULT_MESSAGE = {
    500: "Internal server error (injected fault)",
    503: "Service unavailable (injected fault)",
    429: "Rate limit reached (injected fault); retry later",
}


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """How a stream that did not complete ended, as the client records it."""

    at_s: float  # when the client saw it (virtual time)
    kind: str  # one of metrics.ERROR_KINDS
    status: int  # HTTP status the client saw (0: no head)
    message: str


class VirtualStream:
    """The client's view of one answer: chunk arrival times, or how it broke off."""

    __slots__ = (
        "chunk_times",
        "chunks_sent",
        "doomed",
        "fault",
        "generated",
        "hold_until_s",
        "last_byte_s",
        "output_tokens",
        "pending",
        "plain",
        "read_timeout_s",
        "sent_s",
        "tokens_per_chunk",
        "tokens_received",
    )

    def __init__(
        self,
        sent_s: float,
        fault: Fault | None,
        *,
        output_tokens: int,
        tokens_per_chunk: int = 1,
        read_timeout_s: float = math.inf,
    ) -> None:
        self.sent_s = sent_s
        self.fault = fault
        self.output_tokens = output_tokens
        self.tokens_per_chunk = tokens_per_chunk
        self.read_timeout_s = read_timeout_s
        self.chunk_times: list[float] = []  # arrival of each chunk the client accepted
        self.tokens_received = 0
        self.generated = 0  # tokens the engine produced for this stream
        self.pending = 0  # produced, not yet in a chunk
        self.chunks_sent = 0
        slow = fault is not None and fault.kind == "slow_first_byte"
        self.hold_until_s = sent_s + fault.arg if slow and fault is not None else -math.inf
        self.last_byte_s = sent_s  # the client's read timeout counts from here
        self.doomed = False  # a chunk would arrive after the deadline: the client times out
        self.plain = fault is None and tokens_per_chunk == 1  # every token is a chunk, on time

    def rejection(self) -> StreamEnd | None:
        """The error answer of an HTTP-status fault (the request never reaches the engine)."""
        if self.fault is None or self.fault.kind not in HTTP_FAULT_STATUS:
            return None
        status = HTTP_FAULT_STATUS[self.fault.kind]
        message = _HTTP_FAULT_MESSAGE[status]
        return StreamEnd(self.sent_s, classify_http_error(status, message), status, message)

    @property
    def deadline_s(self) -> float:
        """When the client gives up unless a byte arrives before."""
        return self.last_byte_s + self.read_timeout_s

    def timed_out(self, now_s: float) -> StreamEnd | None:
        """The client's timeout, once ``now_s`` has reached the deadline with no new byte."""
        if now_s < self.deadline_s:
            return None
        return StreamEnd(
            self.deadline_s,
            "timeout",
            200 if self.chunk_times else 0,
            f"read timeout: no data for {self.read_timeout_s:g} s",
        )

    def token(self, at_s: float) -> StreamEnd | None:
        """The engine produced the stream's next token at ``at_s``; a chunk may leave."""
        self.generated += 1
        if self.plain and at_s <= self.last_byte_s + self.read_timeout_s:  # the common case
            self.chunks_sent += 1
            self.chunk_times.append(at_s)
            self.tokens_received += 1
            self.last_byte_s = at_s
            return None
        self.pending += 1
        last = self.generated >= self.output_tokens
        if self.pending < self.tokens_per_chunk and not last:
            return None
        tokens, self.pending = self.pending, 0
        self.chunks_sent += 1
        arrives = max(at_s, self.hold_until_s)
        if self.doomed or arrives > self.deadline_s:
            self.doomed = True  # the client leaves at the deadline, before this chunk
            return None
        fault = self.fault
        if fault is not None and fault.kind == "malformed" and self.chunks_sent == int(fault.arg):
            return StreamEnd(arrives, "bad_payload", 200, "malformed chunk (injected fault)")
        self.chunk_times.append(arrives)
        self.tokens_received += tokens
        self.last_byte_s = arrives
        if fault is None or last:
            return None
        if fault.kind == "disconnect" and self.generated >= fault.arg:
            return StreamEnd(
                arrives,
                "stream_broken",
                200,
                f"stream closed after {len(self.chunk_times)} chunks without [DONE]",
            )
        if fault.kind == "stall" and self.chunks_sent == 1:
            self.hold_until_s = arrives + fault.arg
        return None

    @property
    def complete(self) -> bool:
        return self.generated >= self.output_tokens and self.pending == 0

    @property
    def end_s(self) -> float:
        """When the client read the end of a complete stream (its last chunk's arrival)."""
        return self.chunk_times[-1] if self.chunk_times else self.sent_s
