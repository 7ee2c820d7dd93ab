"""What a request sends: :class:`Prompt`, and :class:`PromptSource`, anything that hands them out.

Pure and at the bottom of the workloads family: the data sets (:mod:`.datasets`), shared-prefix
prompts (:mod:`.shared_prefix`), traces and sessions build prompts; the client's APIs send them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request's input.

    ``messages`` (chat: ``[{"role": ..., "content": "plain string"}]``) and ``prompt`` (the same
    text for ``/v1/completions``), the prompt's token count (exact with a tokenizer, else
    :func:`~locust_llm.workloads.textgen.estimate_tokens`), and the data set's output-length hint
    (``None`` when it gives none).
    """

    messages: list[dict[str, str]]
    prompt: str
    input_tokens_estimate: int
    max_tokens: int | None = None


class PromptSource(Protocol):
    """Anything that hands out prompts; ``name`` says which data set (for run.json)."""

    name: str

    def next_request(self, rng: random.Random | None = None) -> Prompt:
        """The next prompt, drawn with ``rng`` (the source's own seeded one when ``None``)."""
        ...
