"""bench/hub_share.py: the command counts every read of our client's core on the simulator,
and a steady stream's token reads are recorded in the hub (docs/timing.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_command_counts_the_reads_and_the_hub_records_the_steady_tokens() -> None:
    done = subprocess.run(
        [sys.executable, "bench/hub_share.py", "--streams", "8", "--rounds", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    header, _rule, row = done.stdout.splitlines()[-3:]
    assert header.startswith("| streams | reads |"), done.stdout
    streams, reads, hub, share = (cell.strip() for cell in row.strip("|").split("|"))
    assert streams == "8"
    reads_n, hub_n = int(reads.replace(",", "")), int(hub.replace(",", ""))
    # 8 answers of 200 tokens: at least one read each token or merged ones, a few per answer
    # (the first bytes, the end) left to the greenlet
    assert reads_n >= 8 * 50 and hub_n >= 0.9 * reads_n, done.stdout
    assert share.endswith("%")
