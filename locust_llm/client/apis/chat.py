"""``/v1/chat/completions``: messages in, ``choices[].delta.content`` (or reasoning) out.

Its stream goes through the OpenAI-chunk fast path (:class:`~.base.OpenAIChunksApi`) and ends
at ``data: [DONE]``.
"""

from __future__ import annotations

from typing import Any

from locust_llm.client.apis.base import BodyRequest, OpenAIChunksApi, common_fields, register_api


@register_api
class ChatApi(OpenAIChunksApi):
    name = "chat"
    path = "/v1/chat/completions"

    def build_body(self, request: BodyRequest) -> dict[str, Any]:
        return common_fields({"model": request.model, "messages": request.prompt.messages}, request)
