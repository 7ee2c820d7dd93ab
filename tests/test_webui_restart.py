"""The web UI with workers, as a Locust user drives it: Start, Stop, Start again, with the LLM
fields of the start form; in real headless Chromium against a master and two workers.

Locust's worker, told ``stop``, used to sleep the stop timeout (locust-llm's 120 s) deaf to the
master before it said ready again, and quit itself after 60 s without the master's heartbeat:
after the first Stop no worker came back and Start said none was connected. The stop timeout
here is locust-llm's default. The simulator's trace is the ground truth of what was sent: its
``tokens_sent`` is the output cap each request asked for (every answer would be 64 tokens long).
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from webui_support import (
    BIN,
    chromium,
    free_port,
    get,
    get_json,
    locust_ui,
    log_tails,
    running_sim,
    spawn,
    wait_for,
)

pytestmark = pytest.mark.browser

ENDPOINT = "/v1/chat/completions"
SIM_ARGS = ("--output-len", "fixed:64")  # longer than any cap the form asks for
CLI_MAX_TOKENS = "16"  # the master's command line: the form's field first opens with it


def _aggregated_requests(ui: str) -> int:
    rows = get_json(ui + "/llm/stats")["endpoints"]
    return next((r["requests"] for r in rows if r["name"] == "Aggregated"), 0)


def _run_dir(ui: str) -> Path:
    return Path(get_json(ui + "/llm/stats")["report"]["run_dir"])


def _workers(ui: str) -> int:
    return int(get_json(ui + "/llm/stats")["worker_count"] or 0)


def _state_of(ui: str, page: Any, logs: Path) -> str:
    """What the master, the page and the logs say, for a wait that timed out."""
    try:
        master_state = get_json(ui + "/stats/requests")["state"]
    except Exception as exc:  # the master itself may be what hangs
        master_state = repr(exc)
    names = ("master.log", "worker1.log", "worker2.log", "sim.log")
    return (
        f"Locust's state: {master_state}; the page's header: {page.inner_text('header')!r}\n"
        + log_tails(*(logs / n for n in names))
    )


def _start_from_the_form(page: Any, shown: str, max_tokens: str | None) -> None:
    """Open the form's "Custom parameters", check that the LLM max-tokens field shows ``shown``,
    fill it (None: leave it) and press Start."""
    page.get_by_text("Custom parameters").click()
    field = page.locator('input[name="llmMaxTokens"]')  # the UI camel-cases the option's name
    assert field.input_value() == shown
    if max_tokens is not None:
        field.fill(max_tokens)
    page.get_by_role("button", name=re.compile("^start$", re.I)).click()


def test_stop_then_start_again_with_workers_and_the_forms_llm_fields(tmp_path: Path) -> None:
    web_port, master_port = free_port(), free_port()
    ui = f"http://127.0.0.1:{web_port}"
    trace = tmp_path / "trace.jsonl"
    master = locust_ui(
        "http://placeholder", web_port, tmp_path / "run", "--master", "--master-bind-port",
        str(master_port), "-u", "4", "-r", "4", "--llm-max-tokens", CLI_MAX_TOKENS,
    )  # fmt: skip
    worker = [str(BIN / "locust"), "-f", "locustfiles/chat.py", "--worker", "--master-host",
              "127.0.0.1", "--master-port", str(master_port)]  # fmt: skip
    errors: list[str] = []
    began = time.monotonic()
    with running_sim(tmp_path / "sim.log", *SIM_ARGS, "--trace", str(trace)) as host:
        master[master.index("http://placeholder")] = host
        with (
            spawn(master, tmp_path / "master.log"),
            spawn(worker, tmp_path / "worker1.log"),
            spawn(worker, tmp_path / "worker2.log"),
            chromium(tmp_path / "profile") as page,
        ):
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            wait_for("two workers", lambda: get_json(ui + "/llm/stats")["worker_count"] == 2, 60.0)
            page.goto(ui + "/")
            runs: list[tuple[str, Path, float]] = []
            shown = CLI_MAX_TOKENS
            # the field changed, changed again, then left as it opens (with the last test's value)
            for i, typed in enumerate(("8", "12", None)):
                if i:  # after a Stop, Locust's "New" opens the start form again
                    wait_for("both workers ready after the Stop", lambda: _workers(ui) == 2, 10.0)
                    page.get_by_role("button", name=re.compile("^new$", re.I)).click()
                clicked = time.monotonic()
                _start_from_the_form(page, shown, typed)
                shown = typed or shown
                # the new test's own requests: a read before the master took the Start still
                # shows the last test's counts (its run dir tells them apart)
                before = {d for _, d, _ in runs}
                wait_for(f"run {i + 1}'s requests",
                         lambda b=before: _run_dir(ui) not in b and _aggregated_requests(ui) >= 8,
                         30.0, explain=lambda: _state_of(ui, page, tmp_path))  # fmt: skip
                to_records_s = time.monotonic() - clicked
                assert get_json(ui + "/llm/stats")["worker_count"] == 2
                run_dir = _run_dir(ui)
                page.get_by_role("button", name=re.compile("^stop$", re.I)).click()
                wait_for("the UI to show STOPPED", lambda: "STOPPED" in page.inner_text("header"),
                         60.0, explain=lambda: _state_of(ui, page, tmp_path))  # fmt: skip
                wait_for("the run dir", lambda d=run_dir: (d / "requests.parquet").is_file(), 20.0)
                runs.append((shown, run_dir, to_records_s))
            # the workers are still there, ready for the next Start
            assert get_json(ui + "/llm/stats")["worker_count"] == 2
    wall_s = time.monotonic() - began
    assert not errors, errors

    sent = [json.loads(line) for line in trace.read_text().splitlines() if line.strip()]
    by_id = {s["client_request_id"]: s for s in sent}
    assert len(by_id) == len(sent)
    assert len({d for _, d, _ in runs}) == 3  # each Start a run dir of its own
    recorded: list[str] = []
    for max_tokens, run_dir, to_records_s in runs:
        records = pd.read_parquet(run_dir / "requests.parquet")
        assert records.worker_id.nunique() == 2, run_dir  # both workers ran every test
        # the streams in flight at each Stop drained (the default stop timeout): none cancelled
        assert records.ok.all(), records.error_kind.value_counts().to_dict()
        assert (records.output_tokens == int(max_tokens)).all(), (max_tokens, records.output_tokens)
        # every request of the run reached the server with the form's cap
        assert {by_id[r]["tokens_sent"] for r in records.request_id} == {int(max_tokens)}
        recorded += list(records.request_id)
        print(f"{run_dir.name}: {len(records)} records, Start -> 8 requests {to_records_s:.1f} s")
    # every request sent ends as exactly one record (in the run that sent it)
    assert sorted(recorded) == sorted(by_id)
    print(f"wall time {wall_s:.1f} s")


def _ended_run_dir(ui: str, before: list[Path]) -> Path | None:
    """The run dir of a run that ended, other than those ``before``."""
    stats = get_json(ui + "/llm/stats")
    run_dir = Path(stats["report"]["run_dir"])
    ended = stats["state"] == "stopped" and stats["report"]["run_ended"]
    return run_dir if ended and run_dir not in before else None


def _post_form(url: str, form: dict[str, str]) -> dict[str, Any]:
    """POST ``form`` as the start form sends it; Locust's JSON answer."""
    body = urllib.parse.urlencode(form).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=30.0) as resp:
        return dict(json.loads(resp.read()))


def test_a_sweep_started_from_the_form_runs_the_forms_stage_plan(tmp_path: Path) -> None:
    """With a stage shape the form also carries the stage plan; each new test reads its own, and
    a plan that does not parse is refused in the form, the test not started."""
    web_port = free_port()
    ui = f"http://127.0.0.1:{web_port}"
    cmd = locust_ui("http://placeholder", web_port, tmp_path / "run",
                    "--llm-concurrency", "1", "--llm-stage-duration", "1")  # fmt: skip
    cmd[cmd.index("locustfiles/chat.py")] = "locustfiles/sweep.py"
    with running_sim(tmp_path / "sim.log", *SIM_ARGS) as host:
        cmd[cmd.index("http://placeholder")] = host
        with spawn(cmd, tmp_path / "locust.log"):
            page = wait_for("Locust's web UI", lambda: get(ui + "/").decode(), 30.0)
            fields = json.loads(re.search(r'"extra_options": (\{.*?\}\}),', page)[1])
            assert {"llm_concurrency", "llm_stage_requests", "llm_max_tokens"} <= set(fields)
            assert fields["llm_concurrency"]["default_value"] == "1"  # the command line's
            refused = _post_form(ui + "/swarm", {"llm_concurrency": "1,x"})
            assert refused["success"] is False
            assert "--llm-concurrency '1,x'" in refused["message"], refused
            # a Host without a scheme is refused in the form; the web UI stays up
            refused = _post_form(ui + "/swarm", {"host": "127.0.0.1:8000"})
            assert refused["success"] is False and "no scheme" in refused["message"], refused
            run_dirs = []
            for plan in ("2,3", "4"):
                form = {"llm_concurrency": plan, "llm_stage_duration": "1", "llm_max_tokens": "8"}
                assert _post_form(ui + "/swarm", form)["success"] is True
                run_dirs.append(
                    wait_for("the sweep's end", lambda: _ended_run_dir(ui, run_dirs), 30.0)
                )
    for plan, run_dir in zip(("2,3", "4"), run_dirs, strict=True):
        run = json.loads((run_dir / "run.json").read_text())
        assert [s["name"] for s in run["stages"]] == [f"c={c}" for c in plan.split(",")]
        assert run["state"] == "finished"
        records = pd.read_parquet(run_dir / "requests.parquet")
        assert len(records) and (records.output_tokens == 8).all()
