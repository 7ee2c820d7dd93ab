"""The progress line of a real `locust-llm run` (master + one worker against the simulator on
127.0.0.1): two 3 s open-loop stages, the first at a rate two users cannot keep. The stage's
own QPS, tokens/s and TTFT P50 are known during the stage (from the records the master gets
each second, not Locust's 3 s reports), so is how far behind its schedule the pool sends, and
the arrivals the user pool could not send are on its line; all are checked against the run dir
and against the simulator's own trace."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from locust_llm.launch.sweep import simulator
from locust_llm.live.stage_tally import TICKS_PER_S, WINDOW_S
from locust_llm.report.diagnosis.thresholds import DEFAULT_THRESHOLDS

pytestmark = pytest.mark.slow

BEHIND_S = DEFAULT_THRESHOLDS.behind_schedule_s

CLI = [sys.executable, "-m", "locust_llm.cli"]
#: a stage's closing line; its seconds are counted from when a poll (once a second) first saw
#: the stage, so a busy host can show a 3 s stage as 2/3 s
_DONE = re.compile(
    r"^  stage (\d)/2 rate (\d+)/s: (\d+) requests, [23]/3 s, QPS ([\d.]+), ([\d,]+) tokens/s, "
    r"TTFT P50 ([\d,]+) ms(?:, sent ([\d.]+) s behind schedule)?"
    r"(?:, (\d+) of (\d+) arrivals unsent \(([a-z ,\d]+)\))? \(stage done\)$",
    re.M,
)


def _web_url(log: Path, deadline: float) -> str:
    """The master's web UI, as Locust's log says once it listens."""
    while time.monotonic() < deadline:
        text = log.read_text() if log.is_file() else ""
        m = re.search(r"web interface at (http://127\.0\.0\.1:\d+)", text)
        if m:
            return m.group(1)
        time.sleep(0.2)
    raise AssertionError(f"no web UI address in {log}")


def _poll(url: str, proc: subprocess.Popen[str], deadline: float) -> list[dict]:
    """``/llm/stats`` every 0.3 s until the run ends (each payload with the time it was read)."""
    seen = []
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/llm/stats", timeout=2) as resp:
                seen.append(json.loads(resp.read()))
        except OSError:  # not up yet, or gone at the end
            pass
        time.sleep(0.3)
    return seen


def test_a_run_shows_each_stage_s_own_figures_and_its_unsent_arrivals(tmp_path: Path) -> None:
    run_dir, trace = tmp_path / "run", tmp_path / "trace.jsonl"
    sim = ["--model", "qwen2.5-0.5b", "--gpu", "h100-sxm", "--trace", str(trace)]
    with simulator(sim, tmp_path / "sim.log") as url:
        proc = subprocess.Popen(
            [*CLI, "run", "--host", url, "--rate", "40,4", "--stage-duration", "3",
             "--max-tokens", "32", "--ignore-eos", "--workers", "1", "--out", str(run_dir),
             "--llm-max-users", "2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 150
            payloads = _poll(_web_url(run_dir / "locust.log", deadline), proc, deadline)
            out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 5))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode in (0, 3), out[-3000:] + err[-3000:]
    info = json.loads((run_dir / "run.json").read_text())
    stages = info["stages"]
    done = {int(m[0]) - 1: m for m in _DONE.findall(out)}
    assert sorted(done) == [0, 1], out

    # the first stage's figures (3 s, shorter than Locust's report interval) are known before
    # its line settles (1.5 s after its end, when all its records are in): during the stage,
    # or, on a host busy enough that its first records reach the master after the 3 s, in the
    # moment before it settles (a fresh-clone CI run polled none inside the 3 s)
    during = [p["stages_begun"][0] for p in payloads if p["stages_begun"]]
    assert any(
        s["qps"] and s["ttft_p50_s"] and s["dispatch_delay_s"] >= BEHIND_S and not s["settled"]
        for s in during
    ), (
        out,
        [(p.get("stage"), p["stages_begun"]) for p in payloads],
    )
    final = payloads[-1]["stages_begun"]
    assert [s["settled"] for s in final] == [True, True]  # the run ended: all records in

    # the stage's own figures against a recomputation from its records in the run dir
    table = pq.read_table(run_dir / "requests.parquet").to_pandas()
    for index, stage in enumerate(stages):
        _, _rate, _count, qps, tps, ttft_ms, behind, *_ = done[index]
        mine = table[(table.stage == index) & table.ok]
        ends = (mine.start_wall_s + mine.e2e_s).to_numpy()
        lo = math.floor(max(stage["start_wall_s"], stage["end_wall_s"] - WINDOW_S) * TICKS_PER_S)
        hi = math.floor(stage["end_wall_s"] * TICKS_PER_S)
        inside = (np.floor(ends * TICKS_PER_S) >= lo) & (np.floor(ends * TICKS_PER_S) < hi)
        window_s = (hi - lo) / TICKS_PER_S
        assert float(qps) == pytest.approx(inside.sum() / window_s, abs=0.051), (index, out)
        want_tps = mine.output_tokens.to_numpy()[inside].sum() / window_s
        assert float(tps.replace(",", "")) == pytest.approx(want_tps, abs=0.51)
        want_ttft_ms = float(np.median(mine.ttft_s)) * 1e3
        assert float(ttft_ms.replace(",", "")) == pytest.approx(want_ttft_ms, rel=0.01, abs=1.0)
        assert final[index]["completed"] == len(mine)
        late_s = (mine.start_wall_s - mine.scheduled_wall_s).to_numpy()[inside].mean()
        if late_s >= BEHIND_S:  # the first stage's pool ran dry: it fell behind its schedule
            assert float(behind) == pytest.approx(late_s, abs=0.051)
        else:
            assert behind == "" and index == 1

    # the simulator's own view: what it finished inside the window, and how fast it answered
    lines = [json.loads(x) for x in trace.read_text().splitlines() if x.strip()]
    by_id = {x["client_request_id"]: x for x in lines}
    for index, stage in enumerate(stages):
        ids = table[table.stage == index].request_id
        served = [by_id[i] for i in ids if i in by_id]
        start, end = stage["start_wall_s"], stage["end_wall_s"]
        window_s = end - max(start, end - WINDOW_S)
        ok = [x for x in served if x["outcome"] == "ok"]
        finished = sum(1 for x in ok if x["last_token"] < end)
        # our end = the last chunk read (at most the [DONE] line later than the server sent
        # it; on a busy host the client reads late): a request the server finished within
        # 0.1 s of the window's edge may fall on either side of it
        edge = sum(1 for x in ok if abs(x["last_token"] - end) < 0.1)
        assert float(done[index][3]) == pytest.approx(
            finished / window_s, abs=(edge + 1.0) / window_s
        )
        server_ttft_ms = 1e3 * float(
            np.median([x["first_token"] - x["arrival"] for x in served if x["outcome"] == "ok"])
        )
        line_ttft_ms = float(done[index][5].replace(",", ""))
        assert server_ttft_ms <= line_ttft_ms + 1.0 <= server_ttft_ms + 30.0

    # the first stage's pool ran dry: every arrival drawn was sent (the server saw it) or is
    # on its line as unsent, with its reason, as run.json counts them
    first = stages[0]
    unsent = sum(first["arrivals_unsent"].values())
    assert first["arrivals_unsent"]["pool_ran_dry"] > 0
    _, _, _, _, _, _, behind, n_unsent, n_drawn, why = done[0]
    assert float(behind) >= BEHIND_S
    assert (int(n_unsent), int(n_drawn)) == (unsent, first["arrivals_drawn"]), out
    assert "pool ran dry" in why
    sent_ids = set(table[table.stage == 0].request_id)
    assert len(sent_ids & set(by_id)) == first["arrivals_drawn"] - unsent
    assert final[0]["unsent"] == first["arrivals_unsent"]


ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "report.md"


def _shape(line: str) -> str:
    """A progress line with its numbers blanked (they differ from run to run)."""
    return re.sub(r"\d[\d,.]*", "#", line)


def test_the_docs_progress_example_runs_as_written() -> None:
    """docs/report.md's open-loop example: the command exactly as written (from the repository
    root, as the doc's .venv path says); each line the doc shows, numbers aside, is printed,
    and the first stage's pool ran dry."""
    doc = DOC.read_text()
    after = doc.split("`tests/test_progress_run.py` runs this command):", 1)[1]
    command, _, shown = after.split("```\n")[1:4]
    command = command.strip()
    assert command.startswith("LOCUST_LLM_MAX_USERS=2 .venv/bin/locust-llm demo --rate 40,1 ")
    done = subprocess.run(
        command, shell=True, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    printed = done.stdout.splitlines()
    at = -1
    for line in shown.splitlines():
        # the part every run has: the count, the time, QPS, tokens/s and TTFT P50 ...
        head = _shape(line.split(" ms, ", 1)[0])
        # ... printed in the doc's order: a stage's "(stage done)" line before the next start
        found = [i for i, p in enumerate(printed) if i > at and _shape(p).startswith(head)]
        assert found, (line, done.stdout)
        at = found[0]
    first = next(p for p in printed if p.startswith("  stage 1/2 rate 40/s: "))
    assert re.search(
        r", sent [\d.]+ s behind schedule, \d+ of \d+ arrivals unsent \(pool ran dry\) "
        r"\(stage done\)$",
        first,
    )
