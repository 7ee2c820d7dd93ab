"""``/v1/embeddings``: a batch of inputs in, one vector each out; never streamed.

The request is ``{"model", "input": [text, ...]}`` (one input per request unless the user
class batches: :class:`locust_llm.client.workload_users.EmbeddingsUser`); the answer is one JSON
body with ``data[]`` (one embedding per input) and ``usage.prompt_tokens``. The record has
no TTFT (no token is generated); E2E is the request's latency, ``input_tokens`` the batch's
tokens and ``batch_inputs`` its inputs, from which the report takes inputs/s and tokens/s.
"""

from __future__ import annotations

import json
from typing import Any

from locust_llm.client.apis.base import ApiAdapter, BodyRequest, register_api
from locust_llm.client.sse import Chunk, read_usage


@register_api
class EmbeddingsApi(ApiAdapter):
    name = "embeddings"
    path = "/v1/embeddings"
    streams = False

    def build_body(self, request: BodyRequest) -> dict[str, Any]:
        texts = request.prompt.prompt
        body: dict[str, Any] = {
            "model": request.model,
            "input": texts if isinstance(texts, list) else [texts],
        }
        body.update(request.extra_body)
        return body

    def classify(self, payload: bytes) -> tuple[int, Chunk | None]:
        raise NotImplementedError("embeddings are never streamed")

    @staticmethod
    def parse_body(body: bytes) -> Chunk:
        try:
            obj = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"response body is not JSON: {exc}") from exc
        data = obj.get("data") if isinstance(obj, dict) else None
        if not isinstance(data, list) or not all(
            isinstance(d, dict) and isinstance(d.get("embedding"), list | str) for d in data
        ):
            raise ValueError("embeddings body has no 'data' list of embeddings")
        chunk = Chunk(content=bool(data))
        read_usage(chunk, obj.get("usage"))
        chunk.completion_tokens = 0
        return chunk
