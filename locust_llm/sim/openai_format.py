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


def _usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    """OpenAI's usage object; ``prompt_tokens_details.cached_tokens`` = prompt tokens the
    prefix cache served."""
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


class ChunkFormatter:
    """Encodes the chunks of one streamed answer; ``chat`` picks the chat or completion shape."""

    __slots__ = (
        "_chat",
        "_continuous",
        "_head",
        "_prompt",
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

    def content(self, text: str, completion_tokens: int, finish_reason: str | None = None) -> bytes:
        """One content chunk; ``completion_tokens`` = tokens sent so far including this one."""
        finish = b"null" if finish_reason is None else b'"' + finish_reason.encode() + b'"'
        return b"".join(
            (
                self._head,
                self._tail[0],
                json.dumps(text).encode(),
                self._tail[1],
                b',"logprobs":null,"finish_reason":',
                finish,
                b"}]",
                self._usage_bytes(completion_tokens),
                b"}\n\n",
            )
        )

    def usage(self, completion_tokens: int, cached_tokens: int = 0) -> bytes:
        """The final usage chunk (empty choices); b"" unless usage was asked for."""
        if not self.include_usage:
            return b""
        body = json.dumps(_usage(self._prompt, completion_tokens, cached_tokens)).encode()
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
) -> bytes:
    """A whole non-streamed ``chat.completion`` or ``text_completion`` as JSON bytes."""
    if chat:
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
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
        "usage": _usage(prompt_tokens, completion_tokens, cached_tokens),
    }
    return json.dumps(body).encode()
