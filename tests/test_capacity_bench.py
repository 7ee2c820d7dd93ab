"""bench/capacity.py's split of a client's CPU into per request and per token: the arithmetic,
and the command run end to end at a tiny load (our client, under Locust and its core alone;
the peers are not installed in the suite)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from bench.capacity import split_costs

ROOT = Path(__file__).resolve().parents[1]


def test_the_split_recovers_known_per_request_and_per_token_costs() -> None:
    # u(L) = 12 + 400 / L: 37 us per token at 16 tokens, 14 at 200
    rows: list[dict[str, object]] = [
        {"client": "a", "output_tokens": 16, "cpu_us_per_token": 12 + 400 / 16},
        {"client": "a", "output_tokens": 200, "cpu_us_per_token": 12 + 400 / 200},
        {"client": "b", "output_tokens": 16, "cpu_us_per_token": 30 + 100 / 16},
        {"client": "b", "output_tokens": 200, "cpu_us_per_token": math.nan},
    ]
    a, b = split_costs(rows, (16, 200))
    assert a.startswith("a: 400 us per request, 12.00 us per token")
    assert b.startswith("b: nan us per request")  # a point that failed says so


def test_the_split_command_runs_and_prints_both_costs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "bench/capacity.py", "--clients", "ours,ours-core", "--streams", "2",
         "--rounds", "1", "--split-lengths", "4,12", "--work", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for client in ("ours", "ours-core"):  # under Locust, and its core alone (no Locust)
        (line,) = [x for x in done.stdout.splitlines() if x.startswith(f"{client}: ")]
        assert "us per request" in line and "us per token" in line and "nan" not in line


def test_the_lean_source_streams_what_the_clients_read_and_its_trace_matches(
    tmp_path: Path,
) -> None:
    """``--source lean`` (bench/peers/tokensource.py): our client under Locust reads every
    answer whole, each record pairs with a line of the source's trace (same prompt and output
    tokens, from the usage it sent), and the source kept its interval."""
    done = subprocess.run(
        [sys.executable, "bench/capacity.py", "--clients", "ours", "--streams", "4",
         "--rounds", "3", "--source", "lean", "--interval-ms", "10", "--work", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    row = json.loads(next(x for x in done.stdout.splitlines() if x.startswith("{")))
    assert row["source"] == "lean" and row["failed"] == 0
    assert row["records"] == row["matched"] == 12, row
    assert abs(row["sim_tpot_p50_ms"] - 10.0) < 1.0, row  # the source's own token interval
