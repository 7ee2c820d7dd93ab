"""``/v1/completions``: a plain-text prompt in, ``choices[].text`` out.

Its chunks are OpenAI chunks too: the chat adapter's fast path and ``[DONE]`` end.
"""

from __future__ import annotations

from typing import Any

from locust_llm.client.apis.base import BodyRequest, OpenAIChunksApi, common_fields, register_api


@register_api
class CompletionsApi(OpenAIChunksApi):
    name = "completions"
    path = "/v1/completions"

    def build_body(self, request: BodyRequest) -> dict[str, Any]:
        return common_fields({"model": request.model, "prompt": request.prompt.prompt}, request)
