"""The user classes under Locust against the real simulator (Locust in a subprocess).

Every ready locustfile runs as a plain script through Locust's single-user debug path and stops
by itself; two user classes in one locustfile reach their own servers with their own models and
APIs; the request event carries the user's context and start time; a bug in a user's own code is
a ``client_error``, never the server's failure. The simulator's trace is the ground truth.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, run_locust

from locust_llm.metrics import RECORD_FIELDS
from locust_llm.report.tables import stage_table
from locust_llm.rundir.layout import Stage, read_run_info
from locust_llm.sim.testing import running_sim

pytestmark = pytest.mark.slow

FAST = {"step_overhead_s": 0.002, "zero_cost": True, "output_len": "fixed:4"}
LOCUSTFILES = sorted(p.name for p in (ROOT / "locustfiles").glob("*.py"))


def _trace(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("name", LOCUSTFILES)
def test_each_locustfile_runs_as_a_script_and_stops_by_itself(name: str, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    with running_sim(trace_path=str(trace), **FAST) as url:
        env = {**os.environ, "LOCUST_HOST": url, "LOCUST_LLM_DEBUG_REQUESTS": "2"}
        out = subprocess.run(
            [sys.executable, str(ROOT / "locustfiles" / name)], cwd=tmp_path, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    assert "Traceback" not in out.stdout, out.stdout[-3000:]
    sent = _trace(trace)
    assert len(sent) == 2 and all(r["outcome"] == "ok" for r in sent), sent
    assert all(uuid.UUID(r["client_request_id"]).version == 4 for r in sent)
    assert out.stdout.count("/v1/") >= 2  # Locust's debug listener printed each request
    assert not list(tmp_path.glob("reports")), "the debug path writes no run dir"


def test_the_debug_path_prints_each_request_s_figures_and_text(tmp_path: Path) -> None:
    """``python locustfiles/chat.py`` (Locust's run_single_user) prints, per request, beside
    Locust's response time: TTFT, TPOT, tokens in / out and the answer's start (cut), the
    same figures the simulator's trace holds."""
    trace = tmp_path / "trace.jsonl"
    with running_sim(trace_path=str(trace), **{**FAST, "output_len": "fixed:24"}) as url:
        env = {**os.environ, "LOCUST_HOST": url, "LOCUST_LLM_DEBUG_REQUESTS": "2"}
        out = subprocess.run(
            [sys.executable, str(ROOT / "locustfiles" / "chat.py")], cwd=tmp_path, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    lines = re.findall(
        r"^locust-llm: TTFT ([\d.,]+) ms, TPOT ([\d.,]+) ms, tokens in (\d+) / out (\d+), "
        r'E2E ([\d.,]+) ms: "([^"]*)"(\.\.\.)?$',
        out.stdout,
        re.M,
    )
    sent = _trace(trace)
    assert len(lines) == len(sent) == 2, out.stdout[-3000:]
    for (ttft, tpot, tokens_in, tokens_out, e2e, text, cut), served in zip(
        lines, sent, strict=True
    ):
        assert (int(tokens_in), int(tokens_out)) == (served["prompt_tokens"], 24)
        server_ttft_ms = (served["first_token"] - served["arrival"]) * 1e3
        assert float(ttft) >= server_ttft_ms - 1.0  # the client sees it after the server sent it
        assert 0 < float(tpot) <= float(e2e)
        assert len(text) == 80 and cut == "..."  # 24 tokens of text, cut at 80 characters
        assert len(text.split()) >= 10
    # each after Locust's own line for its request
    assert out.stdout.index("/v1/chat/completions") < out.stdout.index("locust-llm: TTFT")


def test_the_class_host_is_used_without_any_host_option(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    with running_sim(trace_path=str(trace), **FAST) as url:
        script = tmp_path / "debug.py"
        script.write_text(
            "from locust import run_single_user\n"
            "from locust_llm.client.user import Chat\n\n"
            f"class Here(Chat):\n    host = {url!r}\n    model = 'mistral-7b'\n\n"
            "run_single_user(Here)\n"
        )
        env = {k: v for k, v in os.environ.items() if k != "LOCUST_HOST"}
        out = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    assert len(_trace(trace)) == 3  # --llm-debug-requests' default


TWO_CLASSES = """
import json
from locust import constant, events
from locust_llm import llm_events
from locust_llm.client.user import ChatUser, CompletionUser

SEEN = []

class Alpha(ChatUser):
    wait_time = constant(0)
    host = {alpha!r}
    model = "alpha"
    max_tokens = 3

    def context(self):
        return {{"cls": "alpha", "user": self.user_index}}

class Beta(CompletionUser):
    wait_time = constant(0)
    host = {beta!r}
    model = "beta"
    max_tokens = 5
    read_timeout_s = 30.0

    def context(self):
        return {{"cls": "beta"}}

@events.request.add_listener
def on_request(name, context, start_time, **kw):
    SEEN.append({{"name": name, "context": context, "start_time": start_time}})

@llm_events.request_done.add_listener
def on_done(record, **kw):
    SEEN.append({{"done": record.request_id}})

@llm_events.first_token.add_listener
def on_first(record, ttft_s, **kw):
    SEEN.append({{"first": record.request_id, "ttft_s": ttft_s}})

@events.quitting.add_listener
def dump(**kw):
    with open({out!r}, "w") as f:
        json.dump(SEEN, f)
"""


def test_two_user_classes_reach_their_own_servers_models_and_apis(tmp_path: Path) -> None:
    run_dir, seen = tmp_path / "run", tmp_path / "seen.json"
    ta, tb = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    with (
        running_sim(served_model_name="alpha", trace_path=str(ta), **FAST) as alpha,
        running_sim(served_model_name="beta", trace_path=str(tb), **FAST) as beta,
    ):
        locustfile = tmp_path / "two.py"
        locustfile.write_text(TWO_CLASSES.format(alpha=alpha, beta=beta, out=str(seen)))
        out = run_locust([
            "-f", str(locustfile), "--headless", "-u", "4", "-r", "4", "-t", "3s",
            "--stop-timeout", "5", "--llm-run-dir", str(run_dir),
        ])  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    records = pd.read_parquet(run_dir / "requests.parquet")
    assert records.ok.all() and len(records) > 10
    by_endpoint = records.groupby("endpoint").model.unique().to_dict()
    assert {k: list(v) for k, v in by_endpoint.items()} == {
        "/v1/chat/completions": ["alpha"], "/v1/completions": ["beta"],
    }  # fmt: skip
    chat = records[records.endpoint == "/v1/chat/completions"]
    assert (chat.output_tokens <= 3).all() and (records.output_tokens > 3).any()
    a_ids = {r["client_request_id"] for r in _trace(ta)}
    b_ids = {r["client_request_id"] for r in _trace(tb)}
    assert a_ids == set(chat.request_id) and b_ids == set(records.request_id) - a_ids
    assert read_run_info(run_dir).model == "alpha,beta"
    events = json.loads(seen.read_text())
    requests = [e for e in events if "name" in e]
    assert len(requests) == len(records) == len([e for e in events if "done" in e])
    firsts = {e["first"]: e["ttft_s"] for e in events if "first" in e}
    assert firsts == dict(zip(records.request_id, records.ttft_s, strict=True))
    starts = dict(zip(records.request_id, records.start_wall_s, strict=True))
    assert min(starts.values()) <= min(e["start_time"] for e in requests)
    for event in requests:
        want = "alpha" if event["name"] == "/v1/chat/completions" else "beta"
        assert event["context"]["cls"] == want
    assert any(abs(e["start_time"] - s) < 1e-6 for e in requests for s in starts.values())


BUGGY = """
from locust import constant
from locust_llm.client.user import ChatUser

class Buggy(ChatUser):
    wait_time = constant(0.05)
    host = {url!r}

    def build_body(self, prompt, max_tokens):
        body = super().build_body(prompt, max_tokens)
        if self.rng.random() < 0.5:
            return {{}}["no such key"]  # a bug in the locustfile's own code
        return body
"""


def test_a_bug_in_the_client_is_a_client_error_not_a_server_failure(tmp_path: Path) -> None:
    run_dir, trace = tmp_path / "run", tmp_path / "trace.jsonl"
    with running_sim(trace_path=str(trace), **FAST) as url:
        locustfile = tmp_path / "buggy.py"
        locustfile.write_text(BUGGY.format(url=url))
        out = run_locust([
            "-f", str(locustfile), "--headless", "-u", "2", "-r", "2", "-t", "2s",
            "--stop-timeout", "5", "--llm-run-dir", str(run_dir),
        ])  # fmt: skip
    records = pd.read_parquet(run_dir / "requests.parquet")
    bugs = records[records.error_kind == "client_error"]
    assert len(bugs) > 2
    assert (records.ok | records.error_kind.isin(["client_error", "cancelled"])).all()
    assert bugs.error_message.str.startswith("KeyError: ").all()
    reached = {r["client_request_id"] for r in _trace(trace)}
    assert set(records.request_id[records.ok]) <= reached  # the good ones reached it...
    assert not reached & set(bugs.request_id)  # ...the buggy ones never did
    # Locust's table: no failures; the bug is in Locust's exceptions (exit code 1)
    assert out.returncode == 1, out.stdout[-3000:]
    assert " 0(0.00%)" in out.stdout
    assert "KeyError" in out.stdout
    cancelled = int((records.error_kind == "cancelled").sum())
    window = Stage(index=0, name="all", start_wall_s=0.0, end_wall_s=2e10)
    row = stage_table(records[list(RECORD_FIELDS)], None, [window]).iloc[0]
    assert row["failed"] == 0 and row["error_rate"] == 0.0
    assert row["client_errors"] == len(bugs)
    assert row["requests"] == len(records) - len(bugs) - cancelled


def test_a_user_class_without_any_host_stops_the_run_with_one_line(tmp_path: Path) -> None:
    locustfile = tmp_path / "nohost.py"
    locustfile.write_text(
        "from locust_llm.client.user import ChatUser\n\nclass Nowhere(ChatUser):\n    model = 'm'\n"
    )
    out = run_locust([
        "-f", str(locustfile), "--headless", "-u", "1", "-t", "3s",
        "--llm-run-dir", str(tmp_path / "run"),
    ], timeout=60)  # fmt: skip
    assert out.returncode == 2, out.stdout[-3000:]
    assert "Nowhere: no host (--host, --llm-hosts or the class's host)" in out.stdout
    assert "Traceback" not in out.stdout
