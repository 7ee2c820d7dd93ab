"""The TTFT split of a prefix-cached stage, judged by a real llama-server's own prefill clock.

One slot of llama-server (CPU, one thread) and two stages: 8 cold prompts at concurrency 1, then
32 prompts at concurrency 4 that share a long prefix (the slot's cache serves ~80% of each
prompt, and three of the four users wait for the slot). Without phase histograms the report's
split comes from the model: a per-token prefill cost calibrated on the cold stage, applied to
the tokens the server had to compute (``cached_tokens`` from the answers' usage). The judge is
llama-server's ``llamacpp:prompt_seconds_total``, its own prefill time, whose increase over the
stage's window the telemetry recorded. A model blind to the cache would put the whole cold
prefill (0.15 to 0.2 s here) in every warm prompt; the server says 40 to 90 ms.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT
from llamacpp.model import TinyModel, write_tiny_model
from llamacpp.server import LlamaServer, start_llama_server

from locust_llm.report.build import build_report
from locust_llm.report.diagnosis.decompose import decompose
from locust_llm.report.load import load_run
from locust_llm.telemetry.counters import series_increase

pytestmark = pytest.mark.slow

LOCUSTFILE = """
from locust import constant

from locust_llm.workloads.datasets import Prompt
from locust_llm.client.sweep_locustfile import Stages
from locust_llm.client.user import ChatUser

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
SHARED = " ".join(WORDS[i % 12] for i in range(170))


class PrefixChat(ChatUser):
    wait_time = constant(0)

    def next_prompt(self, record):
        words = " ".join(self.rng.choice(WORDS) for _ in range(200))
        text = words if self.runtime.current_stage == 0 else SHARED + " " + words[:200]
        messages = [{"role": "user", "content": text}]
        return Prompt(messages, text, 0, 4)
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> TinyModel:
    return write_tiny_model(tmp_path_factory.mktemp("model"), n_embd=256, n_layer=4, n_head=4)


@pytest.fixture(scope="module")
def server(model: TinyModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    with start_llama_server(model.gguf, tmp_path_factory.mktemp("srv"), slots=1,
                            ctx_per_slot=4096) as server:  # fmt: skip
        yield server


def test_a_cached_stages_prefill_is_the_servers_own(server: LlamaServer, tmp_path: Path) -> None:
    locustfile = tmp_path / "prefix_chat.py"
    locustfile.write_text(LOCUSTFILE)
    run_dir = tmp_path / "run"
    locust = str(Path(sys.executable).parent / "locust")
    done = subprocess.run(
        [locust, "-f", str(locustfile), "--headless", "--host", server.url,
         "--llm-concurrency", "1,4", "--llm-stage-requests", "8,32", "--llm-max-tokens", "4",
         "--llm-scrape-interval", "0.2", "--llm-run-dir", str(run_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = build_report(load_run(run_dir))
    cold, warm = report.rows
    assert cold["cached_tokens_avg"] < 0.05 * cold["input_tokens_avg"]
    assert warm["cached_tokens_avg"] > 0.7 * warm["input_tokens_avg"]
    # llama.cpp exports no phase histograms; its prefill clock (prompt_seconds_total) splits
    # the stage's TTFT, as the server measured it
    assert warm["ttft_split_source"] == "server prefill clock"
    series = report.telemetry.series

    def server_prefill_s(row: dict) -> float:  # the server's prefill seconds per request
        hi = row["end_wall_s"]
        lo = hi - row["duration_s"]
        return series_increase(series, "prompt_seconds_total", lo, hi) / row["requests"]

    truth_cold, truth_warm = server_prefill_s(cold), server_prefill_s(warm)
    assert truth_warm < 0.5 * truth_cold  # the cache did its work on the server
    ttft = warm["ttft_avg_s"]
    assert warm["prefill_avg_s"] == pytest.approx(min(truth_warm, ttft), rel=1e-6)
    # the model, for a server without that clock: the same rows split with the clock taken
    # out of the telemetry agree with the server's clock, within a fifth of TTFT
    blind_rows = [dict(r) for r in report.rows]
    without_clock = {k: v for k, v in series.items() if k != "prompt_seconds_total"}
    decompose(blind_rows, without_clock, open_loop=False)
    warm = blind_rows[1]
    assert warm["ttft_split_source"] == "model"
    assert abs(warm["prefill_avg_s"] - truth_warm) < 0.2 * ttft, (warm, truth_warm)
    assert abs(warm["queue_avg_s"] - (ttft - truth_warm)) < 0.2 * ttft
    # and the test can fail: the cold per-token cost over the whole prompt (a model blind to the
    # cache) misses the server's clock by several times more (3.5x to 20x in runs here)
    blind = min(ttft, truth_cold / cold["input_tokens_avg"] * warm["input_tokens_avg"])
    missed = abs(warm["prefill_avg_s"] - truth_warm)
    assert abs(blind - truth_warm) > max(2 * missed, 0.1 * ttft), (blind, truth_warm, missed)
