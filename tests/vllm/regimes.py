"""One ``locust-llm run`` against a real vLLM engine, as a user types it, with the engine's own
account of each stage beside the report (the regime tests: ``tests/test_vllm_regimes.py``,
``tests/test_vllm_budget.py``)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import quiet_host
from cluster_utils import LOCUST_LLM

from locust_llm.report.build import Report, build_report
from locust_llm.report.load import load_run
from vllm.model import tiny_llama
from vllm.scrapes import Scraper, mean, stage_increases
from vllm.server import VllmServer, engine_python, start_vllm, warm_up

#: Seconds between the run's scrapes: an 8-user stage lasts about 3 s, and the verdict reads how
#: long its queue stood from the share of samples with a request waiting (at 0.5 s, 5 samples: 2
#: of 5 read as a burst in 2 runs of 7)
SCRAPE_S = "0.25"
#: The report's TTFT parts and the engine's histograms of the same phases.
PHASES = {
    "queue_avg_s": "vllm:request_queue_time_seconds",
    "prefill_avg_s": "vllm:request_prefill_time_seconds",
}
#: The engine's histograms whose finished-request counts bracket each stage.
BRACKETS = ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds")


@dataclass(frozen=True)
class Workload:
    """A stepped closed-loop load: users and requests per stage; prompts of ``input_len`` words
    (the random dataset) or from ``dataset``; ``flags``: more ``locust-llm run`` flags."""

    concurrency: tuple[int, ...]
    requests: tuple[int, ...]
    max_tokens: int
    input_len: int = 0
    dataset: str = ""
    flags: tuple[str, ...] = ()


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


def locust_run(url: str, name: str, model: Path, out: Path, load: Workload) -> Report:
    """``locust-llm run`` of ``load`` against the server at ``url`` serving ``name``, as a user
    types it, into ``out``; its report."""
    prompts = ("--dataset", load.dataset) if load.dataset else ("--input-len", str(load.input_len))
    cmd = [
        LOCUST_LLM, "run", "--host", url, "--model", name,
        "--concurrency", ",".join(map(str, load.concurrency)),
        "--stage-requests", ",".join(map(str, load.requests)), *prompts,
        "--max-tokens", str(load.max_tokens), "--ignore-eos", "--llm-tokenizer", str(model),
        "--llm-scrape-interval", SCRAPE_S, "--out", str(out), "--quiet", *load.flags,
    ]  # fmt: skip
    # one run took ~3 minutes on a 2-core EPYC without AVX-512 in bf16; the engine runs fp32
    # there now (vllm.server.engine_dtype), where the budget module's five took 5 in all
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode in (0, 3), done.stdout[-3000:] + done.stderr[-3000:]  # 3: alerts
    return build_report(load_run(out))


def run_regime(server: VllmServer, model: Path, out: Path, load: Workload) -> RegimeRun:
    """Run ``load`` against ``server`` into ``out``, scraping the engine alongside."""
    with Scraper(server, BRACKETS, load.requests) as scraper:
        report = locust_run(server.url, server.name, model, out, load)
    return RegimeRun(report, stage_increases(scraper.scrapes(), load.requests, BRACKETS))


def run_regimes(
    tmp: Path,
    flags: tuple[str, ...],
    loads: dict[str, Workload],
    after: Callable[[VllmServer], None] | None = None,
) -> dict[str, RegimeRun]:
    """Start one engine with ``flags``, warm it up and run each of ``loads`` in turn (into
    ``tmp/<name>``) with the host to itself (the split is judged against the engine's clock);
    every request of every run must succeed. ``after(server)`` runs before the engine stops."""
    engine_python()  # says how to install vLLM before a model is written for it
    model = tiny_llama()
    runs = {}
    with start_vllm(model, tmp, extra=flags) as server:
        warm_up(server, 4)
        with quiet_host.exclusive():
            for name, load in loads.items():
                done = _finished(server)
                runs[name] = run_regime(server, model, tmp / name, load)
                _settle(server, done + sum(load.requests))
        if after is not None:
            after(server)
    for name, run in runs.items():
        req = run.report.run.requests
        assert req["ok"].all(), (name, req.loc[~req["ok"], "error_message"].value_counts())
        assert len(req) == sum(loads[name].requests), name
    return runs


def split_against_engine(runs: dict[str, RegimeRun], stages: tuple[int, ...] = ()) -> pd.DataFrame:
    """Each stage's (``stages``, default all) queue and prefill means in the report beside the
    engine's over the stage's requests, and their difference as a share of the stage's TTFT
    (``off_of_ttft``); printed. Every row must have split TTFT by the server's own phases."""
    rows = []
    for name, run in runs.items():
        for stage, engine in enumerate(run.engine):
            if stages and stage not in stages:
                continue
            row = run.report.table.iloc[stage]
            assert row["ttft_split_source"] == "server", (name, stage)
            for column, histogram in PHASES.items():
                rows.append({"run": name, "stage": stage, "part": column,
                             "ours_ms": row[column] * 1e3,
                             "vllm_ms": mean(engine, histogram) * 1e3,
                             "ttft_ms": row["ttft_avg_s"] * 1e3})  # fmt: skip
    table = pd.DataFrame(rows)
    table["off_of_ttft"] = (table["ours_ms"] - table["vllm_ms"]).abs() / table["ttft_ms"]
    print(table.to_string(float_format=lambda x: f"{x:.3f}"))
    return table


def _finished(server: VllmServer) -> float:
    """Requests the engine's histograms count as finished."""
    return server.metric_sum("vllm:e2e_request_latency_seconds_count")


def _settle(server: VllmServer, finished: float, timeout_s: float = 10.0) -> None:
    """Wait until the engine's histograms count ``finished`` requests: it publishes a request's
    observations after the client saw its end, so a run started at once could find the last
    run's last request in its own first stage (a split 28% of TTFT off, once)."""
    deadline = time.monotonic() + timeout_s
    while _finished(server) < finished and time.monotonic() < deadline:
        time.sleep(0.1)
