"""`locust-llm virtual --find-capacity` in-process on virtual time: the search lands on the
simulator's slot limit, every stage it ran is an ordinary stage of run.json (warm-up marked),
the report reads the run dir unchanged, and bad flags are one-line errors."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from locust_llm.capacity.measure import StageRule
from locust_llm.cli import main

SLOTS = 8  # --max-num-seqs: a ninth user waits a whole answer for a slot


@pytest.fixture(scope="module")
def closed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("cap") / "run"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main([
            "virtual", "--find-capacity", "--slo", "ttft_p90=500ms,errors=1%",
            "--max-num-seqs", str(SLOTS), "--max-tokens", "64", "--out", str(out),
        ])  # fmt: skip
    assert code == 0
    return out, buf.getvalue()


def test_the_search_lands_at_the_slot_limit(closed_run: tuple[Path, str]) -> None:
    out, console = closed_run
    info = json.loads((out / "run.json").read_text())
    cap = info["extra"]["capacity"]
    assert (cap["capacity"], cap["above"], cap["unit"]) == (SLOTS, SLOTS + 1, "users")
    assert cap["done"] and cap["limited_by"] == ["P90 TTFT"]
    # the answer, stated once, with the binding SLO and its interval
    assert console.count("capacity 8 users (SLOs break between 8 and 9 users) at P90 TTFT") == 1
    # every stage the search ran is an ordinary stage, in order, the confirmation included
    names = [s["name"] for s in info["stages"]]
    assert len(names) == len(cap["steps"]) == cap["stages"]
    assert [s["load"] for s in cap["steps"]] == [s["concurrency"] for s in info["stages"]]
    assert names[-1] == "c=8 #2" and cap["steps"][-1]["phase"] == "confirm"
    assert any(s["warmup_s"] > 0 for s in info["stages"])
    sent = sum(s["requests"] for s in cap["steps"])
    assert sent == cap["requests"] and "search: " in console
    # the loads far below the slots end as soon as they are clearly below the limit; the
    # answer's confirmation is never screened: its intervals decide (or its caps)
    ended = {(s["phase"], s["ended_by"]) for s in cap["steps"]}
    assert ("grow", "screened") in ended
    assert cap["steps"][-1]["ended_by"] != "screened"
    assert cap["settings"]["screen"] == 0.8


def test_the_report_reads_the_search_run_unchanged(closed_run: tuple[Path, str]) -> None:
    out, _ = closed_run
    assert main(["report", str(out), "--slo", "ttft_p90=500ms,errors=1%"]) in (0, 3)
    assert (out / "report.md").exists() and (out / "summary.json").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--find-capacity"], "--find-capacity needs stage objectives in --slo"),
        (["--find-capacity", "--slo", "ttft=1"], "needs stage objectives"),
        (["--find-capacity", "--slo", "ttft_p99=1s", "--concurrency", "4"], "plans its own"),
        (["--find-capacity", "--slo", "ttft_p99=1s", "--capacity-start", "1.5"], "whole"),
        (["--find-capacity", "--slo", "ttft_p99=1s", "--capacity-factor", "1"], "above 1"),
    ],
)
def test_bad_capacity_flags_are_one_line_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["virtual", *argv, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.strip().count("\n") == 0


DOC = Path(__file__).resolve().parents[1] / "docs" / "capacity.md"


def _doc_commands() -> list[str]:
    blocks = re.findall(r"```\n(.*?)```", DOC.read_text(), flags=re.S)
    return [ln.strip() for b in blocks for ln in b.splitlines() if ln.startswith("locust-llm ")]


def test_the_docs_command_runs_exactly_as_written(tmp_path: Path) -> None:
    commands = _doc_commands()
    assert len(commands) == 1 and "--find-capacity" in commands[0]
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    done = subprocess.run(
        commands[0], shell=True, cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # the answer the doc's example promises: the 8 slots
    assert "capacity 8 users (SLOs break between 8 and 9 users)" in done.stdout
    assert (tmp_path / "capacity-demo" / "run.json").is_file()


def test_an_open_loop_search_lets_the_server_idle_after_a_failing_stage(tmp_path: Path) -> None:
    out = tmp_path / "rate"
    code = main([
        "virtual", "--find-capacity", "rate", "--slo", "ttft_p90=500ms",
        "--max-num-seqs", str(SLOTS), "--max-tokens", "64", "--out", str(out),
    ])  # fmt: skip
    assert code == 0
    info = json.loads((out / "run.json").read_text())
    cap, stages = info["extra"]["capacity"], info["stages"]
    assert cap["unit"] == "requests/s" and cap["done"]
    assert cap["above"] / cap["capacity"] <= 1.10 + 1e-9
    assert [s["rate"] for s in stages] == [s["load"] for s in cap["steps"]]
    failed = [i for i, s in enumerate(cap["steps"][:-1]) if not s["passes"]]
    assert failed
    for i in failed:  # nothing new is sent until the failed stage's queue is served
        assert stages[i + 1]["start_wall_s"] > stages[i]["end_wall_s"]
    passed = [i for i, s in enumerate(cap["steps"][:-1]) if s["passes"]]
    for i in passed:  # a stage that held hands over at once
        assert stages[i + 1]["start_wall_s"] == stages[i]["end_wall_s"]


def test_a_p99_search_fails_loads_early_and_proves_its_answer_by_the_interval(
    tmp_path: Path,
) -> None:
    out = tmp_path / "p99"
    # output lengths drawn per request: with one length for all, the users run in lockstep on
    # the deterministic engine and their TTFTs stay so correlated that 2000 requests are worth
    # fewer than the P99 needs (the answer is then judged by its point estimate, and says so)
    code = main([
        "virtual", "--find-capacity", "--slo", "ttft_p99=500ms,errors=1%",
        "--max-num-seqs", str(SLOTS), "--max-tokens", "uniform:48,80", "--out", str(out),
    ])  # fmt: skip
    assert code == 0
    cap = json.loads((out / "run.json").read_text())["extra"]["capacity"]
    assert (cap["capacity"], cap["above"]) == (SLOTS, SLOTS + 1)
    # the loads past the slots fail on evidence (the P99 interval's bottom above the limit)
    # long before a P99 could be shown met (its top needs hundreds of settled requests: at
    # the upper tail of one of the stage's looks, no sample above the limit in `fewest`)
    _, upper = StageRule().look_tails(0.99)
    fewest = math.ceil(math.log(upper) / math.log(0.99))
    assert 450 <= fewest <= 600  # 368 for a single look at 95%
    over = [s for s in cap["steps"] if s["load"] > SLOTS]
    assert over and all(not s["passes"] and s["state"] == "broken" for s in over)
    assert all(s["ended_by"] == "decided" and s["requests"] < 150 for s in over)
    # the answer's confirmation runs until the P99's upper bound is within the limit
    last = cap["steps"][-1]
    assert (last["phase"], last["load"], last["state"]) == ("confirm", SLOTS, "met")
    assert last["requests"] >= fewest and last["ended_by"] == "decided"
    assert cap["binding"]["hi"] <= 0.5 and not cap["uncertain"]
