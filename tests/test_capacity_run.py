"""`locust-llm run --find-capacity` through a Locust master and one worker against the simulator
(127.0.0.1, 4 batch slots): the master plans each stage from the records it receives, the
search lands on the slot limit for a TTFT objective that a fifth user's queueing breaks,
every stage is an ordinary stage of run.json, and the answer is stated once in the console,
the report and summary.json with the verdict's limiting resource."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from locust_llm.launch.sweep import simulator

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "locust_llm.cli"]
SLOTS = 4


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    base = tmp_path_factory.mktemp("capacity-run")
    out = base / "run"
    # every step 10 ms whatever it holds: an answer of 48 tokens takes S ~0.5 s
    sim_args = ["--max-num-seqs", str(SLOTS), "--zero-cost", "--step-overhead-ms", "10"]
    with simulator(sim_args, base / "sim.log") as url:
        proc = subprocess.run(
            [
                *CLI, "run", "--host", url, "--find-capacity",
                "--slo", "ttft_p90=60ms,errors=1%", "--max-tokens", "48", "--input-len", "128",
                "--workers", "1", "--stage-max-duration", "20s", "--capacity-start", "2",
                "--capacity-max", "16",
                "--out", str(out), "--timeout", "240",
            ],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc.stdout


def test_the_search_lands_at_the_servers_slot_limit(searched: tuple[Path, str]) -> None:
    out, console = searched
    info = json.loads((out / "run.json").read_text())
    cap = info["extra"]["capacity"]
    # one slot-holding user each up to 4 (TTFT 10-20 ms: the step under way, then its own).
    # From 5 on one request waits at all times (Little: the mean wait is S/4 for an answer's
    # time S ~0.5 s, ~120 ms) and none waits longer than S (a running answer ends by then), so
    # even if the waits were all-or-nothing P90 wait >= (S/4 - S/10) / 0.9 ~80 ms and P90 TTFT
    # breaks 60 ms whatever the users' phases (a shorter answer once let staggered users pass)
    assert (cap["capacity"], cap["above"], cap["done"]) == (SLOTS, SLOTS + 1, True)
    assert info["state"] == "finished"
    stages = info["stages"]
    assert [s["concurrency"] for s in stages] == [s["load"] for s in cap["steps"]]
    assert stages[0]["concurrency"] == 2 and max(s["concurrency"] for s in stages) <= 16
    assert stages[-1]["name"] == f"c={SLOTS} #2" and cap["steps"][-1]["phase"] == "confirm"
    assert all(s["warmup_s"] > 0 for s in stages)  # each stage's warm-up marked for the report
    # the answer, once, with the binding SLO and its interval and the verdict's resource
    line = f"Capacity: capacity {SLOTS} users (SLOs break between {SLOTS} and {SLOTS + 1} users)"
    assert console.count(line) == 1 and console.count("capacity 4 users") == 1
    assert "at P90 TTFT" in console and "limited by batch slots (see verdict)" in console
    summary = json.loads((out / "summary.json").read_text())
    assert summary["capacity"]["capacity"] == SLOTS
    assert summary["capacity"]["cause"] == "batch slots"
    assert summary["capacity"]["sentence"] in (out / "report.md").read_text()
