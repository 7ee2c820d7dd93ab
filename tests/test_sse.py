"""SSE parsing: the byte-scan fast path agrees with full JSON parsing on every chunk shape."""

from __future__ import annotations

import json
import random
from pathlib import Path

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


_CHUNKS_FILE = Path(__file__).with_name("sse_real_chunks.txt")
REAL = [
    line.encode()
    for line in _CHUNKS_FILE.read_text(encoding="utf-8").splitlines()
    if line and not line.startswith("#")
]


@pytest.mark.parametrize("payload", REAL)
def test_fast_path_matches_strict_on_real_server_chunks(payload: bytes) -> None:
    assert sse.parse_chunk(payload) == sse.parse_chunk_strict(payload)


def _generated_chunks(n: int, seed: int = 31) -> list[bytes]:
    """Key orders, separators, texts with quotes, escapes and key names, nulls, several
    choices, usage, errors and finish reasons, drawn at random."""
    rng = random.Random(seed)
    texts = ["", " the", '"', "\\", 'a "content": "x"', "usage", "\\u00e9", "é😀", "null", "text"]
    values = [*texts, None, None]
    out = []
    for _ in range(n):
        delta: dict[str, object] = {}
        for key in rng.sample(
            ["role", "content", "reasoning_content", "reasoning"], rng.randint(0, 3)
        ):
            delta[key] = "assistant" if key == "role" else rng.choice(values)
        choice: dict[str, object] = {"index": 0, "delta": delta}
        if rng.random() < 0.2:
            choice = {"index": 0, "text": rng.choice(values)}
        choice["finish_reason"] = rng.choice([None, None, None, "stop", ""])
        if rng.random() < 0.2:
            choice["logprobs"] = None
        body: dict[str, object] = {"id": rng.choice(["x", "content", "usage"]), "choices": [choice]}
        if rng.random() < 0.1:
            body["choices"] = [choice, {"index": 1, "delta": {"content": rng.choice(values)}}]
        extra = rng.random()
        if extra < 0.3:
            body["usage"] = None
        elif extra < 0.4:
            body["usage"] = {"prompt_tokens": 3, "completion_tokens": rng.randint(0, 9)}
        elif extra < 0.45:
            body["error"] = rng.choice([None, "", "boom", {"message": "boom"}])
        items = list(body.items())
        rng.shuffle(items)
        seps = rng.choice([(",", ":"), (", ", ": "), (",", " : ")])
        payload = json.dumps(dict(items), separators=seps, ensure_ascii=rng.random() < 0.5)
        out.append(payload.encode())
    return out


def test_fast_path_matches_strict_on_generated_chunks() -> None:
    """Key orders, separators, texts with quotes, escapes and key names, nulls, several
    choices, usage, errors and finish reasons, drawn at random: the fast path always agrees."""
    fast_taken = 0
    for data in _generated_chunks(3000):
        assert sse.parse_chunk(data) == sse.parse_chunk_strict(data), data
        fast_taken += all(sse._occurrence_flags(m) >= 0 for m in sse._KEY_SCAN.findall(data))
    assert fast_taken > 500  # the fast path itself was exercised, not only the fallback


def test_fast_path_results_are_shared_and_unchanged_by_a_stream() -> None:
    llama, vllm = (next(c for c in REAL if c.startswith(h) and b'"content":" the"' in c)
                   for h in (b'{"choices"', b'{"id"'))  # fmt: skip
    chunk = sse.parse_chunk(llama)[1]
    assert chunk is sse.parse_chunk(vllm)[1]  # one shared object per outcome
    assert chunk is not None and chunk.content and not chunk.reasoning
    assert chunk.completion_tokens == -1 and chunk.error is None and chunk.finish_reason is None


def test_the_spellings_remembered_are_bounded_and_each_still_read_right() -> None:
    """The fast path remembers each key occurrence as a server spells it (spacing and all);
    a stream of ever new spellings stops adding past the bound and is still classified as the
    full parse classifies it."""
    for spaces in range(2 * sse._SEEN_LIMIT):
        pad = " " * spaces
        data = f'{{"choices":[{{"delta":{{"content"{pad}:"x"}},"finish_reason":null}}]}}'.encode()
        assert (
            sse.parse_chunk(data)
            == sse.parse_chunk_strict(data)
            == (sse.KIND_CHUNK, sse.Chunk(content=True))
        )
    assert len(sse._SEEN) <= sse._SEEN_LIMIT


def test_an_event_that_fits_a_token_events_split_is_read_as_that_token() -> None:
    """``text_split`` / ``fits_split`` (the hub's check of a steady stream's token events):
    around the text of every token event of the generated and the real servers' chunks, any
    middle drawn from quotes, backslashes, colons, key names and braces that fits the split is
    read by ``parse_chunk`` as a plain token, as the stream loop reads it; and where it is a
    JSON string's text, ``parse_chunk_strict`` (json.loads) reads it so too."""
    rng = random.Random(5)
    pieces = ['"', "\\", ":", "content", "usage", "null", "}", "{", " ", "é", "w", '""', ","]
    splits = 0
    for event in [*_generated_chunks(3000, seed=7), *REAL]:
        if sse.parse_chunk(event)[1] is not sse.CONTENT_TOKEN:
            continue
        line = b"data: " + event
        split = sse.text_split(line)
        if split is None:
            continue
        splits += 1
        assert sse.fits_split(line, 0, len(line), split)  # the event fits its own split
        for _ in range(20):
            middle = "".join(rng.choices(pieces, k=rng.randint(0, 4))).encode()
            candidate = split[0] + middle + split[1]
            if not sse.fits_split(b"xx" + candidate + b"\n\n", 2, 2 + len(candidate), split):
                assert not middle or b'"' in middle
                continue
            assert sse.parse_chunk(candidate[6:])[1] is sse.CONTENT_TOKEN, candidate
            if b"\\" not in middle:
                _kind, chunk = sse.parse_chunk_strict(candidate[6:])
                assert chunk is not None and chunk.content and not chunk.reasoning, candidate
    assert splits > 100  # 153 token events split (the seeds fixed)
