"""How long the quick tier of tests takes: `pytest -m quick`, run several times, medians.

The quick tier (README: ``.venv/bin/python -m pytest -m quick``) holds the pure and in-process
tests; its target is under 60 s on 2 cores. Each run is the documented command with pytest's
own cache off, timed wall to wall (interpreter start, collection and both xdist processes
included); the table gives every run, the median and the test count pytest printed.

    .venv/bin/python bench/test_tiers.py --runs 3

writes ``bench/results/test_tiers.md``; ``python bench/collect_results.py`` adds it to
``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "test_tiers.md"
COMMAND = ".venv/bin/python -m pytest -m quick"


def one_run() -> tuple[float, str]:
    """(wall seconds, pytest's closing line) of one quick-tier run."""
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "quick", "-p", "no:cacheprovider", "-q"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - began
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-200:]
    if done.returncode != 0:
        raise SystemExit(f"the quick tier failed: {last}")
    return wall, re.sub(r"\s+in [\d.]+s.*$", "", last.strip("= "))


def load_average() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs to take the median of")
    args = parser.parse_args()
    rows = []
    for i in range(args.runs):
        before = load_average()
        wall, closing = one_run()
        rows.append((i + 1, wall, closing, before))
        print(f"run {i + 1}: {wall:.1f} s ({closing}; load before {before})", flush=True)
    median = statistics.median(r[1] for r in rows)
    lines = [
        "# Test tiers: the quick tier's time",
        "",
        f"Command: `{COMMAND}` (each run; `.venv/bin/python bench/test_tiers.py "
        f"--runs {args.runs}` times them)  ",
        f"Machine: {platform.node() and 'vm'}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, shared with other jobs  ",
        f"Date: {date.today().isoformat()}",
        "",
        "| run | wall | pytest says | load average before (1 / 5 / 15 min) |",
        "|---:|---:|---|---|",
        *(f"| {n} | {w:.1f} s | {c} | {load} |" for n, w, c, load in rows),
        "",
        f"Median: **{median:.1f} s** against the target of 60 s on 2 cores. The full suite (the "
        "README's test command) is timed by `.ci/run` on a fresh clone; the README states it.",
        "",
    ]
    OUT.write_text("\n".join(lines))
    print(f"median {median:.1f} s -> {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
