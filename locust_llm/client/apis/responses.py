"""``/v1/responses``: OpenAI's Responses API, streamed as typed events.

The request is ``{"model", "input": [messages], "max_output_tokens", "stream"}``. Its stream is
SSE events whose JSON carries ``type``: ``response.output_text.delta`` (answer text, in
``delta``), ``response.reasoning_text.delta`` / ``response.reasoning_summary_text.delta``
(reasoning), ``response.completed`` (the end, with ``response.usage``: ``input_tokens``,
``output_tokens``, ``input_tokens_details.cached_tokens``,
``output_tokens_details.reasoning_tokens``), ``error`` / ``response.failed`` (a failure). There
is no ``[DONE]``: ``response.completed`` ends the stream. Other events (created, in progress,
item and part added/done) carry no token and are ignored.
"""

from __future__ import annotations

import json
from typing import Any

from locust_llm.client import sse
from locust_llm.client.apis.base import ApiAdapter, BodyRequest, register_api
from locust_llm.client.sse import Chunk

_TEXT = b'"response.output_text.delta"'
_REASONING = (b'"response.reasoning_text.delta"', b'"response.reasoning_summary_text.delta"')
_IGNORED = frozenset(
    {
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_text.done",
        "response.reasoning_text.done",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
    }
)


def _usage_chunk(usage: Any) -> Chunk:
    chunk = Chunk()
    if isinstance(usage, dict):
        sse.read_usage(
            chunk,
            {
                "completion_tokens": usage.get("output_tokens"),
                "prompt_tokens": usage.get("input_tokens"),
                "completion_tokens_details": usage.get("output_tokens_details"),
                "prompt_tokens_details": usage.get("input_tokens_details"),
            },
        )
    return chunk


def _error_text(obj: dict[str, Any]) -> str:
    error = obj.get("error") or (obj.get("response") or {}).get("error") or obj
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


@register_api
class ResponsesApi(ApiAdapter):
    name = "responses"
    path = "/v1/responses"

    def build_body(self, request: BodyRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model,
            "input": request.prompt.messages,
            "stream": request.stream,
            "max_output_tokens": request.max_tokens,
            "temperature": request.temperature,
        }
        if request.ignore_eos:
            body["ignore_eos"] = True
        body.update(request.extra_body)
        return body

    @staticmethod
    def classify(payload: bytes) -> tuple[int, Chunk | None]:
        """One event's payload: a text delta is found by a byte scan, the rest parsed."""
        if not payload:
            return sse.KIND_IGNORE, None
        if _TEXT in payload and b'"delta":""' not in payload:
            return sse.KIND_CHUNK, Chunk(content=True)
        if any(k in payload for k in _REASONING) and b'"delta":""' not in payload:
            return sse.KIND_CHUNK, Chunk(reasoning=True)
        try:
            obj = json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            return sse.KIND_BAD, None
        if isinstance(obj, dict) and obj.get("error") and obj.get("type") in (None, "error"):
            return sse.KIND_CHUNK, Chunk(error=_error_text(obj))
        kind = obj.get("type") if isinstance(obj, dict) else None
        if not isinstance(kind, str):
            return sse.KIND_BAD, None
        if kind in ("response.completed", "response.incomplete"):
            return sse.KIND_DONE, _usage_chunk((obj.get("response") or {}).get("usage"))
        if kind in ("error", "response.failed"):
            return sse.KIND_CHUNK, Chunk(error=_error_text(obj))
        return sse.KIND_IGNORE, None  # created, in progress, item/part events: no token

    @staticmethod
    def parse_body(body: bytes) -> Chunk:
        """A non-streamed ``response`` object: its output text and usage."""
        try:
            obj = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"response body is not JSON: {exc}") from exc
        if not isinstance(obj, dict) or not isinstance(obj.get("output"), list):
            raise ValueError("response body has no 'output' list")
        chunk = _usage_chunk(obj.get("usage"))
        for item in obj["output"]:
            for part in (item.get("content") or []) if isinstance(item, dict) else []:
                if (
                    isinstance(part, dict)
                    and part.get("type") == "output_text"
                    and part.get("text")
                ):
                    chunk.content = True
        return chunk
