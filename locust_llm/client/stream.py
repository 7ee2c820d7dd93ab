"""One response read into one record: the client's per-token loop, pure (no Locust, no gevent).

A transport hands over a response whose head is in (:class:`Response`: lines by ``readline``,
the rest by ``read``; the kernel-stamping transport adds ``arrival_s``, when the latest line's
bytes reached the socket). :meth:`StreamReader.read` reads it: every SSE line stamped as it
arrives (the reader's clock, or the kernel's stamp), classified by the API adapter
(:func:`locust_llm.client.sse.parse_chunk` for the OpenAI shapes), the first token announced,
in-stream errors, usage and the end detected; an HTTP error, a non-SSE answer or a
non-streamed body are read too. Any failure is a :class:`~locust_llm.errors.RequestFailed`
with its error kind.

Memory is bounded whatever the server sends: one SSE line, one SSE event (its lines up to a
blank line) and the answer kept for a session at most ``max_event_bytes`` /
``max_body_bytes``, a non-streamed body at most ``max_body_bytes`` (``--llm-max-event-bytes``,
``--llm-max-body-bytes``). Past a limit the request is ``bad_payload`` naming the size and the
limit; the transport's ``readline(sep, limit)`` never holds more than the limit of one line.

:class:`Exchange` holds one request's record and raw timings; whatever happens it ends as
exactly one record (:meth:`Exchange.finish`, which runs
:func:`locust_llm.metrics.summarize_stream`). :func:`read_to_record` is the whole path for
one response. Every failure's message is masked (:class:`~locust_llm.client.redact.Redactor`:
the secrets' every form) before it is cut to :data:`MESSAGE_LIMIT`; what was cut before it
could be masked (an error body read up to its limit, a quoted head) has a tail that begins a
secret masked too. The Locust user (:mod:`locust_llm.client.user`) drives the same pieces with the
real transport, inside its total timeout; the unit tests drive them with a scripted response
and a fake clock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Protocol

from locust_llm.client import sse
from locust_llm.client.apis.base import ApiAdapter
from locust_llm.client.redact import Redactor
from locust_llm.errors import RequestFailed
from locust_llm.metrics import RequestRecord, StreamTiming, classify_http_error, summarize_stream
from locust_llm.options.config import MAX_BODY_BYTES_DEFAULT, MAX_EVENT_BYTES_DEFAULT

ERROR_BODY_LIMIT = 4096  # bytes of an HTTP error's body read for its message and kind
HEAD_BYTES = 48  # first bytes of a non-SSE answer quoted in its bad_payload message
MESSAGE_LIMIT = 300  # characters of a failure's message kept on the record (cut after masking)
LINE_LIMIT = 1024  # bytes of a malformed SSE line quoted (masked, then cut to MESSAGE_LIMIT)
BODY_PIECE = 65536  # bytes asked per read of a non-streamed body
_NO_SECRETS = Redactor()  # still masks the credentials of any URL


class Response(Protocol):
    """What the reader needs of a transport's response (geventhttpclient's, ``http11``'s).

    A kernel-stamping response also has ``arrival_s`` (perf_counter seconds: when the bytes of
    the latest line arrived); the transport's ``message_complete`` is the caller's concern. A
    response with ``read_sse_line`` (``http11``'s) is read by it: :meth:`readline`, and the blank
    line after the line in the same call where its bytes are in already (the line then ends with
    two newlines: one call per event instead of two).
    """

    status_code: int

    def readline(self, sep: bytes = b"\n", limit: int = -1) -> bytes:
        """One line with its ``sep``; at most ``limit`` bytes (>= 1; a longer line comes back
        cut, without ``sep``); the rest at the end of the body; b"" once it is read."""
        ...

    def read(self, length: int = ...) -> bytes: ...

    def get(self, key: str, default: Any = None) -> Any: ...


class Exchange:
    """One request's record and raw timings, from the send stamp to the one final record."""

    __slots__ = ("clock", "record", "redact", "timing", "usage_tokens", "wall")

    def __init__(
        self,
        record: RequestRecord,
        *,
        clock: Callable[[], float] = perf_counter,
        wall: Callable[[], float] = time.time,
        redact: Redactor = _NO_SECRETS,
    ) -> None:
        self.record = record
        self.redact = redact
        self.timing = StreamTiming(t0=0.0)
        self.usage_tokens: int | None = None  # the server's completion tokens (success only)
        self.clock = clock
        self.wall = wall

    def stamp_send(self) -> None:
        """Just before the request is written (again, after a reconnect): t0 and its wall time."""
        self.record.start_wall_s = self.wall()
        self.timing.t0 = self.clock()
        self.timing.sent_time = math.nan  # an earlier attempt's send is not this one's

    def stamp_sent(self, when: float) -> None:
        """The request's final send returned at ``when`` (the transport's ``after_send``)."""
        self.timing.sent_time = when

    def succeeded(self, usage_tokens: int | None) -> None:
        self.record.ok = True
        self.usage_tokens = usage_tokens

    def failed(self, exc: BaseException) -> None:
        """A classified failure keeps its kind; anything else is locust-llm's own bug. The
        message is masked, then cut."""
        record = self.record
        if isinstance(exc, RequestFailed):
            record.error_kind, message = exc.kind, exc.message
        else:
            record.error_kind, message = "client_error", f"{type(exc).__name__}: {exc}"
        record.error_message = self.redact.clip(message, MESSAGE_LIMIT)

    def cancelled(self) -> None:
        """The load test itself stopped the request."""
        self.record.error_kind, self.record.error_message = "cancelled", "stopped by the load test"

    def finish(self) -> RequestRecord:
        """The record with its timings: the end stamped now if the read set none; a request
        never sent gets its wall time now and no timings."""
        record, timing = self.record, self.timing
        if timing.t0:
            if timing.end_time != timing.end_time:  # nan
                timing.end_time = self.clock()
            summarize_stream(record, timing, self.usage_tokens)
        if record.start_wall_s != record.start_wall_s:
            record.start_wall_s = self.wall()
        return record


@dataclass(slots=True)
class SteadyStream:
    """A stream past its first content token, for a reader outside its greenlet to record an
    ordinary token event on its behalf while the greenlet waits (``Http11Response.read_in_hub``:
    the kernel transport's ready reader does it, in the hub): the response, the timing the
    token goes to, the classifier and the clock the loop uses, the event limit. Such a reader
    takes only an event the loop would record as a plain token (a whole ``data:`` line and its
    blank line, classified as :data:`~locust_llm.client.sse.CONTENT_TOKEN`, within the limit) and
    records exactly what the loop records for it: the stamp, a token count of 0, the clock as
    the user-side time."""

    response: Any
    timing: StreamTiming
    classify: Callable[[bytes], tuple[int, sse.Chunk | None]]
    clock: Callable[[], float]
    max_event_bytes: int
    #: the latest token event's :func:`~locust_llm.client.sse.text_split` (a reader outside
    #: the greenlet checks the next events against it), False once a split fitted no event
    split: tuple[bytes, bytes] | bool | None = None
    split_hits: int = 0


class StreamReader:
    """Reads responses of one API: an SSE stream chunk by chunk, or one whole body.

    ``read_errors``: what the transport's reads raise when the connection breaks (mapped by
    :func:`read_failure`); ``on_first_token(record=, ttft_s=)`` runs once per request, when the
    first token-bearing chunk arrives; ``redact`` masks the text it quotes from an answer
    (where it cuts that text, before the cut).
    """

    __slots__ = (
        "adapter",
        "clock",
        "max_body_bytes",
        "max_event_bytes",
        "on_first_token",
        "read_errors",
        "redact",
        "streamed",
    )

    def __init__(
        self,
        adapter: ApiAdapter,
        *,
        stream: bool = True,
        read_errors: tuple[type[BaseException], ...] = (OSError,),
        clock: Callable[[], float] = perf_counter,
        on_first_token: Callable[..., object] | None = None,
        redact: Redactor = _NO_SECRETS,
        max_event_bytes: int = MAX_EVENT_BYTES_DEFAULT,
        max_body_bytes: int = MAX_BODY_BYTES_DEFAULT,
    ) -> None:
        self.adapter = adapter
        self.redact = redact
        #: the longest SSE line or event read; the largest body (or session answer) kept
        self.max_event_bytes = max_event_bytes
        self.max_body_bytes = max_body_bytes
        #: the response is an SSE stream (else one body, read whole)
        self.streamed = stream and adapter.streams
        self.read_errors = read_errors
        self.clock = clock
        self.on_first_token = on_first_token

    def read(self, resp: Response, ex: Exchange, sink: list[bytes] | None = None) -> int | None:
        """Read ``resp`` into ``ex``'s record and timing; returns the usage's completion tokens
        (None: the server gave none). ``sink`` gets the answer's content payloads (or its whole
        body). Raises RequestFailed."""
        record, timing = ex.record, ex.timing
        status = resp.status_code
        record.status_code = status
        if status >= 400:
            text, cut = _read_error_body(resp)
            detail = self.redact(text, truncated=cut).strip() or "(empty body)"  # no cause
            raise RequestFailed(classify_http_error(status, text), f"HTTP {status}: {detail}")
        if not self.streamed:
            return self._read_whole(resp, record, timing, sink)
        timing.stamped = hasattr(resp, "arrival_s")
        content_type = str(resp.get("content-type", "") or "")
        if content_type and "text/event-stream" not in content_type.lower():
            raise not_sse_failure(resp, self._read_head(resp), self.redact)
        hand_over = getattr(resp, "read_in_hub", None)
        try:
            return self._read_stream(resp, record, timing, sink, hand_over)
        finally:
            if hand_over is not None:
                hand_over(None)  # the stream is over (or failed): its greenlet reads again

    def _read_head(self, resp: Response) -> bytes:
        try:
            return bytes(resp.read(HEAD_BYTES))
        except self.read_errors:
            return b""

    def _read_whole(
        self, resp: Response, record: RequestRecord, timing: StreamTiming, sink: list[bytes] | None
    ) -> int | None:
        data = self._read_body(resp)
        timing.end_time = self.clock()
        try:
            chunk = self.adapter.parse_body(data)
        except ValueError as exc:
            raise RequestFailed("bad_payload", str(exc)) from None
        take_usage(record, chunk)
        if sink is not None:
            sink.append(data)
        return chunk.completion_tokens if chunk.completion_tokens >= 0 else None

    def _read_body(self, resp: Response) -> bytes:
        """The whole body, read in pieces, refused past ``max_body_bytes`` (a Content-Length
        over it before any byte is read)."""
        limit = self.max_body_bytes
        declared = str(resp.get("content-length", "") or "").strip()
        if declared.isdigit() and int(declared) > limit:
            raise over_limit("response body", f"Content-Length {declared}", limit, "body")
        parts: list[bytes] = []
        total = 0
        read, read_errors = resp.read, self.read_errors
        while True:
            try:
                piece = read(min(BODY_PIECE, limit + 1 - total))
            except read_errors as exc:
                raise read_failure(exc) from None
            if not piece:
                return b"".join(parts)
            parts.append(piece)
            total += len(piece)
            if total > limit:
                raise over_limit("response body", f"{total} bytes read", limit, "body")

    def _read_stream(
        self,
        resp: Response,
        record: RequestRecord,
        timing: StreamTiming,
        sink: list[bytes] | None,
        hand_over: Callable[[SteadyStream | None], None] | None = None,
    ) -> int | None:
        """The per-chunk loop: the hot path of the whole tool. ``hand_over``: the response's
        ``read_in_hub``, given the stream once its first content token is in."""
        times = timing.chunk_times
        tokens = timing.chunk_tokens
        classify = self.adapter.classify
        first_token = self.on_first_token
        read_errors = self.read_errors
        clock = self.clock
        usage_tokens: int | None = None
        prev_usage = 0
        # a line and the blank line that ends its event in one call, where the transport can
        readline = getattr(resp, "read_sse_line", resp.readline)
        kind_chunk, kind_done, kind_bad = sse.KIND_CHUNK, sse.KIND_DONE, sse.KIND_BAD
        stamped = hasattr(resp, "arrival_s")  # kernel transport: when the line's bytes arrived
        # where the stamp is an attribute (our HTTP/1.1 client's connection), read it there
        stamps: Any = getattr(resp, "stamp_holder", resp)
        limit = self.max_event_bytes
        line_limit = limit + 1  # a line this long is over the limit
        event_bytes = 0  # bytes of the current event's lines (up to a blank line)
        kept_bytes = 0  # bytes of content payloads handed to sink
        body_limit = self.max_body_bytes
        done = False
        # past the first content token, ordinary tokens may be recorded by the transport's
        # reader while this greenlet waits (not while an answer is kept: sink)
        if sink is not None:
            hand_over = None
        sse_seen = False  # an SSE data line came (else the answer is not a stream at all)
        head = b""  # the answer's first bytes, quoted if it is not
        while True:
            try:
                line = readline(b"\n", line_limit)
            except read_errors as exc:
                raise read_failure(exc) from None
            size = len(line)
            if size <= 2:  # the end of the body, or a blank line: no clock needed
                if not line:
                    break
                if not line.strip():  # a blank line ends the event
                    event_bytes = 0
                    continue
            user_now = now = clock()
            if stamped:
                now = stamps.arrival_s
            ends_event = line.endswith(b"\n\n")  # the blank line came with it (read_sse_line)
            if ends_event:
                size -= 1
            event_bytes += size
            if event_bytes > limit:
                timing.end_time = now
                if size > limit:
                    raise over_limit(
                        "SSE line", f"{size} bytes without a newline", limit, "event",
                        line[:size], self.redact,
                    )  # fmt: skip
                raise over_limit(
                    "SSE event", f"{event_bytes} bytes without a blank line", limit, "event",
                    line[:size], self.redact,
                )  # fmt: skip
            if ends_event:
                event_bytes = 0
            if not line.startswith(b"data:"):  # not data (sse.data_payload, inlined)
                if not sse_seen and len(head) < HEAD_BYTES:
                    head += line[: min(size, HEAD_BYTES - len(head))]
                continue
            payload = line[5:].strip()
            sse_seen = True
            kind, chunk = classify(payload)
            if kind == kind_chunk:
                assert chunk is not None
                if chunk.error is not None:
                    raise RequestFailed(classify_http_error(500, chunk.error), chunk.error)
                if chunk.completion_tokens >= 0:
                    usage_tokens = chunk.completion_tokens
                    take_usage(record, chunk)
                if chunk.content or chunk.reasoning:
                    if not times:
                        if first_token is not None:
                            first_token(record=record, ttft_s=now - timing.t0)
                        timing.first_user_time = user_now
                        if stamped:  # (a response may not say: nan)
                            timing.first_earliest_time = getattr(resp, "earliest_s", math.nan)
                    timing.last_user_time = user_now
                    times.append(now)
                    if chunk.completion_tokens >= 0:  # continuous usage: tokens in this chunk
                        tokens.append(chunk.completion_tokens - prev_usage)
                        prev_usage = chunk.completion_tokens
                    else:
                        tokens.append(0)
                    if chunk.content:
                        if timing.first_content_time != timing.first_content_time:
                            timing.first_content_time = now
                            if hand_over is not None:
                                hand_over(SteadyStream(resp, timing, classify, clock, limit))
                        if sink is not None:
                            kept_bytes += len(payload)
                            if kept_bytes > body_limit:
                                raise over_limit(
                                    "answer kept for the session",
                                    f"{kept_bytes} bytes",
                                    body_limit,
                                    "body",
                                )
                            sink.append(payload)
                    if (
                        chunk.reasoning
                        and timing.first_reasoning_time != timing.first_reasoning_time
                    ):
                        timing.first_reasoning_time = now
            elif kind == kind_done:
                if chunk is not None and chunk.completion_tokens >= 0:  # an end event with usage
                    usage_tokens = chunk.completion_tokens  # (the Responses API's completed)
                    take_usage(record, chunk)
                done = True
                timing.end_time = now
                break
            elif kind == kind_bad:
                timing.end_time = now
                quoted = quoted_bytes(line[:size], LINE_LIMIT, self.redact)
                raise RequestFailed("bad_payload", f"malformed chunk: {quoted}")
        if not done:
            timing.end_time = clock()
            if not sse_seen:
                raise not_sse_failure(resp, head, self.redact)
            raise RequestFailed(
                "stream_broken", f"stream closed after {len(times)} chunks without [DONE]"
            )
        return usage_tokens


def read_to_record(
    reader: StreamReader, resp: Response, ex: Exchange, sink: list[bytes] | None = None
) -> RequestRecord:
    """One response, sent at ``ex``'s t0, read to its one record (successful or failed)."""
    try:
        ex.succeeded(reader.read(resp, ex, sink))
    except RequestFailed as exc:
        ex.failed(exc)
    return ex.finish()


def read_failure(exc: BaseException) -> RequestFailed:
    """The failure of a read that broke after the response head: timeout or broken stream."""
    if isinstance(exc, TimeoutError):  # socket.timeout is TimeoutError
        return RequestFailed("timeout", f"read timed out: {exc}")
    return RequestFailed("stream_broken", f"{type(exc).__name__}: {exc}")


def quoted_bytes(data: bytes, limit: int, redact: Redactor = _NO_SECRETS) -> str:
    """``data``'s first ``limit`` bytes as a bytes literal, masked before they are quoted (and,
    when ``data`` is longer, a tail that begins a secret masked too)."""
    text = data[:limit].decode("utf-8", "surrogateescape")
    masked = redact(text, truncated=len(data) > limit)
    return repr(masked.encode("utf-8", "surrogateescape"))


_LIMIT_FLAGS = {"event": "--llm-max-event-bytes", "body": "--llm-max-body-bytes"}


def over_limit(
    what: str,
    seen: str,
    limit: int,
    which: str,
    start: bytes = b"",
    redact: Redactor = _NO_SECRETS,
) -> RequestFailed:
    """The ``bad_payload`` failure of an answer past a size limit: what, how big, the limit and
    the option that raises it (and the first bytes, masked, when a line is quoted)."""
    quoted = f"; starts {quoted_bytes(start, HEAD_BYTES, redact)}" if start else ""
    return RequestFailed(
        "bad_payload",
        f"{what} over the {format_bytes(limit)} limit ({_LIMIT_FLAGS[which]}): {seen}{quoted}",
    )


def format_bytes(count: int) -> str:
    """``1 MiB``, ``64 MiB``, ``512 KiB``, else ``N bytes``."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size and count % size == 0:
            return f"{count // size} {unit}"
    return f"{count} bytes"


def not_sse_failure(resp: Response, head: bytes, redact: Redactor = _NO_SECRETS) -> RequestFailed:
    """A 200 answer to a streamed request that held no SSE data line: an HTML error page, a
    plain JSON body, binary. Names its content type and quotes its first bytes (masked; the
    head is a cut of the answer, so a tail that begins a secret is masked too)."""
    content_type = str(resp.get("content-type", "") or "no content type").split(";")[0].strip()
    content_type = redact(content_type)
    shown = head.strip()[:HEAD_BYTES]
    if not shown:
        return RequestFailed(
            "bad_payload", f"expected text/event-stream, got {content_type} with an empty body"
        )
    quoted = quoted_bytes(shown + b"\0", len(shown), redact)  # quoted as a cut, always
    return RequestFailed("bad_payload", f"expected text/event-stream, got {content_type}: {quoted}")


def take_usage(record: RequestRecord, chunk: sse.Chunk) -> None:
    """A usage chunk's prompt, reasoning and cached token counts onto the record."""
    if chunk.prompt_tokens >= 0:
        record.input_tokens = chunk.prompt_tokens
        record.input_tokens_estimated = False
    if chunk.reasoning_tokens >= 0:
        record.reasoning_tokens = chunk.reasoning_tokens
    if chunk.cached_tokens >= 0:
        record.cached_tokens = chunk.cached_tokens


def _read_error_body(resp: Response) -> tuple[str, bool]:
    """An HTTP error's body (up to :data:`ERROR_BODY_LIMIT` bytes) and whether it was cut."""
    try:
        data = resp.read(ERROR_BODY_LIMIT)
    except Exception:  # a broken error body is still an HTTP error
        return "", False
    return data.decode("utf-8", "replace"), len(data) >= ERROR_BODY_LIMIT
