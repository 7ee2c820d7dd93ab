"""The capacity search started from Locust's web UI (the sweep locustfile's stage shape with
``--llm-find-capacity``), in real headless Chromium against the simulator with 2 batch slots:
the LLM tab's run line follows the search (its phase, load and bracket so far) and then states
the answer once, as run.json's ``extra.capacity`` has it. The simulator and Locust run as
subprocesses (Locust must never be imported here).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from webui_support import (
    chromium,
    free_port,
    get,
    get_json,
    locust_ui,
    running_sim,
    spawn,
    wait_for,
)

pytestmark = pytest.mark.browser

#: 2 batch slots, each step 10 ms whatever it holds: an answer of 24 tokens takes S ~0.25 s. A
#: third user always waits (Little: S/2 on average, never more than S), so P90 TTFT >=
#: (S/2 - S/10) / 0.9 ~110 ms, past the SLO's 60 ms whatever the users' phases, while 2 users
#: see 10-20 ms.
SLOTS = 2
SIM_ARGS = ("--max-num-seqs", str(SLOTS), "--zero-cost", "--step-overhead-ms", "10")


def test_the_llm_tab_follows_the_search_to_its_answer(tmp_path: Path) -> None:
    web_port = free_port()
    ui = f"http://127.0.0.1:{web_port}"
    run_dir = tmp_path / "run"
    cmd = locust_ui(
        "http://placeholder", web_port, run_dir,
        "--llm-find-capacity", "users", "--llm-capacity-slo", "ttft_p90=60ms,errors=1%",
        "--llm-capacity-search", "start=1,max=8,max-duration=20s",
        "--llm-max-tokens", "24", "--llm-input-len", "128",
    )  # fmt: skip
    cmd[cmd.index("locustfiles/chat.py")] = "locustfiles/sweep.py"
    errors: list[str] = []
    with running_sim(tmp_path / "sim.log", *SIM_ARGS) as host:
        cmd[cmd.index("http://placeholder")] = host
        with spawn(cmd, tmp_path / "locust.log"):
            wait_for("Locust's web UI", lambda: get(ui + "/"), 30.0)
            with chromium(tmp_path / "profile") as page:
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.goto(ui + "/")
                page.get_by_role("button", name=re.compile("^start$", re.I)).click()
                page.get_by_role("tab", name="LLM").click()
                frame = page.frame_locator("#llm-frame")
                seen: list[str] = []

                def capacity_text() -> str:
                    shown = page.locator("#capacity")
                    if shown.count() == 0:
                        shown = frame.locator("#capacity")
                    text = shown.inner_text() if shown.count() else ""
                    if text and (not seen or seen[-1] != text):
                        seen.append(text)
                    return text

                # while it runs: the phase, the load it measures and the bracket so far
                wait_for("the search's progress", lambda: "capacity search:" in capacity_text(),
                         30.0, 0.2)  # fmt: skip
                answer = wait_for(
                    "the search's answer",
                    lambda: (t := capacity_text()) and not t.startswith("capacity search:") and t,
                    150.0, 0.5,
                )  # fmt: skip
                stats = get_json(ui + "/llm/stats")
                page.screenshot(path=str(tmp_path / "capacity-tab.png"), full_page=True)
    assert not errors, errors
    head = f"capacity {SLOTS} users (SLOs break between {SLOTS} and {SLOTS + 1} users)"
    assert answer.startswith(head) and "at P90 TTFT" in answer, answer
    assert stats["capacity"]["done"] is True and stats["capacity"]["text"] == answer
    assert any(t.startswith("capacity search: grow at ") for t in seen), seen
    # the tab says what run.json's answer says, once
    run = wait_for("run.json's answer", lambda: _answer(run_dir), 20.0)
    assert run["capacity"] == SLOTS and run["above"] == SLOTS + 1
    assert answer.startswith(run["sentence"]) and answer.count(head) == 1


def _answer(run_dir: Path) -> dict | None:
    path = run_dir / "run.json"
    if not path.is_file():
        return None
    cap = json.loads(path.read_text()).get("extra", {}).get("capacity")
    return cap if cap and cap.get("done") else None
