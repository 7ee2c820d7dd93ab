"""SSE parsing: the byte-scan fast path agrees with full JSON parsing on every chunk shape."""

from __future__ import annotations

import json

import pytest

from locust_llm.client import sse


def _chat(delta: object, **extra: object) -> bytes:
    body = {
        "id": "x",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}],
    }
    body.update(extra)
    return json.dumps(body).encode()


CASES = [
    _chat({"content": "Hello"}),
    _chat({"content": ""}),
    _chat({"content": None}),
    _chat({"role": "assistant"}),
    _chat({"content": 'say "content": "x"'}),  # the key inside the text, escaped
    _chat({"reasoning_content": "think"}),
    _chat({"reasoning": "think", "content": None}),
    _chat({"content": "a"}, usage=None),
    _chat({"content": "a"}, usage={"prompt_tokens": 3, "completion_tokens": 4}),
    _chat(
        {},
        choices=[],
        usage={
            "prompt_tokens": 3,
            "completion_tokens": 9,
            "completion_tokens_details": {"reasoning_tokens": 2},
        },
    ),
    json.dumps(
        {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]}
    ).encode(),
    json.dumps({"choices": [{"index": 0, "text": " tok", "finish_reason": None}]}).encode(),
    json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}).encode(),
    json.dumps({"error": {"message": "CUDA out of memory", "code": 500}}).encode(),
    json.dumps({"choices": [{"delta": {"content": [{"type": "text", "text": "hi"}]}}]}).encode(),
    b'{"choices": [{"delta": {"content" : "spaced"}}]}',
]


@pytest.mark.parametrize("payload", CASES)
def test_fast_path_matches_strict(payload: bytes) -> None:
    assert sse.parse_chunk(payload) == sse.parse_chunk_strict(payload)


def test_classification() -> None:
    kind, chunk = sse.parse_chunk(CASES[0])
    assert kind == sse.KIND_CHUNK and chunk is not None and chunk.content and chunk.has_token
    assert not sse.parse_chunk(CASES[1])[1].has_token  # type: ignore[union-attr]
    assert sse.parse_chunk(CASES[5])[1].reasoning  # type: ignore[union-attr]
    usage = sse.parse_chunk(CASES[9])[1]
    assert usage is not None and usage.completion_tokens == 9 and usage.prompt_tokens == 3
    assert usage.reasoning_tokens == 2 and not usage.has_token
    err = sse.parse_chunk(CASES[13])[1]
    assert err is not None and err.error == "CUDA out of memory"
    assert sse.parse_chunk(b"[DONE]") == (sse.KIND_DONE, None)
    assert sse.parse_chunk(b"") == (sse.KIND_IGNORE, None)


@pytest.mark.parametrize(
    "bad",
    [
        b'{"choices": [{"delta": {"content": "x"',
        b"not json",
        b"[1, 2]",
        b'{"choices": [{"delta": {"content": "x"}}]',
    ],
)
def test_malformed_chunks_are_bad(bad: bytes) -> None:
    assert sse.parse_chunk(bad)[0] == sse.KIND_BAD


def test_strict_checks_structure() -> None:
    # the fast path only checks the outer braces; the strict parser checks the shape too
    assert sse.parse_chunk_strict(b'{"choices": "nope"}')[0] == sse.KIND_BAD


def test_data_payload_and_body() -> None:
    assert sse.data_payload(b"data: {}\n") == b"{}"
    assert sse.data_payload(b"data:[DONE]\r\n") == b"[DONE]"
    assert sse.data_payload(b": keep-alive\n") is None
    body = json.dumps(
        {
            "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2},
        }
    ).encode()
    chunk = sse.parse_response_body(body)
    assert chunk.content and chunk.completion_tokens == 2 and chunk.prompt_tokens == 5
    with pytest.raises(ValueError, match="not JSON"):
        sse.parse_response_body(b"<html>")
