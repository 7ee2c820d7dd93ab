"""Deterministic prompt text of a given token length, keyed by a name (pure).

``block_text(key, tokens)`` is the same words for the same key, in every process and run: it is
what makes two prompts share a prefix (a shared-prefix group, a trace's hash id). Words come
from the data sets' common-word list, each one token by the simulator's estimate
(:func:`locust_llm.sim.textgen.estimate_tokens`) and one or two with real BPE tokenizers;
:func:`exact_text` cuts text to an exact count with a tokenizer.
"""

from __future__ import annotations

import hashlib
import random
from functools import lru_cache

from locust_llm.workloads.datasets import WORDS, HfTokenizer, _exact_text


def _rng(key: str) -> random.Random:
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return random.Random(seed)


@lru_cache(maxsize=4096)  # shared blocks (trace hash ids, prefix groups) recur
def block_text(key: str, tokens: int) -> str:
    """``tokens`` words (one token each by the simulator's estimate) determined by ``key``; a
    shorter length is a prefix of a longer one with the same key."""
    return " ".join(_rng(key).choices(WORDS, k=max(tokens, 0)))


def exact_text(key: str, tokens: int, tokenizer: HfTokenizer) -> str:
    """Text of exactly ``tokens`` tokens by ``tokenizer`` (the nearest it allows), fixed by
    ``key`` (the random data set's cut, drawn from the key's generator)."""
    return _exact_text(tokenizer, _rng(key), tokens)[0]
