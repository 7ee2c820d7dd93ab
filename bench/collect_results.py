"""Assemble bench/RESULTS.md from the per-topic result files in bench/results/.

Each benchmark writes its own figures (command, machine, date, medians) to
``bench/results/<topic>.md``; this script puts them, in a fixed order, under one index so the
numbers live in one place: ``python bench/collect_results.py``.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = [
    "sim.md", "client_choice.md", "capacity.md", "fidelity.md", "histogram.md",
    "gpu_exporter.md", "telemetry.md", "report.md", "cluster.md",
]  # fmt: skip

HEADER = """# Benchmark results

Every figure below was measured by a script in `bench/`, with the command, machine and date
beside it. The machines are small and shared (2 cores, other jobs running), so the tables
report medians and ratios measured within one run; rerun a script to compare on your machine.
This file is assembled from `bench/results/*.md` by `python bench/collect_results.py`.

"""


def main() -> None:
    files = [HERE / "results" / name for name in ORDER if (HERE / "results" / name).exists()]
    extra = sorted(p for p in (HERE / "results").glob("*.md") if p.name not in ORDER)
    parts = [HEADER, "Contents: " + ", ".join(f"[{p.stem}](results/{p.name})" for p in
                                               [*files, *extra]) + "\n"]  # fmt: skip
    for path in [*files, *extra]:
        text = path.read_text().strip()
        # demote the file's own headings one level under this index
        lines = [("#" + line) if line.startswith("#") else line for line in text.splitlines()]
        parts.append("\n".join(lines) + "\n")
    (HERE / "RESULTS.md").write_text("\n".join(parts))


if __name__ == "__main__":
    main()
