"""The verdict and the time split judged by a real vLLM engine in regimes forced by its own flags.

One engine (the CPU build, the tiny Llama of :mod:`vllm.model`) starts with ``--max-num-seqs 4``
and an 8 MiB KV cache (12 layers x 4 KV heads x 64 x 2 x bf16 = 12 KiB a token: the engine counts
640 tokens, 20 blocks of ``--block-size 32``) under ``--max-model-len 512``. Two runs of
``locust-llm run``, as a user types it, drive it into three regimes:

* ``short`` (prompts of 16 words, 24 tokens out): at 1 user the engine is under-loaded; at 8 users
  4 run and 4 wait for a batch slot while the KV cache stays under half full (4 x 2 blocks).
* ``long`` (64 words in, 160 tokens out) at 4 users: the batch has room, the KV cache does not
  (4 x ~240 tokens > 640): the engine preempts and requests wait for KV blocks.

The engine's word on each regime is its own gauges and counters: ``num_requests_waiting_by_reason
{reason="capacity"}`` (in the run's telemetry) and ``num_preemptions_total``; a stage's queue and
prefill times are its ``request_queue_time_seconds`` and ``request_prefill_time_seconds`` over
exactly the stage's requests (:mod:`vllm.scrapes`). The verdict must name the regime the engine
shows, and the report's time split must match the engine's phase means within a tenth of the
stage's TTFT.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import quiet_host
from cluster_utils import LOCUST_LLM
from vllm.model import tiny_llama
from vllm.scrapes import Scraper, mean, stage_increases
from vllm.server import VllmServer, engine_python, start_vllm, warm_up

from locust_llm.report.build import Report, build_report
from locust_llm.report.load import load_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # may wait for the host (quiet_host)

ENGINE_FLAGS = ("--max-num-seqs", "4", "--kv-cache-memory-bytes", str(8 * 2**20),
                "--block-size", "32", "--max-model-len", "512")  # fmt: skip
PHASES = {
    "queue_avg_s": "vllm:request_queue_time_seconds",
    "prefill_avg_s": "vllm:request_prefill_time_seconds",
}
BRACKETS = ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds")
#: Seconds between the run's scrapes: the 8-user stage lasts about 3 s, and the verdict reads how
#: long its queue stood from the share of samples with a request waiting (at 0.5 s, 5 samples: 2
#: of 5 read as a burst in 2 runs of 7)
SCRAPE_S = "0.25"
#: The split's tolerance, as a share of the stage's TTFT (the issue's "within 10% per stage").
SPLIT_OF_TTFT = 0.10


@dataclass(frozen=True)
class Workload:
    concurrency: tuple[int, ...]
    requests: tuple[int, ...]
    input_len: int
    max_tokens: int


SHORT = Workload((1, 8), (6, 24), 16, 24)
LONG = Workload((4,), (8,), 64, 160)


@dataclass(frozen=True)
class RegimeRun:
    report: Report
    engine: list[dict[str, float]]  # per stage: the engine's increases over its requests

    def stage_signal(self, stage: int, signal: str) -> pd.Series:
        """The run's telemetry samples of ``signal`` (the engine's, by our vocabulary) in a
        stage's window."""
        row = self.report.table.iloc[stage]
        hi = row["end_wall_s"]
        tel = self.report.run.telemetry
        window = tel[(tel["signal"] == signal) & (tel["time_s"] > hi - row["duration_s"])]
        return window[window["time_s"] <= hi]["value"]


def _run(server: VllmServer, model: Path, out: Path, load: Workload) -> RegimeRun:
    cmd = [
        LOCUST_LLM, "run", "--host", server.url, "--model", server.name,
        "--concurrency", ",".join(map(str, load.concurrency)),
        "--stage-requests", ",".join(map(str, load.requests)),
        "--input-len", str(load.input_len), "--max-tokens", str(load.max_tokens), "--ignore-eos",
        "--llm-tokenizer", str(model), "--llm-scrape-interval", SCRAPE_S, "--out", str(out),
        "--quiet",
    ]  # fmt: skip
    with Scraper(server) as scraper:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]  # 3: alerts
    engine = stage_increases(scraper.scrapes(), load.requests, BRACKETS)
    return RegimeRun(build_report(load_run(out)), engine)


@dataclass(frozen=True)
class Runs:
    short: RegimeRun
    long: RegimeRun


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    tmp = tmp_path_factory.mktemp("vllm-regimes")
    engine_python()  # says how to install vLLM before a model is written for it
    model = tiny_llama()
    with start_vllm(model, tmp, extra=ENGINE_FLAGS) as server:
        warm_up(server, 4)
        with quiet_host.exclusive():  # the split is judged against the engine's clock
            short = _run(server, model, tmp / "short", SHORT)
            long = _run(server, model, tmp / "long", LONG)
    return Runs(short, long)


def test_every_request_of_both_runs_succeeds(runs: Runs) -> None:
    for run, load in ((runs.short, SHORT), (runs.long, LONG)):
        req = run.report.run.requests
        assert req["ok"].all(), req.loc[~req["ok"], "error_message"].value_counts()
        assert len(req) == sum(load.requests)


def test_an_under_loaded_engine_is_not_called_overloaded(runs: Runs) -> None:
    verdict = runs.short.report.verdicts[0]
    assert runs.short.stage_signal(0, "waiting_capacity").max() == 0  # the engine never waited
    assert runs.short.engine[0]["vllm:num_preemptions_total"] == 0
    assert verdict.kind not in ("overloaded", "insufficient_data"), verdict


def test_the_batch_limit_is_named_where_the_engine_waits_without_preempting(runs: Runs) -> None:
    verdict = runs.short.report.verdicts[1]
    assert runs.short.stage_signal(1, "waiting_capacity").max() > 0
    assert runs.short.stage_signal(1, "running").max() == 4  # --max-num-seqs
    assert runs.short.engine[1]["vllm:num_preemptions_total"] == 0
    assert (verdict.kind, verdict.cause) == ("overloaded", "batch_limit_admission"), verdict


def test_kv_capacity_is_named_where_the_engine_preempts(runs: Runs) -> None:
    verdict = runs.long.report.verdicts[0]
    assert runs.long.engine[0]["vllm:num_preemptions_total"] > 0
    assert runs.long.stage_signal(0, "waiting_capacity").max() > 0
    assert runs.long.stage_signal(0, "running").max() <= 4
    assert (verdict.kind, verdict.cause) == ("overloaded", "kv_capacity_admission"), verdict


def test_the_time_split_matches_the_engines_phase_histograms(runs: Runs) -> None:
    rows = []
    for name, run in (("short", runs.short), ("long", runs.long)):
        for stage, engine in enumerate(run.engine):
            row = run.report.table.iloc[stage]
            assert row["ttft_split_source"] == "server"
            for column, histogram in PHASES.items():
                rows.append({"run": name, "stage": stage, "part": column,
                             "ours_ms": row[column] * 1e3,
                             "vllm_ms": mean(engine, histogram) * 1e3,
                             "ttft_ms": row["ttft_avg_s"] * 1e3})  # fmt: skip
    table = pd.DataFrame(rows)
    table["off_of_ttft"] = (table["ours_ms"] - table["vllm_ms"]).abs() / table["ttft_ms"]
    print(table.to_string(float_format=lambda x: f"{x:.3f}"))
    assert (table["off_of_ttft"] <= SPLIT_OF_TTFT).all(), table
