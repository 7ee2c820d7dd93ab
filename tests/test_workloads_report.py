"""The report's workload sections, from real runs: sessions and the prefix cache over the
simulator (its trace and /metrics are the judge), trace replay, embeddings, reasoning."""

from __future__ import annotations

import json
import math
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from cluster_utils import metric_value
from conftest import run_locust
from fake_openai import FakeConfig, fake_openai_server

from locust_llm.report.blocks import Table
from locust_llm.report.build import build_report
from locust_llm.report.document import document
from locust_llm.report.load import load_run
from locust_llm.report.render_md import render_markdown
from locust_llm.sim.testing import running_sim
from locust_llm.webui.data import prefix_cache_hit_rate

SESSIONS = """
from locust_llm.client.workload_users import SessionUser

class Talk(SessionUser):
    session_turns = "fixed:3"
    turn_input_len = "fixed:64"
    turn_output_len = "fixed:8"
    max_tokens = 8
"""
EMBED_AND_CHAT = """
from locust import constant
from locust_llm.client.user import ChatUser
from locust_llm.client.workload_users import EmbeddingsUser

class Embed(EmbeddingsUser):
    batch_size = 3
    input_len = 10
    wait_time = constant(0)
"""


def _locust(tmp_path: Path, text: str, url: str, seconds: int = 3) -> Path:
    locustfile, run_dir = tmp_path / "lf.py", tmp_path / "run"
    locustfile.write_text(text)
    out = run_locust([
        "-f", str(locustfile), "--headless", "--host", url, "-u", "3", "-r", "3",
        "-t", f"{seconds}s", "--stop-timeout", "5", "--llm-run-dir", str(run_dir),
        "--llm-scrape-interval", "0.2",
    ])  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    return run_dir


def _cells(table: Table) -> list[dict[str, str]]:
    return [dict(zip(table.headers, row, strict=True)) for row in table.rows]


def test_sessions_and_prefix_cache_sections_match_the_simulator(tmp_path: Path) -> None:
    trace = tmp_path / "sim.jsonl"
    with running_sim(trace_path=str(trace), zero_cost=True, output_len="fixed:8") as url:
        run_dir = _locust(tmp_path, SESSIONS, url)
        with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
            metrics = resp.read().decode()
    report = build_report(load_run(run_dir))
    doc = document(report)
    sent = [json.loads(x) for x in trace.read_text().splitlines() if x.strip()]
    (cache,) = _cells(doc.section("prefix_cache").blocks[1])  # type: ignore[arg-type]
    usage_rate = sum(r["cached_tokens"] for r in sent) / sum(r["prompt_tokens"] for r in sent)
    assert float(cache["hit rate (usage)"].rstrip("%")) == pytest.approx(usage_rate * 100, abs=0.1)
    server = metric_value(metrics, "vllm:prefix_cache_hits_total") / metric_value(
        metrics, "vllm:prefix_cache_queries_total"
    )
    assert float(cache["hit rate (server)"].rstrip("%")) == pytest.approx(server * 100, abs=3)
    turns = _cells(doc.section("sessions").blocks[1])  # type: ignore[arg-type]
    assert [t["turn"] for t in turns] == ["0", "1", "2"]
    records = pd.read_parquet(run_dir / "requests.parquet")
    for t in turns:
        part = records[records.ok & (records.turn == int(t["turn"]))]
        assert int(t["requests"].replace(",", "")) == len(part)
        assert float(t["prompt tokens P50"].replace(",", "")) == part.input_tokens.median()
    assert float(turns[2]["cached tokens P50"]) > float(turns[1]["cached tokens P50"]) > 0
    text = render_markdown(report)
    assert "## Multi-turn sessions" in text and "## Prefix cache" in text
    # the live tab's hit rate, from the same scrapes the run recorded
    tel = pd.read_parquet(run_dir / "telemetry.parquet")
    rows = tel[["time_s", "source", "signal", "gpu", "value"]].itertuples(index=False)
    live = prefix_cache_hit_rate(list(rows), window_s=math.inf)
    assert live == pytest.approx(server, abs=0.03)


def test_the_live_hit_rate_is_each_servers_increase_in_the_window() -> None:
    rows = [
        (100.0, "a", "prefix_cache_queries", "", 1000.0),
        (100.0, "a", "prompt_tokens_cached_total", "", 900.0),  # before the window: its history
        (140.0, "a", "prefix_cache_queries", "", 1500.0),
        (140.0, "a", "prompt_tokens_cached_total", "", 1000.0),
        (160.0, "a", "prefix_cache_queries", "", 2000.0),
        (160.0, "a", "prompt_tokens_cached_total", "", 1400.0),
        (150.0, "b", "prefix_cache_queries", "", 10.0),
        (160.0, "b", "prefix_cache_queries", "", 510.0),
        (150.0, "b", "prompt_tokens_cached_total", "", 0.0),
        (160.0, "b", "prompt_tokens_cached_total", "", 100.0),
        (160.0, "b", "kv_cache_usage", "", 0.5),
    ]
    # last 30 s: a served 400 of 500, b 100 of 500
    assert prefix_cache_hit_rate(rows, window_s=30.0) == pytest.approx(0.5)
    assert prefix_cache_hit_rate(rows[-1:]) is None
    flat = [(t, "a", "prefix_cache_queries", "", 5.0) for t in (1.0, 2.0)]
    assert prefix_cache_hit_rate(flat) is None  # no lookups in the window: no rate


def test_embeddings_section_counts_inputs_and_tokens_per_second(tmp_path: Path) -> None:
    with running_sim(zero_cost=True, output_len="fixed:4") as url:
        run_dir = _locust(tmp_path, EMBED_AND_CHAT, url)
    report = build_report(load_run(run_dir))
    (row,) = _cells(document(report).section("embeddings").blocks[0])  # type: ignore[arg-type]
    records = pd.read_parquet(run_dir / "requests.parquet")
    assert int(row["inputs"].replace(",", "")) == 3 * len(records) == records.batch_inputs.sum()
    inputs_s = float(row["inputs/s"].replace(",", ""))
    tokens_s = float(row["tokens/s"].replace(",", ""))
    assert tokens_s == pytest.approx(inputs_s * 10, rel=0.02)  # 10 tokens an input
    span = (records.start_wall_s + records.e2e_s).max() - records.start_wall_s.min()
    assert inputs_s == pytest.approx(3 * len(records) / span, rel=0.1)


def test_reasoning_section_times_the_first_reasoning_and_answer_tokens(tmp_path: Path) -> None:
    cfg = FakeConfig(tokens=4, interval_s=0.02, reasoning_tokens=3)
    with fake_openai_server(cfg) as url:
        run_dir = _locust(tmp_path, "from locustfiles.chat import Chat\n", url, seconds=2)
    records = pd.read_parquet(run_dir / "requests.parquet")
    ok = records[records.ok]
    assert (ok.ttfr_s == ok.ttft_s).all()  # the first token was reasoning
    gap = ok.ttfc_s - ok.ttfr_s  # three reasoning chunks 20 ms apart come first
    assert gap.median() == pytest.approx(0.06, abs=0.02)
    doc = document(build_report(load_run(run_dir)))
    rows = dict(doc.section("reasoning").blocks[0].rows)  # type: ignore[union-attr]
    assert rows["answers with reasoning"] == str(len(ok))
