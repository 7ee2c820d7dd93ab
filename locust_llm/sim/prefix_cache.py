"""Prefix caching the way vLLM's v1 KV-cache manager does it: chained block hashes, LRU eviction.

A prompt's full blocks (``block_size`` tokens each; a partial last block is never cached) get
one hash each, chained: block ``i``'s hash covers block ``i - 1``'s hash and its own tokens, so
two prompts share block ``i``'s hash exactly when their first ``(i + 1) x block_size`` tokens
are identical. Hashes are SHA-256 of the tokens' text (or ids), so they are deterministic across
processes and runs.

:class:`PrefixCache` holds the hashes of computed blocks. A block is *referenced* while some
running request uses it, and *evictable* once none does: evictable blocks still count as free
KV memory (``vllm:kv_cache_usage_perc`` leaves them out, as vLLM does) and are reclaimed least
recently freed first when new blocks are needed (a request's blocks join that order tail
first, so prefixes shrink from their end, as in vLLM). The engine (``locust_llm.sim.engine``) owns
the block counts; this class only says which blocks hold which hashes.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence

#: The parent hash of a prompt's first block.
ROOT_HASH = b"locust-llm-sim/prefix-root"
#: Between a block's tokens in the hashed bytes.
SEPARATOR = "\x1f"


def block_hashes(tokens: Sequence[str | int], block_size: int) -> tuple[bytes, ...]:
    """Chained hashes of the full ``block_size``-token blocks of ``tokens``."""
    out = []
    parent = ROOT_HASH
    for end in range(block_size, len(tokens) + 1, block_size):
        # a token is never empty and never holds the separator inside a longer piece
        block = SEPARATOR.join(map(str, tokens[end - block_size : end]))
        parent = hashlib.sha256(parent + block.encode("utf-8", "surrogatepass")).digest()
        out.append(parent)
    return tuple(out)


class PrefixCache:
    """Which computed blocks hold which hashes: referenced counts and an LRU of free ones."""

    __slots__ = ("evictable", "evictions_total", "referenced")

    def __init__(self) -> None:
        self.referenced: dict[bytes, int] = {}  # hash -> running requests using the block
        self.evictable: OrderedDict[bytes, None] = OrderedDict()  # oldest first
        self.evictions_total = 0

    def __contains__(self, block_hash: bytes) -> bool:
        return block_hash in self.referenced or block_hash in self.evictable

    def hits(self, hashes: Sequence[bytes], max_blocks: int) -> tuple[list[bytes], int]:
        """The longest cached prefix of ``hashes`` (at most ``max_blocks``) and how many of its
        blocks are evictable now (taking them uses free blocks)."""
        found: list[bytes] = []
        from_free = 0
        for h in hashes[: max(max_blocks, 0)]:
            if h in self.referenced:
                found.append(h)
            elif h in self.evictable:
                found.append(h)
                from_free += 1
            else:
                break
        return found, from_free

    def acquire(self, hashes: Sequence[bytes]) -> None:
        """A request starts using these cached blocks."""
        for h in hashes:
            if h in self.evictable:
                del self.evictable[h]
                self.referenced[h] = 1
            else:
                self.referenced[h] += 1

    def register(self, block_hash: bytes) -> bool:
        """A request just computed a full block: cache it (False when the hash already is)."""
        if block_hash in self:
            return False
        self.referenced[block_hash] = 1
        return True

    def release(self, hashes: Sequence[bytes]) -> int:
        """A request stops using these blocks (in prompt order); returns how many became free.

        They join the eviction order tail block first, as vLLM frees them, so a prefix is
        evicted from its end and its head stays reusable longest.
        """
        freed = 0
        for h in reversed(hashes):
            left = self.referenced[h] - 1
            if left:
                self.referenced[h] = left
            else:
                del self.referenced[h]
                self.evictable[h] = None
                freed += 1
        return freed

    def evict(self, blocks: int) -> None:
        """Forget the ``blocks`` least recently freed blocks (their memory is reused)."""
        for _ in range(min(blocks, len(self.evictable))):
            self.evictable.popitem(last=False)
            self.evictions_total += 1
