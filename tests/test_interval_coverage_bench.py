"""bench/interval_coverage.py as its results page shows it run (a few trials): both tables, every
sequence and quantile, and the independent samples' figures from the exact binomial walk."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from locust_llm.capacity.sequential import crossings, look_sizes

ROOT = Path(__file__).resolve().parents[1]


def test_the_coverage_bench_runs_and_counts_every_trial(tmp_path: Path) -> None:
    # bench/interval_coverage.py at a few trials: both tables, every sequence and quantile,
    # and the exact walk's figures for independent samples as sequential.crossings gives them
    out = tmp_path / "coverage.md"
    subprocess.run(
        [sys.executable, "bench/interval_coverage.py", "--trials", "4", "--out", str(out)],
        cwd=ROOT, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    text = out.read_text()
    one_look = [line for line in text.splitlines() if line.startswith("| ") and "| 200 |" in line]
    assert len(one_look) == 5 * 2 * 4  # sequences x quantiles x intervals
    sizes = look_sizes(20, 2000)
    met, broken = crossings(0.9, (0.025, 0.025), sizes)
    assert f"| independent | P90 | 95% | {met:.3f} | {broken:.3f} | exact (binomial walk) |" in text
