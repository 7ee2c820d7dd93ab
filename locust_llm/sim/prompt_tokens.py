"""Prompt tokens as a real engine counts them, for a simulator that stands in for that engine.

With ``SimConfig.tokenizer`` (``locust-llm sim --tokenizer DIR``) a chat request's prompt is the
chat template beside the tokenizer rendered over its messages (with the assistant turn opened,
as vLLM renders it) and tokenized by that tokenizer, without special tokens added (the template
writes its own); a completion's prompt is its text tokenized. The token ids become the prompt's
count and the pieces its KV blocks are hashed from, so a twin of an engine holds the same number
of tokens in its KV cache and finds the same prefix hits as the engine. Without a tokenizer the
simulator keeps its own estimate (:func:`locust_llm.workloads.textgen.estimate_tokens`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from locust_llm.workloads.chat_template import find_template
from locust_llm.workloads.tokenizer import HfTokenizer


class EngineTokens:
    """A local Hugging Face tokenizer and the chat template beside it."""

    def __init__(self, path: str) -> None:
        self.tokenizer = HfTokenizer(path)
        self.template = find_template(None, path)

    def ids(self, messages: Sequence[Mapping[str, Any]] | None, text: str | None) -> list[int]:
        """Token ids of a chat's rendered prompt (``messages``) or of a completion's ``text``."""
        if messages is not None:
            if self.template is not None:
                text = self.template.render([dict(m) for m in messages])
            else:  # no template: the messages' text, one after another
                text = "\n".join(str(m.get("content") or "") for m in messages)
        return self.tokenizer.encode(text or "")

    def counted(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` (a parsed request) with its prompt counted and pieced by these tokens;
        a request with neither messages nor text (token ids) is left as it came."""
        if params.get("messages") is None and params.get("text") is None:
            return params
        ids = self.ids(params.get("messages"), params.get("text"))

        def pieces() -> Sequence[str | int]:
            return ids

        return {**params, "prompt_tokens": max(len(ids), 1), "pieces": pieces}
