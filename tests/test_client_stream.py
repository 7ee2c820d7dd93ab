"""The client's read loop in-process (:mod:`locust_llm.client.stream`): a scripted response
delivers byte chunks at set times on a fake clock; every case ends as one record with its error
kind and timings."""

from __future__ import annotations

import json
import math

import pytest

from locust_llm.client.apis.base import get_api
from locust_llm.client.stream import Exchange, StreamReader, read_to_record
from locust_llm.metrics import RequestRecord

T0 = 100.0  # the send stamp (0.0 would read as "never sent")


class Clock:
    """perf_counter and time.time for the test: set by the scripted response's reads."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class ScriptedResponse:
    """A response whose body arrives as ``(arrival_s, bytes or exception)`` chunks.

    ``readline`` returns when a line's bytes are in (as the real transports do); the clock then
    reads the arrival plus ``read_delay_s`` (the client's own delay). ``kernel=True`` adds
    ``arrival_s``: the arrival of the chunk that completed the line (two lines of one chunk
    share it, as a kernel stamp does) and ``earliest_s``: the read before it, when the socket
    was known empty (the first chunk's: ``earliest_s`` as given).
    """

    def __init__(
        self,
        chunks: list[tuple[float, bytes | BaseException]],
        clock: Clock,
        *,
        status: int = 200,
        content_type: str | None = "text/event-stream",
        kernel: bool = False,
        read_delay_s: float = 0.0,
        earliest_s: float = math.nan,
    ) -> None:
        self.status_code = status
        self._chunks = list(chunks)
        self._clock = clock
        self._buf = b""
        self._at = math.nan
        self._headers = {} if content_type is None else {"content-type": content_type}
        self._delay = read_delay_s
        if kernel:
            self.arrival_s = math.nan
            self.earliest_s = earliest_s
        self._read_at = earliest_s

    def _pull(self) -> bool:
        if not self._chunks:
            return False
        at, data = self._chunks.pop(0)
        self._clock.now = max(self._clock.now, at + self._delay)
        if isinstance(data, BaseException):
            raise data
        self._buf += data
        self._at = at
        if hasattr(self, "earliest_s"):
            self.earliest_s = self._read_at
        self._read_at = self._clock.now
        return True

    def readline(self, sep: bytes = b"\n", limit: int = -1) -> bytes:
        while sep not in self._buf and (limit < 0 or len(self._buf) < limit):
            if not self._pull():
                line, self._buf = self._buf, b""
                return line
        end = self._buf.index(sep) + len(sep) if sep in self._buf else len(self._buf)
        if limit >= 0:
            end = min(end, limit)
        line, self._buf = self._buf[:end], self._buf[end:]
        if hasattr(self, "arrival_s"):
            self.arrival_s = self._at
        return line

    def read(self, length: int = -1) -> bytes:
        while (length < 0 or len(self._buf) < length) and self._pull():
            pass
        n = len(self._buf) if length < 0 else length
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    def get(self, key: str, default: object = None) -> object:
        return self._headers.get(key, default)


def _chunk(text: str = "", *, reasoning: str = "", usage: dict[str, object] | None = None) -> bytes:
    delta = {"content": text} if text else {}
    if reasoning:
        delta["reasoning_content"] = reasoning
    obj: dict[str, object] = {"choices": [{"index": 0, "delta": delta}] if delta else []}
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def _run(
    chunks: list[tuple[float, bytes | BaseException]],
    *,
    api: str = "chat",
    stream: bool = True,
    sink: list[bytes] | None = None,
    **resp_kw: object,
) -> tuple[RequestRecord, list[float]]:
    """One request through the reader; returns its record and the first-token events' TTFTs."""
    clock = Clock()
    fired: list[float] = []

    def first_token(*, record: RequestRecord, ttft_s: float) -> None:
        fired.append(ttft_s)

    reader = StreamReader(get_api(api), stream=stream, clock=clock, on_first_token=first_token)
    ex = Exchange(RequestRecord(request_id="r", endpoint="/e"), clock=clock, wall=clock)
    ex.stamp_send()
    resp = ScriptedResponse(chunks, clock, **resp_kw)  # type: ignore[arg-type]
    return read_to_record(reader, resp, ex, sink), fired


def test_a_normal_stream_times_every_token_and_takes_the_servers_token_count() -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 3}
    record, fired = _run([
        (T0 + 0.5, _chunk("a")), (T0 + 0.6, _chunk("b")), (T0 + 0.8, _chunk("c")),
        (T0 + 0.81, _chunk(usage=usage)), (T0 + 0.82, DONE),
    ])  # fmt: skip
    assert record.ok and record.error_kind == "" and record.status_code == 200
    assert record.ttft_s == pytest.approx(0.5) and fired == [pytest.approx(0.5)]
    assert record.e2e_s == pytest.approx(0.82) and record.chunks == 3
    assert record.output_tokens == 3 and not record.tokens_estimated
    assert record.input_tokens == 7 and not record.input_tokens_estimated
    assert record.tpot_s == pytest.approx(0.15) and record.itl_max_s == pytest.approx(0.2)
    assert record.start_wall_s == T0 and math.isnan(record.first_token_kernel_s)


def test_kernel_stamps_mark_a_first_token_read_together_with_the_next() -> None:
    two = _chunk("a") + _chunk("b")  # one segment: the reader came after both arrived
    record, fired = _run(
        [(T0 + 0.5, two), (T0 + 0.7, _chunk("c")), (T0 + 0.8, DONE)], kernel=True,
        read_delay_s=0.01,
    )  # fmt: skip
    assert record.ok and record.first_token_merged
    assert record.first_token_kernel_s == pytest.approx(0.5) == record.ttft_s
    assert record.first_token_user_s == pytest.approx(0.51)  # the client's own delay
    assert record.last_token_kernel_s == pytest.approx(0.7) and fired == [pytest.approx(0.5)]
    assert record.tokens_estimated and record.output_tokens == 3  # no usage: counted chunks
    assert math.isnan(record.ttft_error_bound_s)  # a response that gives no earliest time
    bounded, _ = _run(
        [(T0 + 0.5, two), (T0 + 0.7, _chunk("c")), (T0 + 0.8, DONE)], kernel=True,
        earliest_s=T0 + 0.2,
    )  # fmt: skip
    # the first token came after the socket was last known empty, and by its stamp: TTFT in
    # [0.2, 0.5] s
    assert bounded.first_token_merged and bounded.ttft_error_bound_s == pytest.approx(0.3)
    apart, _ = _run(
        [(T0 + 0.5, _chunk("a")), (T0 + 0.6, _chunk("b")), (T0 + 0.7, DONE)], kernel=True
    )
    assert apart.ok and not apart.first_token_merged and apart.ttft_error_bound_s == 0.0


def test_usage_chunks_give_tokens_per_chunk_reasoning_and_cache_hits() -> None:
    def usage(n: int) -> dict[str, object]:
        return {
            "prompt_tokens": 20, "completion_tokens": n,
            "prompt_tokens_details": {"cached_tokens": 16},
            "completion_tokens_details": {"reasoning_tokens": 2},
        }  # fmt: skip

    record, _ = _run([
        (T0 + 0.2, _chunk(reasoning="hm", usage=usage(2))),
        (T0 + 0.4, _chunk("x", usage=usage(3))),
        (T0 + 0.8, _chunk("yz", usage=usage(5))),
        (T0 + 0.9, DONE),
    ])  # fmt: skip
    assert record.ok and record.output_tokens == 5 and not record.tokens_estimated
    assert (record.input_tokens, record.cached_tokens, record.reasoning_tokens) == (20, 16, 2)
    assert record.ttfr_s == pytest.approx(0.2) and record.ttfc_s == pytest.approx(0.4)
    # continuous usage: the last gap (0.4 s) carried 2 tokens, so each took 0.2 s
    assert record.itl_max_s == pytest.approx(0.2) and record.tpot_s == pytest.approx(0.15)


@pytest.mark.parametrize(
    ("error", "kind"),
    [(ConnectionResetError("reset by peer"), "stream_broken"), (TimeoutError("idle"), "timeout")],
)
def test_a_read_that_breaks_mid_stream_keeps_the_tokens_that_came(
    error: BaseException, kind: str
) -> None:
    record, _ = _run([(T0 + 0.3, _chunk("a")), (T0 + 0.5, _chunk("b")), (T0 + 2.0, error)])
    assert not record.ok and record.error_kind == kind
    assert type(error).__name__ in record.error_message or "timed out" in record.error_message
    assert record.ttft_s == pytest.approx(0.3) and record.chunks == 2
    assert record.e2e_s == pytest.approx(2.0) and record.tokens_estimated


def test_a_server_error_in_the_stream_or_as_the_status_is_classified() -> None:
    oom = b'data: {"error": {"message": "CUDA out of memory"}}\n\n'
    record, _ = _run([(T0 + 0.3, _chunk("a")), (T0 + 0.4, oom)])
    assert record.error_kind == "oom" and record.error_message == "CUDA out of memory"
    assert record.chunks == 1 and record.e2e_s == pytest.approx(0.4)
    plain, _ = _run([(T0 + 0.3, b'data: {"error": "engine died"}\n\n')])
    assert plain.error_kind == "http_5xx" and math.isnan(plain.ttft_s)
    limited, fired = _run(
        [(T0 + 0.1, b'{"error": "slow down"}')], status=429, content_type="application/json"
    )
    assert limited.error_kind == "http_429" and limited.status_code == 429
    assert limited.error_message == 'HTTP 429: {"error": "slow down"}' and not fired
    empty, _ = _run([], status=503, content_type=None)
    assert empty.error_kind == "http_5xx" and empty.error_message == "HTTP 503: (empty body)"


def test_a_truncated_stream_is_broken_and_a_cut_chunk_is_a_bad_payload() -> None:
    record, _ = _run([(T0 + 0.3, _chunk("a")), (T0 + 0.4, _chunk("b"))])
    assert record.error_kind == "stream_broken"
    assert record.error_message == "stream closed after 2 chunks without [DONE]"
    assert record.e2e_s == pytest.approx(0.4) and record.chunks == 2
    cut, _ = _run([(T0 + 0.3, _chunk("a")), (T0 + 0.4, b'data: {"choices": [{"delta": {"con')])
    assert cut.error_kind == "bad_payload" and cut.error_message.startswith("malformed chunk")
    assert cut.chunks == 1


def test_blank_lines_comments_and_keep_alives_are_skipped() -> None:
    noise = b"\n: ping\n\nevent: message\nid: 3\n\n"
    record, _ = _run([
        (T0 + 0.1, noise), (T0 + 0.5, _chunk("a")), (T0 + 0.6, noise),
        (T0 + 0.7, b"data:\n\n"), (T0 + 0.9, _chunk("b")), (T0 + 1.0, noise + DONE),
    ])  # fmt: skip
    assert record.ok and record.chunks == 2
    assert record.ttft_s == pytest.approx(0.5) and record.tpot_s == pytest.approx(0.4)


def test_an_answer_that_is_not_a_stream_names_its_type_and_quotes_its_head() -> None:
    page = b"<html><body>Bad gateway from the proxy in front of the server</body></html>"
    record, _ = _run([(T0 + 0.2, page)], content_type="text/html; charset=utf-8")
    assert record.error_kind == "bad_payload"
    head = page[:48].strip()
    assert record.error_message == f"expected text/event-stream, got text/html: {head!r}"
    untyped, _ = _run([(T0 + 0.2, b'{"choices": []}\n')], content_type=None)
    assert untyped.error_message == (
        "expected text/event-stream, got no content type: b'{\"choices\": []}'"
    )
    blank, _ = _run([(T0 + 0.2, b"\n\n")], content_type=None)
    assert blank.error_message.endswith("with an empty body")


def test_a_non_streamed_body_is_read_whole_into_one_record() -> None:
    body = json.dumps({
        "choices": [{"message": {"content": "hello"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 4, "completion_tokens": 9},
    }).encode()  # fmt: skip
    sink: list[bytes] = []
    record, fired = _run(
        [(T0 + 0.2, body[:10]), (T0 + 0.6, body[10:])], stream=False, sink=sink,
        content_type="application/json",
    )  # fmt: skip
    assert record.ok and record.output_tokens == 9 and record.input_tokens == 4
    assert record.e2e_s == pytest.approx(0.6) and math.isnan(record.ttft_s) and not fired
    assert sink == [body]
    bad, _ = _run([(T0 + 0.2, b"<html>")], stream=False, content_type="text/html")
    assert bad.error_kind == "bad_payload" and "not JSON" in bad.error_message
    cut, _ = _run([(T0 + 0.2, b"{"), (T0 + 0.3, ConnectionResetError("gone"))], stream=False)
    assert cut.error_kind == "stream_broken" and cut.e2e_s == pytest.approx(0.3)


def test_the_sink_gets_the_content_payloads_only() -> None:
    sink: list[bytes] = []
    record, _ = _run(
        [(T0 + 0.1, _chunk(reasoning="r")), (T0 + 0.2, _chunk("a")), (T0 + 0.3, DONE)],
        sink=sink,
    )
    assert record.ok and len(sink) == 1 and b'"a"' in sink[0]


def test_an_exchange_never_sent_still_ends_as_one_record() -> None:
    clock = Clock()
    ex = Exchange(RequestRecord(request_id="r", endpoint="/e"), clock=clock, wall=clock)
    ex.failed(KeyError("boom"))  # our own bug before the send
    record = ex.finish()
    assert record.error_kind == "client_error" and record.error_message == "KeyError: 'boom'"
    assert record.start_wall_s == T0 and math.isnan(record.e2e_s) and not record.ok
    stopped = Exchange(RequestRecord(request_id="s", endpoint="/e"), clock=clock, wall=clock)
    stopped.stamp_send()
    clock.now = T0 + 1.5
    stopped.cancelled()
    done = stopped.finish()
    assert done.error_kind == "cancelled" and done.e2e_s == pytest.approx(1.5)
