"""Deterministic text for the simulator: prompt-token estimates, output lengths, output words.

:func:`estimate_tokens` is public because the client's random dataset aims prompt lengths with
the same estimate: each run of letters/digits costs ceil(len / 4) tokens (a word piece per four
characters), each other non-space character one token; whitespace is free. English prose comes
out near 1.3 tokens per word, close to real BPE tokenizers.

Output words come from a fixed vocabulary of words of at most four letters, so each generated
token is exactly one token by the same estimate. Which words, and how many, depend only on the
seed and the request's number: the same ``--seed`` replays the same answers.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable

from locust_llm.workloads.distributions import parse_distribution

_PIECES = re.compile(r"\w+|[^\w\s]")

_WORDS = (
    "the of and to in is was for on are with as his they be at one have this from or had by hot "
    "word but what some we can out were all when up use your how said an each she do time if will "
    "way many then them make like him into has look two more go see no my than been call who its "
    "now find long down day did get come made may part over new take only work know year live me "
    "back give most very our just name good man say help much too mean old any same tell boy went "
    "want show also form end does set put home read hand port add even land here must big high "
    "such act why ask men need page far sea draw left late run keep eye tree city hard open seem "
    "next few life line "
)

#: Output vocabulary; each entry is one token (at most four letters), JSON-safe, with its
#: leading space.
VOCAB: tuple[str, ...] = tuple(" " + w for w in _WORDS.split())


def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` by the simulator's deterministic estimate (0 for empty text)."""
    return sum((len(p) + 3) // 4 for p in _PIECES.findall(text))


def estimate_message_tokens(messages: Iterable[object]) -> int:
    """Prompt tokens of a chat ``messages`` list: the sum over each message's text parts."""
    total = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            total += estimate_tokens(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    total += estimate_tokens(part["text"])
    return total


def prompt_pieces(text: str) -> list[str]:
    """The tokens of ``text`` by the same estimate, as strings: each run of letters/digits cut
    into pieces of four characters, each other non-space character alone
    (``len(prompt_pieces(t)) == estimate_tokens(t)``). The prefix cache hashes these."""
    out: list[str] = []
    keep = out.append
    for piece in _PIECES.findall(text):
        if len(piece) <= 4:
            keep(piece)  # most words: one piece
        else:
            out.extend(piece[i : i + 4] for i in range(0, len(piece), 4))
    return out


def message_pieces(messages: Iterable[object]) -> list[str]:
    """:func:`prompt_pieces` over a chat ``messages`` list, in order; a message's first token
    carries its role, so equal texts under different roles differ (the count is unchanged)."""
    out: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        texts = [content] if isinstance(content, str) else []
        if isinstance(content, list):
            texts = [
                p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            ]
        pieces = [t for text in texts for t in prompt_pieces(text)]
        if pieces:
            pieces[0] = f"{message.get('role')}\x1e{pieces[0]}"
        out.extend(pieces)
    return out


def answer_pieces(seed: int, request_number: int, tokens: int, *, chat: bool) -> list[str]:
    """The tokens the simulator will generate for a request, as a follow-up prompt carrying
    that answer tokenizes them (:func:`prompt_pieces`; in chat, the first one carries the
    ``assistant`` role, as :func:`message_pieces` gives it)."""
    stream = WordStream(seed, request_number)
    out = [stream.next_word().strip() for _ in range(tokens)]
    if chat and out:
        out[0] = f"assistant\x1e{out[0]}"
    return out


class OutputLengths:
    """Seeded draws of EOS-ended output lengths from a ``--output-len`` spec
    (:func:`~locust_llm.workloads.distributions.parse_distribution`)."""

    def __init__(self, spec: str, seed: int) -> None:
        self.distribution = parse_distribution(spec, what="--output-len")
        self._rng = random.Random(f"output-len:{seed}")

    def draw(self) -> int:
        """One length in tokens, >= 1."""
        return self.distribution.sample(self._rng)


class WordStream:
    """The words of one answer: a 64-bit LCG seeded by (seed, request number)."""

    __slots__ = ("_state",)

    def __init__(self, seed: int, request_number: int) -> None:
        mixed = (seed * 0x9E3779B97F4A7C15 + request_number * 0xBF58476D1CE4E5B9 + 1) & _MASK
        self._state = mixed

    def next_word(self) -> str:
        """The next token's text."""
        self._state = (self._state * 6364136223846793005 + 1442695040888963407) & _MASK
        return VOCAB[(self._state >> 33) % len(VOCAB)]

    def words(self, n: int) -> str:
        """The next ``n`` tokens' text, concatenated."""
        return "".join(self.next_word() for _ in range(n))


_MASK = (1 << 64) - 1
