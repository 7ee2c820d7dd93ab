"""Request traces to replay on their own schedule: Mooncake JSONL, plain JSONL, CSV (pure).

Formats (one request per line, any order; lines are sorted by time, ties keep file order):

- **Mooncake** JSONL: ``{"timestamp": ms, "input_length": N, "output_length": M,
  "hash_ids": [...]}``. Hash id ``h`` stands for one block of ``block_tokens`` (512) prompt
  tokens; equal ids are identical blocks, so the prompts built here share exactly the prefixes
  the production prompts shared (the last block holds what is left of ``input_length``).
- plain JSONL: ``{"timestamp": ms, "prompt": "..." | "input_length": N, "max_tokens" |
  "output_length": M}`` (``timestamp_s`` in seconds instead of ``timestamp`` is accepted).
- CSV with a header naming the same columns.

:func:`window` cuts the trace to ``[start_s, end_s)`` of trace time (re-based to 0);
:func:`expected_hit_rate` is the share of prompt tokens an unbounded prefix cache would serve,
computed from the hash ids alone (what a server's prefix-cache hit rate should come to).
"""

from __future__ import annotations

import csv
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from locust_llm.errors import InputError
from locust_llm.workloads.prompt import Prompt
from locust_llm.workloads.texts import block_text

MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True, slots=True)
class TraceLine:
    """One request of a trace; ``time_s`` from the trace's start, ``index`` its position."""

    index: int
    time_s: float
    input_tokens: int
    output_tokens: int | None
    hash_ids: tuple[int, ...] = ()
    prompt: str = ""


def _number(obj: dict[str, Any], keys: Sequence[str], where: str, *, required: bool) -> Any:
    for key in keys:
        value = obj.get(key)
        if value not in (None, ""):
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise InputError(f"{where}: {key} {value!r} is not a number") from None
            if not math.isfinite(number) or number < 0:
                raise InputError(f"{where}: {key} {value!r} must be a number >= 0")
            return number
    if required:
        raise InputError(f"{where}: no {' or '.join(keys)}")
    return None


def _line(obj: Any, index: int, where: str) -> TraceLine:
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected an object with timestamp and input_length or prompt")
    ms = _number(obj, ("timestamp",), where, required=False)
    time_s = (
        ms / 1000.0 if ms is not None else _number(obj, ("timestamp_s",), where, required=False)
    )
    if time_s is None:
        raise InputError(f"{where}: no timestamp (ms) or timestamp_s")
    prompt = obj.get("prompt") or ""
    if not isinstance(prompt, str):
        raise InputError(f"{where}: prompt must be a string")
    length = _number(obj, ("input_length", "input_tokens"), where, required=not prompt)
    out = _number(obj, ("output_length", "max_tokens", "output_tokens"), where, required=False)
    raw_ids = obj.get("hash_ids") or ()
    if isinstance(raw_ids, str):  # CSV: "1 2 3"
        raw_ids = raw_ids.replace(",", " ").split()
    try:
        hash_ids = tuple(int(h) for h in raw_ids)
    except (TypeError, ValueError):
        raise InputError(f"{where}: hash_ids must be a list of integers") from None
    return TraceLine(
        index=index,
        time_s=time_s,
        input_tokens=int(length) if length is not None else 0,
        output_tokens=max(int(out), 1) if out is not None else None,
        hash_ids=hash_ids,
        prompt=prompt,
    )


def read_trace(path: str | Path) -> list[TraceLine]:
    """All lines of a trace file (``.csv`` by suffix, else JSONL), sorted by time."""
    file = Path(path)
    if not file.is_file():
        raise InputError(f"trace {str(path)!r}: no such file (a Mooncake JSONL, JSONL or CSV)")
    rows: list[tuple[Any, str]] = []
    with file.open(encoding="utf-8", newline="") as fh:
        if file.suffix.lower() == ".csv":
            rows = [(row, f"{path}:{n}") for n, row in enumerate(csv.DictReader(fh), 2)]
        else:
            for n, text in enumerate(fh, 1):
                if text.strip():
                    try:
                        rows.append((json.loads(text), f"{path}:{n}"))
                    except ValueError:
                        raise InputError(f"{path}:{n}: not JSON") from None
    if not rows:
        raise InputError(f"trace {str(path)!r} holds no request")
    lines = [_line(obj, i, where) for i, (obj, where) in enumerate(rows)]
    lines.sort(key=lambda x: (x.time_s, x.index))
    return [
        TraceLine(i, x.time_s, x.input_tokens, x.output_tokens, x.hash_ids, x.prompt)
        for i, x in enumerate(lines)
    ]


def window(
    lines: Sequence[TraceLine], start_s: float = 0.0, end_s: float = math.inf
) -> list[TraceLine]:
    """The lines with ``start_s <= time_s - first < end_s``, re-numbered and re-based to 0."""
    if not lines:
        return []
    if end_s <= start_s:
        raise InputError(f"trace window [{start_s:g}s, {end_s:g}s) is empty")
    origin = lines[0].time_s + start_s
    kept = [x for x in lines if start_s <= x.time_s - lines[0].time_s < end_s]
    return [
        TraceLine(i, x.time_s - origin, x.input_tokens, x.output_tokens, x.hash_ids, x.prompt)
        for i, x in enumerate(kept)
    ]


def block_tokens_of(line: TraceLine, block_tokens: int) -> list[int]:
    """Tokens of each of the line's hash blocks (the last one takes what is left)."""
    n = len(line.hash_ids)
    if not n:
        return []
    last = line.input_tokens - block_tokens * (n - 1)
    return [block_tokens] * (n - 1) + [max(min(last, block_tokens), 0)]


def trace_prompt(
    line: TraceLine, *, block_tokens: int = MOONCAKE_BLOCK_TOKENS, salt: str = ""
) -> Prompt:
    """The request of ``line``: its prompt, or text built from its hash ids (equal ids, equal
    words), or ``input_length`` unique words."""
    if line.prompt:
        text = line.prompt
        tokens = line.input_tokens or len(text.split())
    elif line.hash_ids:
        sizes = block_tokens_of(line, block_tokens)
        text = " ".join(
            block_text(f"{salt}hash:{h}", k)
            for h, k in zip(line.hash_ids, sizes, strict=True)
            if k > 0
        )
        tokens = sum(sizes)
    else:
        text = block_text(f"{salt}line:{line.index}", line.input_tokens)
        tokens = line.input_tokens
    return Prompt([{"role": "user", "content": text}], text, tokens, line.output_tokens)


def expected_hit_rate(
    lines: Sequence[TraceLine],
    *,
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
    server_block_tokens: int = 16,
) -> float:
    """Cached / prompt tokens of an unbounded prefix cache fed the lines in order, from the hash
    ids alone. Hash block ``j`` of a line stands for its whole prefix (ids ``0..j``); a server
    caches whole blocks of ``server_block_tokens`` (vLLM's 16), so a block seen before with
    ``k`` tokens serves ``k`` rounded down to those; a hit run stops at the first block not
    fully served, and never covers the last prompt token (a server always computes it)."""
    cached: dict[tuple[int, ...], int] = {}  # prefix of ids -> tokens of its block computed
    hit = total = 0
    sb = max(server_block_tokens, 1)
    for line in lines:
        total += line.input_tokens
        run, running = 0, True
        for j, size in enumerate(block_tokens_of(line, block_tokens)):
            key = line.hash_ids[: j + 1]
            before = cached.get(key, 0)
            if running:
                served = min(size, before) // sb * sb if j * block_tokens == run else 0
                run += served
                running = served == size
            cached[key] = max(before, size // sb * sb)
        hit += min(run, max(line.input_tokens - 1, 0) // sb * sb)
    return hit / total if total else math.nan


def synthetic_mooncake(
    lines: int,
    *,
    rate_per_s: float,
    groups: int = 8,
    shared_blocks: int = 2,
    unique_blocks: tuple[int, int] = (0, 2),
    tail_tokens: tuple[int, int] = (16, 400),
    output_tokens: tuple[int, int] = (8, 64),
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """A Mooncake-format trace (tests, benchmarks, the sample): Poisson arrivals at
    ``rate_per_s``; each request opens with one of ``groups`` shared runs of ``shared_blocks``
    hash ids, then its own full blocks and a partial tail block of its own."""
    rng = random.Random(seed)
    next_id = groups * shared_blocks
    t_s = 0.0
    out = []
    for _ in range(lines):
        g = rng.randrange(groups)
        ids = list(range(g * shared_blocks, (g + 1) * shared_blocks))
        own = rng.randint(*unique_blocks) + 1  # + the tail block
        ids += range(next_id, next_id + own)
        next_id += own
        length = block_tokens * (len(ids) - 1) + rng.randint(*tail_tokens)
        out.append(
            {
                "timestamp": round(t_s * 1000.0),
                "input_length": length,
                "output_length": rng.randint(*output_tokens),
                "hash_ids": ids,
            }
        )
        t_s += rng.expovariate(rate_per_s)
    return out


def write_jsonl(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """``rows`` as a JSONL file (one object a line)."""
    file = Path(path)
    file.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return file
