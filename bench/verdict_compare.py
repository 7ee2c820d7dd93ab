"""Two runs of the verdict benchmark on the same seeds, side by side: what a change did.

    .venv/bin/python bench/verdict_compare.py BEFORE.jsonl AFTER.jsonl

``BEFORE`` and ``AFTER`` are ``bench/verdict_accuracy.py --dump`` files of the same seeds (the
code before a change, from a worktree, and after it; a comma-separated list of dumps reads as
one). Printed: kind and cause right over the judged stages (abstentions counted as misses, as
the benchmark counts them), overall, per ground-truth class and per confidence level, before ->
after; the resource model's error against the traces' shares, |row - trace| per judged stage
(median / P90 / mean; the compute share against the trace's compute-set share, the memory share
against the memory term of the steps memory bounded); and every judged stage whose verdict
changed, with the trace's label. A stage in one file and not the other is an error: the two
runs must be the same matrix.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

Key = tuple[int, int, int]

#: (the row's column, the trace's field) whose gap the comparison reports
SHARES = (("compute_time_share", "compute_share"), ("memory_time_share", "memory_set_share"))


def load(spec: str) -> dict[Key, dict[str, Any]]:
    """The stages of one or more dumps (comma-separated paths), by (seed, case, stage)."""
    out: dict[Key, dict[str, Any]] = {}
    for path in spec.split(","):
        for line in Path(path).read_text().splitlines():
            stage = json.loads(line)
            out[(stage["seed"], stage["case"], stage["stage"])] = stage
    return out


def right(stage: dict[str, Any]) -> bool:
    """Kind and cause both the trace's (an abstention names neither)."""
    return stage["cause"] == stage["label"] and stage["kind"] == stage["truth_kind"]


def tally(stages: Iterable[dict[str, Any]]) -> tuple[Counter[str], Counter[str]]:
    """(right, judged) per group: "all", each label, "confidence <level>"."""
    hits: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    for stage in stages:
        if not stage["judged"]:
            continue
        for group in ("all", stage["label"], f"confidence {stage['confidence']}"):
            seen[group] += 1
            hits[group] += right(stage)
    return hits, seen


def spread(values: list[float]) -> str:
    """ "median / P90 / mean" of ``values``."""
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"{statistics.median(ordered):.3f} / {p90:.3f} / {statistics.fmean(ordered):.3f}"


def share_errors(
    before: dict[Key, dict[str, Any]], after: dict[Key, dict[str, Any]], column: str, truth: str
) -> tuple[list[float], list[float]]:
    """|row - trace| of ``column`` against the trace's ``truth``, before and after, over the
    judged stages where both runs and the trace have the figure."""
    old, new = [], []
    for key, stage in after.items():
        was, said = before[key]["row"].get(column), stage["row"].get(column)
        real = stage["truth"].get(truth)
        if stage["judged"] and None not in (was, said, real):
            old.append(abs(was - real))
            new.append(abs(said - real))
    return old, new


def report(before: dict[Key, dict[str, Any]], after: dict[Key, dict[str, Any]]) -> str:
    """The comparison as text (see the module docstring)."""
    if before.keys() != after.keys():
        raise SystemExit("the two dumps hold different stages: not the same seeds and runs")
    (old_hits, old_seen), (new_hits, new_seen) = tally(before.values()), tally(after.values())
    lines = ["kind and cause right (before -> after):"]
    for group in sorted(new_seen, key=lambda g: (g != "all", g.startswith("confidence"), g)):
        n = new_seen[group]
        lines.append(
            f"  {group:<28} {old_hits[group]} / {old_seen[group]} -> {new_hits[group]} / {n}"
            f" = {new_hits[group] / n:.1%}"
        )
    lines.append("|row - trace| per judged stage, median / P90 / mean (before -> after):")
    for column, truth in SHARES:
        old, new = share_errors(before, after, column, truth)
        if old:
            lines.append(f"  {column} ({len(old)} stages): {spread(old)} -> {spread(new)}")
    lines.append("changed verdicts (seed case stage: trace; before -> after):")
    for key in sorted(after):
        was, now = before[key], after[key]
        if now["judged"] and (was["cause"], was["kind"]) != (now["cause"], now["kind"]):
            mark = "mended" if right(now) else ("lost" if right(was) else "still missed")
            lines.append(
                f"  {key[0]} {key[1]} {key[2]}: {now['label']}; {was['cause']} -> "
                f"{now['cause']} ({mark})"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="--dump file(s) of the code before, comma-separated")
    parser.add_argument("after", help="--dump file(s) of the code after, same seeds")
    args = parser.parse_args(argv)
    print(report(load(args.before), load(args.after)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
