"""Prompt text of a given token length: the common-word list, keyed blocks, exact cuts (pure).

:data:`WORDS` are short common words, each one token by the simulator's estimate
(:func:`locust_llm.workloads.textgen.estimate_tokens`) and one or two with real BPE tokenizers: N
random words are N estimated tokens. ``block_text(key, tokens)`` is the same words for the same
key, in every process and run: it is what makes two prompts share a prefix (a shared-prefix
group, a trace's hash id). :func:`cut_to_tokens` cuts random words to an exact count with a
tokenizer (the random data set's prompts); :func:`exact_text` does it for a key's words.

The lowest module of the prompt builders: :mod:`.datasets`, :mod:`.shared_prefix`,
:mod:`.traces` and :mod:`.sessions` import it; it imports none of them.
"""

from __future__ import annotations

import hashlib
import random
from functools import lru_cache

from locust_llm.workloads.tokenizer import HfTokenizer

# Short, common English words (at most 4 letters): one token each in common BPE vocabularies and
# in estimate_tokens, so N random words are N estimated tokens.
_WORD_TEXT = """
    able act add age ago air all also and any area arm army art ask away baby back bad ball
    bank base bath bear beat bed been best big bird blue boat body bone book both box boy
    burn busy buy cake call camp can cap car card care case cat cell city coat cold come
    cook cool copy corn cost cow cry cup cut dark day deal dear deep desk die do dog door
    down draw drop dry duck each ear east easy eat edge egg end even ever eye face fact fair
    fall far farm fast fear feed feel few fill find fine fire fish five flat flow fly food
    foot form four free from full fun game gas gate get gift girl give glad go gold good
    grow hair half hall hand hard hat have head hear heat help here high hill hold hole home
    hope hot hour hunt idea inch iron job join joy jump just keep key kind king know lake
    land last late law lay lead left leg less lie life like line lion list live long look
    lose loud love low main make man many map mark may meal mean meat meet milk mind miss
    moon more most move much must name near neck need new next nice nine nose note now off
    oil old once one only open out over own page pair park part pass past path pay pick plan
    play pool poor pull push put race rain read real red rest rice rich ride ring rise road
    rock roll room root rope rose row rule run safe salt same sand save say sea seat see
    seed sell send ship shoe shop show side sign sing sit six size skin sky slow snow soft
    soil some son song soon star stay step stop such sun sure swim tail take talk tall team
    tell ten test than then thin tiny tool top town tree trip true try turn two unit upon
    use very view wait walk wall want warm wash wave way wear week well west wide wild will
    wind wire wise wish with wood word work year
"""
WORDS: tuple[str, ...] = tuple(_WORD_TEXT.split())


def _rng(key: str) -> random.Random:
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return random.Random(seed)


@lru_cache(maxsize=4096)  # shared blocks (trace hash ids, prefix groups) recur
def block_text(key: str, tokens: int) -> str:
    """``tokens`` words (one token each by the simulator's estimate) determined by ``key``; a
    shorter length is a prefix of a longer one with the same key."""
    return " ".join(_rng(key).choices(WORDS, k=max(tokens, 0)))


def cut_to_tokens(tok: HfTokenizer, rng: random.Random, target: int) -> tuple[str, int]:
    """Random words cut to exactly ``target`` tokens (or as near as the tokenizer allows)."""
    best = ("", -1)
    for _attempt in range(4):  # a cut that merges badly is rare: fresh words fix it
        words = rng.choices(WORDS, k=target + 8)
        ids = tok.encode(" ".join(words))
        while len(ids) < target:  # a tokenizer that merges words: add more
            words += rng.choices(WORDS, k=target - len(ids) + 8)
            ids = tok.encode(" ".join(words))
        cut = target
        for _ in range(4):  # decode/re-encode may merge at the cut: nudge the cut
            text = tok.decode(ids[:cut])
            got = tok.count(text)
            if abs(got - target) < abs(best[1] - target):
                best = (text, got)
            if got == target:
                return best
            cut = min(max(cut + target - got, 1), len(ids))
    return best


def exact_text(key: str, tokens: int, tokenizer: HfTokenizer) -> str:
    """Text of exactly ``tokens`` tokens by ``tokenizer`` (the nearest it allows), fixed by
    ``key`` (the random data set's cut, drawn from the key's generator)."""
    return cut_to_tokens(tokenizer, _rng(key), tokens)[0]
