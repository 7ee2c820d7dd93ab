"""The server's words, end to end: a real run against the simulator that refuses prompts past its
--max-model-len (HTTP 400, vLLM's message with the lengths in it) and fails a share of requests
with an injected 500; then `locust-llm report` as a user runs it. The console, report.md,
report.html and summary.json carry each kind's most frequent message with its count, the
lengths that differed folded, and the verdict's actions quote it under the verdict line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from locust_llm.launch.sweep import simulator

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "locust_llm.cli"]
SIM = ["--model", "qwen2.5-0.5b", "--gpu", "h100-sxm", "--zero-cost", "--max-model-len", "100",
       "--fault", "http500:0.25", "--seed", "3"]  # fmt: skip
FOUR = "HTTP 400: This model's maximum context length is 100 tokens. However, you requested {n} "
FIVE = "HTTP 500: Internal server error (injected fault)"


def test_each_error_kind_says_its_most_frequent_message(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with simulator(SIM, tmp_path / "sim.log") as url:
        # prompts of 40-120 tokens + 16 out: those past 84 tokens are refused
        ran = subprocess.run(
            [*CLI, "run", "--host", url, "--concurrency", "2", "--stage-requests", "24",
             "--max-tokens", "16", "--input-len", "uniform:40:120", "--workers", "0",
             "--out", str(run_dir), "--quiet"],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
    assert ran.returncode == 3, ran.stdout[-3000:] + ran.stderr[-3000:]  # the error-rate alert
    records = pd.read_parquet(run_dir / "requests.parquet")
    failed = records[~records["ok"]]
    by_kind = failed.groupby("error_kind").size().to_dict()
    assert set(by_kind) == {"http_4xx", "http_5xx"}, by_kind
    # the records hold the lengths; more than one length was refused, so they must be folded
    refused = failed[failed["error_kind"] == "http_4xx"]["error_message"]
    assert refused.str.contains("maximum context length").all() and refused.nunique() > 1

    out = tmp_path / "report"
    report = subprocess.run(
        [*CLI, "report", str(run_dir), "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert report.returncode == 3, report.stderr
    console = report.stdout
    # the errors table, right under the per-stage table, before the reading
    table = console[console.index("Errors (each kind's most frequent message):") :]
    assert console.index("Per stage") < console.index("Errors (") < console.index("Verdict:")
    lines = table.splitlines()
    assert lines[1].split()[:3] == ["kind", "failed", "share"]
    rows = {line.split()[0]: line for line in lines[3:5]}
    assert set(rows) == {"http_4xx", "http_5xx"}
    n4, n5 = by_kind["http_4xx"], by_kind["http_5xx"]
    assert rows["http_4xx"].split()[1:4] == [str(n4), f"{n4 / len(records):.1%}", str(n4)]
    assert FOUR in rows["http_4xx"] and "16 in the completion" in rows["http_4xx"]
    assert rows["http_5xx"].split()[1] == str(n5) and rows["http_5xx"].endswith(FIVE)
    # the verdict's actions, under its evidence: the message instead of the guess
    verdict = console[console.index("Verdict: errors") :]
    actions = verdict[verdict.index("  Actions:\n") :].split("\n\n")[0].splitlines()[1:]
    assert any(a.startswith(f'    - http_4xx: "{FOUR}') and f"({n4} of {n4})" in a for a in actions)
    assert any(a.startswith(f'    - http_5xx: "{FIVE}" ({n5} of {n5})') for a in actions)
    assert "prompt too long?" not in console

    md = (out / "report.md").read_text()
    assert "## Errors and their messages" in md
    assert f"| http_4xx | {n4} | {n4 / len(records):.1%} | {n4} | {FOUR}" in md
    assert f"| http_5xx | {n5} |" in md and FIVE in md
    assert (
        "{n} tokens ({n} in the messages, 16 in the completion)"
        in (out / "report.html").read_text()
    )
    summary = json.loads((out / "summary.json").read_text())
    errors = {k["kind"]: k for k in summary["errors"]}
    assert errors["http_4xx"]["count"] == errors["http_4xx"]["message_count"] == n4
    assert errors["http_4xx"]["messages"] == 1 and errors["http_4xx"]["message"].startswith(FOUR)
    assert errors["http_5xx"]["message"] == FIVE and errors["http_5xx"]["share"] == pytest.approx(
        n5 / len(records)
    )
    assert [k["kind"] for k in summary["stage_errors"][0]] == [k["kind"] for k in summary["errors"]]
    assert any(FIVE in a for a in summary["verdict"]["actions"])
