"""A reasoning model in the simulator (``--reasoning-tokens N``), judged by the official OpenAI
client, and our client's time to first reasoning / answer token judged by the simulator's trace.

A chat answer opens with N tokens streamed as ``delta.reasoning_content`` (vLLM's reasoning
parsers' field), then the answer; usage counts them in
``completion_tokens_details.reasoning_tokens``. The trace records when the first reasoning byte
and the first answer byte left the server, so the gap our records show between TTFR and TTFC
can be checked against what the server did.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, run_locust

from locust_llm.sim.testing import running_sim

REASONING, OUTPUT = 6, 16
SIM = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "output_len": f"fixed:{OUTPUT}",
       "reasoning_tokens": REASONING}  # fmt: skip


def test_the_official_client_reads_the_reasoning_then_the_answer() -> None:
    openai = pytest.importorskip("openai")
    with running_sim(**SIM) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        chunks = list(
            client.chat.completions.create(
                model="llama-3.1-8b",
                messages=[{"role": "user", "content": "Why is the sky blue?"}],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        whole = client.chat.completions.create(
            model="llama-3.1-8b", messages=[{"role": "user", "content": "And the sea?"}]
        )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    thinking = [(d.model_extra or {}).get("reasoning_content") for d in deltas]
    kinds = ["r" if t else "c" if d.content else "" for d, t in zip(deltas, thinking, strict=True)]
    assert "".join(kinds) == "r" * REASONING + "c" * (OUTPUT - REASONING)
    usage = chunks[-1].usage
    assert usage.completion_tokens == OUTPUT
    assert usage.completion_tokens_details.reasoning_tokens == REASONING
    message = whole.choices[0].message
    assert message.content and (message.model_extra or {}).get("reasoning_content")
    assert whole.usage.completion_tokens_details.reasoning_tokens == REASONING


def test_our_first_reasoning_and_answer_times_match_the_trace(tmp_path: Path) -> None:
    trace, run_dir = tmp_path / "sim.jsonl", tmp_path / "run"
    with running_sim(trace_path=str(trace), **SIM) as url:
        out = run_locust([
            "-f", str(ROOT / "locustfiles" / "chat.py"), "--headless", "--host", url,
            "-u", "2", "-r", "2", "-t", "4s", "--stop-timeout", "5",
            "--llm-max-tokens", str(OUTPUT), "--llm-run-dir", str(run_dir),
        ])  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    records = pd.read_parquet(run_dir / "requests.parquet")
    done = records[records.ok]
    assert len(done) >= 10, len(done)
    assert (done.reasoning_tokens == REASONING).all() and (done.output_tokens == OUTPUT).all()
    sent = {r["client_request_id"]: r for r in map(json.loads, trace.read_text().splitlines())}
    gaps = []  # (ours, the server's) seconds from the first reasoning to the first answer token
    for row in done.itertuples():
        truth = sent[row.request_id]
        assert truth["reasoning_tokens"] == REASONING
        gaps.append((row.ttfc_s - row.ttfr_s, truth["first_answer_token"] - truth["first_token"]))
    assert all(ttfr <= ttft + 1e-9 for ttfr, ttft in zip(done.ttfr_s, done.ttft_s, strict=True))
    server = statistics.median(s for _, s in gaps)
    assert server > 0.005  # five decode steps of an 8B model: milliseconds, not nothing
    # per request, our gap is the server's plus the difference of two delivery delays
    errors = sorted(abs(ours - truth) for ours, truth in gaps)
    assert statistics.median(errors) < 0.002 + 0.1 * server, (errors[:5], server)
