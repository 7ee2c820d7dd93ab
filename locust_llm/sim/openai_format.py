"""Bytes of the OpenAI wire format: SSE chunks, whole responses, error bodies.

Streaming chat answers are ``chat.completion.chunk`` objects, completions ``text_completion``
objects, each as an SSE ``data:`` event, then ``data: [DONE]``. The first chunk of a chat
stream carries ``delta.role``; the last content chunk carries ``finish_reason`` (as vLLM does).
With ``stream_options.include_usage`` every chunk has ``"usage": null`` and a final chunk with
empty ``choices`` carries the usage (with ``prompt_tokens_details.cached_tokens``, the prompt
tokens the prefix cache served); with ``continuous_usage_stats`` every chunk carries it.

Per-request constant parts of a chunk are encoded once (:class:`ChunkFormatter`), so a token
costs one small concatenation: the HTTP front streams tens of thousands of chunks per second.
"""

from __future__ import annotations

import json
import time
from typing import Any

DONE = b"data: [DONE]\n\n"

_STATUS_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    429: "RateLimitError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


def error_object(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """The OpenAI-style error object: ``{"error": {"message", "type", "param", "code"}}``."""
    return {
        "error": {
            "message": message,
            "type": _STATUS_TYPES.get(status, "APIError"),
            "param": param,
            "code": status,
        }
    }


def error_body(status: int, message: str, param: str | None = None) -> bytes:
    """:func:`error_object` as JSON bytes."""
    return json.dumps(error_object(status, message, param)).encode()


def _usage(prompt: int, completion: int, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    """OpenAI's usage object; ``prompt_tokens_details.cached_tokens`` = prompt tokens the
    prefix cache served; ``completion_tokens_details.reasoning_tokens`` (only when there were
    any) = completion tokens spent reasoning."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    if reasoning:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


class ChunkFormatter:
    """Encodes the chunks of one streamed answer; ``chat`` picks the chat or completion shape."""

    done = DONE  # what follows the usage chunk

    __slots__ = (
        "_chat",
        "_continuous",
        "_head",
        "_prompt",
        "_reasoning_key",
        "_tail",
        "_usage_null",
        "created",
        "id",
        "include_usage",
        "model",
    )

    def __init__(
        self,
        *,
        chat: bool,
        request_id: str,
        model: str,
        prompt_tokens: int,
        include_usage: bool = False,
        continuous_usage: bool = False,
        created: int | None = None,
    ) -> None:
        self._chat = chat
        self.id = request_id
        self.model = model
        self.created = int(time.time()) if created is None else created
        self._prompt = prompt_tokens
        self.include_usage = include_usage
        self._continuous = continuous_usage
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = {"id": request_id, "object": obj, "created": self.created, "model": model}
        self._head = b"data: " + json.dumps(head, separators=(",", ":")).encode()[:-1]
        self._usage_null = b',"usage":null' if include_usage and not continuous_usage else b""
        key = b'"delta":{"content":' if chat else b'"text":'
        self._tail = (b',"choices":[{"index":0,' + key, b"}" if chat else b"")
        self._reasoning_key = b',"choices":[{"index":0,"delta":{"reasoning_content":'  # chat

    def _usage_bytes(self, completion: int) -> bytes:
        if self._continuous:
            return b',"usage":' + json.dumps(_usage(self._prompt, completion)).encode()
        return self._usage_null

    def role(self) -> bytes:
        """The chat stream's opening chunk (role, empty content); b"" for completions."""
        if not self._chat:
            return b""
        return (
            self._head + b',"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
            b'"logprobs":null,"finish_reason":null}]' + self._usage_bytes(0) + b"}\n\n"
        )

    def content(
        self,
        text: str,
        completion_tokens: int,
        finish_reason: str | None = None,
        *,
        reasoning: bool = False,
    ) -> bytes:
        """One content chunk (a chat stream's reasoning chunk with ``reasoning``, vLLM's
        ``delta.reasoning_content``); ``completion_tokens`` = tokens sent so far including
        this one."""
        finish = b"null" if finish_reason is None else b'"' + finish_reason.encode() + b'"'
        return b"".join(
            (
                self._head,
                self._reasoning_key if reasoning and self._chat else self._tail[0],
                json.dumps(text).encode(),
                self._tail[1],
                b',"logprobs":null,"finish_reason":',
                finish,
                b"}]",
                self._usage_bytes(completion_tokens),
                b"}\n\n",
            )
        )

    def usage(
        self, completion_tokens: int, cached_tokens: int = 0, reasoning_tokens: int = 0
    ) -> bytes:
        """The final usage chunk (empty choices); b"" unless usage was asked for."""
        if not self.include_usage:
            return b""
        usage = _usage(self._prompt, completion_tokens, cached_tokens, reasoning_tokens)
        body = json.dumps(usage).encode()
        return self._head + b',"choices":[],"usage":' + body + b"}\n\n"


def full_response(
    *,
    chat: bool,
    request_id: str,
    model: str,
    text: str,
    prompt_tokens: int,
    completion_tokens: int,
    finish_reason: str,
    created: int | None = None,
    cached_tokens: int = 0,
    reasoning_text: str = "",
    reasoning_tokens: int = 0,
) -> bytes:
    """A whole non-streamed ``chat.completion`` or ``text_completion`` as JSON bytes (a chat
    message's reasoning in ``reasoning_content``, as vLLM's reasoning parsers give it)."""
    if chat:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if reasoning_tokens:
            message["reasoning_content"] = reasoning_text
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish_reason,
        }
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    body = {
        "id": request_id,
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()) if created is None else created,
        "model": model,
        "choices": [choice],
        "usage": _usage(prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens),
    }
    return json.dumps(body).encode()


# ---- the Responses API (/v1/responses) and embeddings (/v1/embeddings) -----------------------


def _event(kind: str, obj: dict[str, Any]) -> bytes:
    """One typed SSE event of the Responses API: ``event:`` line, ``data:`` JSON with type."""
    data = json.dumps({"type": kind, **obj}, separators=(",", ":"))
    return b"event: " + kind.encode() + b"\ndata: " + data.encode() + b"\n\n"


class ResponsesFormatter:
    """Encodes one Responses API answer: the streamed events, or the whole ``response``.

    Stream: ``response.created``, ``response.output_item.added``,
    ``response.content_part.added``, one ``response.output_text.delta`` per chunk, then
    ``response.output_text.done`` and ``response.completed`` (``response.incomplete`` when
    ``max_output_tokens`` cut the answer) whose ``response.usage`` has ``input_tokens``,
    ``output_tokens`` and ``input_tokens_details.cached_tokens``. No ``[DONE]``.
    """

    done = b""  # the stream ends with response.completed

    def __init__(
        self, *, request_id: str, model: str, prompt_tokens: int, created: int | None = None
    ) -> None:
        self.id, self.model, self._prompt = request_id, model, prompt_tokens
        self.created = int(time.time()) if created is None else created
        self.item_id = "msg_" + request_id
        self._text: list[str] = []
        self._seq = 0
        self._finish = "stop"

    def _next(self, kind: str, obj: dict[str, Any]) -> bytes:
        self._seq += 1
        return _event(kind, {"sequence_number": self._seq, **obj})

    def _response(self, status: str, usage: dict[str, Any] | None) -> dict[str, Any]:
        text = "".join(self._text)
        output = [
            {
                "id": self.item_id,
                "type": "message",
                "role": "assistant",
                "status": "completed" if status != "in_progress" else "in_progress",
                "content": [{"type": "output_text", "text": text, "annotations": []}]
                if text
                else [],
            }
        ]
        body: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "model": self.model,
            "status": status,
            "output": output if status != "in_progress" else [],
            "usage": usage,
        }
        if status == "incomplete":
            body["incomplete_details"] = {"reason": "max_output_tokens"}
        return body

    def role(self) -> bytes:
        item = {"id": self.item_id, "type": "message", "role": "assistant", "content": []}
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"item_id": self.item_id, "output_index": 0, "content_index": 0}
        return (
            self._next("response.created", {"response": self._response("in_progress", None)})
            + self._next("response.output_item.added", {"output_index": 0, "item": item})
            + self._next("response.content_part.added", {**where, "part": part})
        )

    def content(
        self,
        text: str,
        completion_tokens: int,
        finish_reason: str | None = None,
        *,
        reasoning: bool = False,  # the simulator reasons in chat answers only
    ) -> bytes:
        self._text.append(text)
        if finish_reason is not None:
            self._finish = finish_reason
        where = {"item_id": self.item_id, "output_index": 0, "content_index": 0}
        return self._next("response.output_text.delta", {**where, "delta": text})

    def _usage(self, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
        return {
            "input_tokens": self._prompt,
            "input_tokens_details": {"cached_tokens": cached_tokens},
            "output_tokens": completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self._prompt + completion_tokens,
        }

    def usage(self, completion_tokens: int, cached_tokens: int = 0, _reasoning: int = 0) -> bytes:
        """The closing events: text done, then completed (or incomplete) with the usage."""
        where = {"item_id": self.item_id, "output_index": 0, "content_index": 0}
        status = "incomplete" if self._finish == "length" else "completed"
        response = self._response(status, self._usage(completion_tokens, cached_tokens))
        return self._next(
            "response.output_text.done", {**where, "text": "".join(self._text)}
        ) + self._next(f"response.{status}", {"response": response})

    def whole(self, text: str, completion_tokens: int, finish: str, cached_tokens: int) -> bytes:
        """A non-streamed ``response`` object as JSON bytes."""
        self._text, self._finish = [text], finish
        status = "incomplete" if finish == "length" else "completed"
        return json.dumps(
            self._response(status, self._usage(completion_tokens, cached_tokens))
        ).encode()


#: Dimensions of the simulator's embeddings (deterministic unit vectors, not semantic ones).
EMBEDDING_DIM = 64


def embeddings_body(*, model: str, inputs: list[str], prompt_tokens: int) -> bytes:
    """A ``/v1/embeddings`` answer: one unit vector per input, fixed by its text, and usage."""
    import hashlib

    data = []
    for i, text in enumerate(inputs):
        raw = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest() * 2
        vec = [b / 127.5 - 1.0 for b in raw[:EMBEDDING_DIM]]
        norm = sum(v * v for v in vec) ** 0.5 or 1.0
        data.append({"object": "embedding", "index": i, "embedding": [v / norm for v in vec]})
    body = {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
    return json.dumps(body).encode()
