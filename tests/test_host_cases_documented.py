"""docs/report.md's two cases of the host's time against the memory term, run as written: the
row's shares stand as the trace's do, and the verdict names the trace's label (a 70B over 8
GPUs whose host time outlasts its memory term; Mixtral at light load whose memory term is four
times the host's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CASES = {
    # the command as docs/report.md shows it: the trace's label
    ".venv/bin/python bench/verdict_case.py --seed 8101 --case 35 --stages 1": "host_overhead",
    ".venv/bin/python bench/verdict_case.py --seed 9201 --case 54 --stages 0": (
        "bandwidth_bound_decode"
    ),
}


@pytest.mark.parametrize("command", sorted(CASES))
def test_the_documented_case_reads_the_terms_as_the_trace_does(command: str) -> None:
    assert f"`{command}`" in (ROOT / "docs" / "report.md").read_text()
    out = subprocess.run(
        [sys.executable, *command.split()[1:]], cwd=ROOT, capture_output=True, text=True,
        timeout=120, check=True,
    ).stdout  # fmt: skip
    label = CASES[command]
    assert f"truth {label}; verdict {label} " in out, out
    row = json.loads(out.split("  row: ", 1)[1].split("\n", 1)[0])
    truth = json.loads(out.split("  truth: ", 1)[1].split(" blocked by:", 1)[0])
    host_longer = truth["overhead_share"] > truth["memory_set_share"]
    assert host_longer == (label == "host_overhead")
    assert (row["host_time_share"] > row["memory_time_share"]) == host_longer, row
