"""Two runs of the verdict benchmark on the same seeds, side by side: what a change did.

    .venv/bin/python bench/verdict_compare.py BEFORE.jsonl AFTER.jsonl

``BEFORE`` and ``AFTER`` are ``bench/verdict_accuracy.py --dump`` files of the same seeds (the
code before a change, from a worktree, and after it; a comma-separated list of dumps reads as
one). Printed: kind and cause right over the judged stages (abstentions counted as misses, as
the benchmark scores them: :func:`verdict_accuracy.summary`), overall, per ground-truth class
and per confidence level, before -> after; the resource model's error against the traces'
shares, |row - trace| per judged stage (median / P90 / mean; the compute share against the
trace's compute-set share, the memory share against the memory term of the steps memory
bounded); and every judged stage whose verdict changed, with the trace's label. A stage in one
file and not the other is an error: the two runs must be the same matrix.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import verdict_accuracy as va

Key = tuple[int, int, int]
Stages = dict[Key, va.StageResult]

#: (the row's column, the trace's field) whose gap the comparison reports
SHARES = (("compute_time_share", "compute_share"), ("memory_time_share", "memory_set_share"))


def load(spec: str) -> Stages:
    """The stages of one or more dumps (comma-separated paths), by (seed, case, stage)."""
    return {
        (s.seed, s.case, s.stage): s for path in spec.split(",") for s in va.read_dump(Path(path))
    }


def right(stage: va.StageResult) -> bool:
    """Kind and cause both the trace's (an abstention names neither), as the benchmark scores."""
    return stage.cause == stage.label and stage.kind == stage.truth_kind


def counts(stages: Stages) -> dict[str, tuple[int, int]]:
    """(right, judged) of kind and cause: "all", each class, "confidence <level>"."""
    s = va.summary(list(stages.values()))
    out = {"all": (s["kind_right"], s["judged"]), **s["kind_per_class"]}
    out.update({f"confidence {level}": n for level, n in s["per_confidence"].items()})
    return out


def spread(values: list[float]) -> str:
    """ "median / P90 / mean" of ``values``."""
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"{statistics.median(ordered):.3f} / {p90:.3f} / {statistics.fmean(ordered):.3f}"


def share_errors(
    before: Stages, after: Stages, column: str, truth: str
) -> tuple[list[float], list[float]]:
    """|row - trace| of ``column`` against the trace's ``truth``, before and after, over the
    judged stages where both runs and the trace have the figure."""
    old, new = [], []
    for key, stage in after.items():
        was, said = before[key].row.get(column), stage.row.get(column)
        real = stage.truth.get(truth)
        if stage.judged and None not in (was, said, real):
            old.append(abs(was - real))
            new.append(abs(said - real))
    return old, new


def report(before: Stages, after: Stages) -> str:
    """The comparison as text (see the module docstring)."""
    if before.keys() != after.keys():
        raise SystemExit("the two dumps hold different stages: not the same seeds and runs")
    old, new = counts(before), counts(after)
    lines = ["kind and cause right (before -> after):"]
    for group in sorted(new, key=lambda g: (g != "all", g.startswith("confidence"), g)):
        (hits, n), (was, was_n) = new[group], old.get(group, (0, 0))
        lines.append(f"  {group:<28} {was} / {was_n} -> {hits} / {n} = {hits / n:.1%}")
    lines.append("|row - trace| per judged stage, median / P90 / mean (before -> after):")
    for column, truth in SHARES:
        errors_before, errors_after = share_errors(before, after, column, truth)
        if errors_before:
            lines.append(
                f"  {column} ({len(errors_before)} stages): "
                f"{spread(errors_before)} -> {spread(errors_after)}"
            )
    lines.append("changed verdicts (seed case stage: trace; before -> after):")
    for key in sorted(after):
        was, now = before[key], after[key]
        if now.judged and (was.cause, was.kind) != (now.cause, now.kind):
            mark = "mended" if right(now) else ("lost" if right(was) else "still missed")
            lines.append(
                f"  {key[0]} {key[1]} {key[2]}: {now.label}; {was.cause} -> {now.cause} ({mark})"
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
