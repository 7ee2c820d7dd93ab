"""What the server served in a stage's window (``served_ttft_avg_s``, ``served_decode_avg_s``)
against the simulator's ground truth: behind a queue that grows, the requests sent in a stage get
their first tokens stages later, so their TTFT (the stage's own mean) says how long the queue
grew; the first tokens and finishes that fell in the window say what the steps then worked on,
and that is what the truth's "decoding outlasts TTFT" reads."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent

from locust_llm.report.tables import SERVED_MIN, served_phases, served_tpot  # noqa: E402

#: docs/report.md's case: 16 prompts/s of 4,096 tokens into a server whose prompts' compute
#: fills the steps (mixtral-8x7b on an H200), the queue growing through the stage.
CASE = ".venv/bin/python bench/verdict_case.py --seed 8101 --case 10 --stages 1"


def test_served_means_take_first_tokens_and_finishes_inside_the_window() -> None:
    # six requests: first token at 1.5, 2.5, .. 6.5 s, each decoding 2 s; the window [2, 6)
    first = np.arange(6) + 1.5
    end = first + 2.0
    ttft = np.arange(6) + 10.0  # 10, 11, .. 15 s
    assert SERVED_MIN == 5
    # first tokens at 2.5-5.5 in it: four, under SERVED_MIN
    assert all(math.isnan(v) for v in served_phases(first, end, ttft, 2.0, 6.0))
    # the window [1, 6): five first tokens (1.5-5.5 s, TTFT 10-14); the finishes in it (2.5,
    # 5.5 and 4.5 s) give the decode time, whatever their count
    decode = np.r_[1.0, 3.0, 1.0, 4.0, 4.0, 4.0]
    end = first + decode  # 2.5, 5.5, 4.5, 8.5, 9.5, 10.5
    assert served_phases(first, end, ttft, 1.0, 6.0) == pytest.approx((12.0, 5.0 / 3))
    # none finished in the window: the decode of those whose first token fell in it
    late = first + 10.0
    assert served_phases(first, late, ttft, 1.0, 6.0) == pytest.approx((12.0, 10.0))


def test_the_served_tpot_is_of_the_requests_that_finished_in_the_window() -> None:
    end = np.r_[1.0, 2.0, 3.0, 4.0, 5.0, 6.5, 7.0]
    tpot = np.r_[0.01, 0.02, 0.03, 0.04, np.nan, 0.06, 0.5]  # one answer of one token: NaN
    assert math.isnan(served_tpot(end, tpot, 1.0, 6.0))  # four with a TPOT: under SERVED_MIN
    assert served_tpot(end, tpot, 1.0, 7.0) == pytest.approx(0.032)  # 1.0 .. 6.5 s
    assert math.isnan(served_tpot(end, tpot, 8.0, 9.0))


def test_the_documented_case_reads_the_window_as_the_trace_does() -> None:
    """docs/report.md's command, as written: the served means equal the trace's (virtual time:
    the client's TTFT is the engine's), where the stage's own TTFT is 2.8 times theirs, and the
    verdict names the trace's label (it named ``compute_bound_prefill`` from the stage's own
    TTFT, 15.2 s against 9.3 s of decoding, 2026-12-03)."""
    assert f"`{CASE}`" in (ROOT / "docs" / "report.md").read_text()
    out = subprocess.run(
        [sys.executable, *CASE.split()[1:]], cwd=ROOT, capture_output=True, text=True,
        timeout=120, check=True,
    ).stdout  # fmt: skip
    row = json.loads(out.split("  row: ", 1)[1].split("\n", 1)[0])  # NaN: JSON's extension
    truth = json.loads(out.split("  truth: ", 1)[1].split(" blocked by:", 1)[0])
    trace_ttft = truth["ttft_queue_s"] + truth["ttft_prefill_s"]
    assert row["served_ttft_avg_s"] == pytest.approx(trace_ttft, rel=0.01)
    assert row["served_decode_avg_s"] == pytest.approx(truth["decode_s"], rel=0.01)
    assert row["ttft_avg_s"] > 2 * row["served_ttft_avg_s"]
    assert row["ttft_avg_s"] > row["decode_avg_s"] > row["served_ttft_avg_s"]
    assert "truth prefill_interference; verdict prefill_interference" in out, out
