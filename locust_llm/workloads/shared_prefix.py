"""Shared-prefix prompts: one of K shared prefixes of P tokens + a unique suffix (pure).

``shared-prefix:groups=4,prefix=1024,suffix=128`` as a data set (``--llm-dataset`` or a user
class's ``dataset``): each request picks group ``g`` (``weights=`` sets the share of requests
per group, default equal), sends group ``g``'s prefix (the same text in every process and run)
and a suffix drawn from the user's own generator, so prompts share exactly the prefix. With a
tokenizer (``--llm-tokenizer``) the prefix is cut to exactly P tokens and the whole prompt is
counted exactly; without one, the words are one token each by the simulator's estimate.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from locust_llm.errors import InputError
from locust_llm.workloads.distributions import Distribution, parse_distribution
from locust_llm.workloads.prompt import Prompt
from locust_llm.workloads.texts import block_text, exact_text
from locust_llm.workloads.tokenizer import HfTokenizer

PREFIX = "shared-prefix:"
_USAGE = "shared-prefix:groups=K,prefix=P,suffix=LEN[,weights=W1/W2/...]"


@dataclass(frozen=True, slots=True)
class SharedPrefixSpec:
    groups: int
    prefix_tokens: int
    suffix: str  # a length distribution ("128", "uniform:64,256")
    weights: tuple[float, ...]


def parse_spec(spec: str) -> SharedPrefixSpec:
    """``shared-prefix:groups=4,prefix=1024,suffix=128`` -> its fields; one-line errors."""
    body = spec[len(PREFIX) :] if spec.startswith(PREFIX) else spec
    fields: dict[str, str] = {}
    last = ""
    for part in filter(None, body.split(",")):
        key, eq, value = part.partition("=")
        if not eq and last == "suffix":  # a distribution's own commas: uniform:64,256
            fields[last] += "," + part
            continue
        if not eq or key.strip() not in ("groups", "prefix", "suffix", "weights"):
            raise InputError(
                f"{spec!r}: {part!r} is not one of groups=, prefix=, suffix=, weights="
            )
        last = key.strip()
        fields[last] = value.strip()
    try:
        groups = int(fields.get("groups", "1"))
        prefix = int(fields.get("prefix", "0"))
        weights = (
            tuple(float(w) for w in fields["weights"].split("/")) if "weights" in fields else ()
        )
    except ValueError:
        raise InputError(f"{spec!r}: groups and prefix are integers; expected {_USAGE}") from None
    if groups < 1 or prefix < 0:
        raise InputError(f"{spec!r}: groups must be >= 1 and prefix >= 0; expected {_USAGE}")
    if weights and (len(weights) != groups or any(w < 0 for w in weights) or sum(weights) <= 0):
        raise InputError(f"{spec!r}: weights= needs {groups} non-negative shares, e.g. 3/1")
    return SharedPrefixSpec(groups, prefix, fields.get("suffix", "128"), weights or (1.0,) * groups)


class SharedPrefixSource:
    """A prompt source: a group's prefix + a unique suffix."""

    name = "shared-prefix"

    def __init__(
        self, spec: SharedPrefixSpec, *, seed: int = 0, tokenizer: HfTokenizer | None = None
    ) -> None:
        self.spec = spec
        self._rng = random.Random(seed)
        self._tokenizer = tokenizer
        self.suffix_len: Distribution = parse_distribution(spec.suffix, what="shared-prefix suffix")
        key = f"{seed}:shared-prefix:{spec.prefix_tokens}"
        self.prefixes = [
            exact_text(f"{key}:{g}", spec.prefix_tokens, tokenizer)
            if tokenizer is not None
            else block_text(f"{key}:{g}", spec.prefix_tokens)
            for g in range(spec.groups)
        ]
        self.name = f"shared-prefix {spec.groups}x{spec.prefix_tokens}"

    def next_request(self, rng: random.Random | None = None) -> Prompt:
        rng = rng or self._rng
        group = rng.choices(range(self.spec.groups), weights=self.spec.weights)[0]
        words = self.suffix_len.sample(rng)
        suffix = block_text(f"suffix:{rng.random()!r}", words)
        text = f"{self.prefixes[group]} {suffix}" if self.prefixes[group] else suffix
        if self._tokenizer is not None:
            tokens = self._tokenizer.count(text)
        else:
            tokens = self.spec.prefix_tokens + words
        return Prompt([{"role": "user", "content": text}], text, tokens, None)


def load_shared_prefix(
    spec: str, *, seed: int = 0, tokenizer: HfTokenizer | None = None
) -> SharedPrefixSource:
    return SharedPrefixSource(parse_spec(spec), seed=seed, tokenizer=tokenizer)
