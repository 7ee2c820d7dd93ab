"""Conformance against a real vLLM engine (the CPU build ``scripts/build_vllm.sh`` installs) serving
the tiny random-weight Llama of :mod:`vllm.model`.

One stepped sweep (1 Locust master + 1 worker; concurrency 1, 4, 8; a stage ends when its requests
have ended and the next starts up to 1.35 s later) is judged stage by stage against what the engine
measured for the same requests: a thread scrapes ``/metrics`` every 0.25 s and at the end of each
stage's requests (:mod:`vllm.scrapes`), and a stage's share of each vLLM histogram and counter is
the difference between the scrapes at which the engine's finished-request count equals the run's
requests before the stage and up to it. Our token counts must equal its counters; our mean TTFT,
TPOT and E2E are compared with its histogram means, to the tolerances the measurements below
support (the constants say what the differences are made of); the vLLM vocabulary's names must be
ones the engine exposes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
import quiet_host
from cluster_utils import Cluster, read_run
from vllm.model import tiny_llama
from vllm.scrapes import Scraper, stage_increases
from vllm.server import VllmServer, engine_python, start_vllm, warm_up

from locust_llm.telemetry.promtext import parse_samples
from locust_llm.telemetry.vocabularies import metric_maps

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # may wait for the host (quiet_host)

CONCURRENCY = (1, 4, 8)
STAGE_REQUESTS = (4, 8, 16)
MAX_TOKENS = 48
INPUT_LEN = 64

#: vLLM histogram -> our record column it measures.
HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": "ttft_s",
    "vllm:e2e_request_latency_seconds": "e2e_s",
    "vllm:request_time_per_output_token_seconds": "tpot_s",
}
COUNTERS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total")


@dataclass(frozen=True)
class StageView:
    """One stage: our records and the engine's increase over it."""

    concurrency: int
    records: pd.DataFrame
    engine: dict[str, float]  # sample name -> increase between the bracketing scrapes

    def engine_mean(self, histogram: str) -> float:
        return self.engine[histogram + "_sum"] / self.engine[histogram + "_count"]


class Sweep:
    """Everything one sweep left behind, for the tests below to judge."""

    def __init__(self, tmp: Path, server: VllmServer, model: Path) -> None:
        self.source = server.url + "/metrics"
        with Cluster(tmp) as cluster, Scraper(server, HISTOGRAMS, STAGE_REQUESTS) as scraper:
            args = [
                "--llm-model", server.name,
                "--llm-concurrency", ",".join(map(str, CONCURRENCY)),
                "--llm-stage-requests", ",".join(map(str, STAGE_REQUESTS)),
                "--llm-max-tokens", str(MAX_TOKENS), "--llm-ignore-eos",
                "--llm-input-len", str(INPUT_LEN), "--llm-tokenizer", str(model),
                "--llm-server-metrics", self.source, "--llm-scrape-interval", "1",
                "--llm-record-batch-s", "0.25",
            ]  # fmt: skip
            self.run_dir = tmp / "run"
            master, port = cluster.master(
                server.url, [*args, "--llm-run-dir", str(self.run_dir)], workers=1
            )
            worker = cluster.worker(1, "127.0.0.1", port)
            code = master.wait(240)
            assert code in (0, 1), master.text()[-3000:]
            worker.wait(20)
        self.info, self.requests = read_run(self.run_dir)
        self.scraper = scraper
        self.scrapes = scraper.scrapes()
        self.stages = list(self._stage_views())
        self.telemetry = pd.read_parquet(self.run_dir / "telemetry.parquet")

    def _stage_views(self) -> Iterator[StageView]:
        increases = stage_increases(self.scrapes, STAGE_REQUESTS, HISTOGRAMS)
        for index, (concurrency, engine) in enumerate(zip(CONCURRENCY, increases, strict=True)):
            records = self.requests[self.requests["stage"] == index]
            yield StageView(concurrency, records, engine)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    tmp = tmp_path_factory.mktemp("vllm")
    engine_python()  # says how to install vLLM before a model is written for it
    model = tiny_llama()
    with start_vllm(model, tmp, extra=("--enable-mfu-metrics",)) as server:
        for concurrency in CONCURRENCY:  # each batch size once before it is measured
            warm_up(server, concurrency)
        with quiet_host.exclusive():  # our clock against the engine's: the host to the sweep
            return Sweep(tmp, server, model)


def test_every_request_succeeds_and_each_stage_is_complete(sweep: Sweep) -> None:
    req = sweep.requests
    failures = req.loc[~req["ok"], ["error_kind", "error_message"]].value_counts().to_dict()
    assert failures == {}, f"{len(req)} records, failures by kind: {failures}"
    assert [len(s.records) for s in sweep.stages] == list(STAGE_REQUESTS)
    assert (req["output_tokens"] == MAX_TOKENS).all()  # ignore_eos
    assert not req["tokens_estimated"].any()  # vLLM sends usage in the stream


def test_token_counts_equal_the_engines_counters(sweep: Sweep) -> None:
    for stage in sweep.stages:
        rec = stage.records
        assert not rec["input_tokens_estimated"].any()
        assert int(rec["input_tokens"].sum()) == stage.engine["vllm:prompt_tokens_total"]
        assert int(rec["output_tokens"].sum()) == stage.engine["vllm:generation_tokens_total"]
        # distinct prompts: no two share a whole KV block (the ChatML opening is 5 tokens)
        assert stage.engine["vllm:prompt_tokens_cached_total"] == 0


def _comparison(sweep: Sweep) -> pd.DataFrame:
    """Per stage and metric: our mean, vLLM's histogram mean, the difference (ms) and ratio - 1.
    ``last_token_s`` is TTFT + (n - 1) x TPOT: when the last token came (ours per request; vLLM's
    from its TTFT and TPOT means, n being the same for every request)."""
    rows = []
    for stage in sweep.stages:
        rec = stage.records
        ours = {column: float(rec[column].mean()) for column in HISTOGRAMS.values()}
        theirs = {column: stage.engine_mean(h) for h, column in HISTOGRAMS.items()}
        for side in (ours, theirs):
            side["last_token_s"] = side["ttft_s"] + (MAX_TOKENS - 1) * side["tpot_s"]
        for metric, value in ours.items():
            rows.append({"c": stage.concurrency, "metric": metric, "ours_ms": value * 1e3,
                         "vllm_ms": theirs[metric] * 1e3,
                         "diff_ms": (value - theirs[metric]) * 1e3,
                         "rel": value / theirs[metric] - 1.0})  # fmt: skip
    return pd.DataFrame(rows)


#: E2E and the last token's time: ours minus vLLM's is the time before vLLM's arrival stamp (HTTP,
#: chat template, tokenization) plus the last chunk's way out after its finish stamp (SSE, loopback,
#: our read: 0.6-15 ms between the kernel's receive stamp and Python's read). Measured on this
#: 2-core machine, 12 stages of 4 sweeps (2 alone, 2 beside the llama.cpp conformance files, as
#: `-n 2` runs them): 2.9-16.8 ms, 0.14-0.91% of E2E means of 1.5-2.8 s. Asserted: 3%. (With a
#: model 7x smaller, 6 ms a token, vLLM's front end, sharing a core with the client and the other
#: tests, fell behind the engine: E2E up to 30% above its histograms, 3 stages of 24 over 3%.)
END_REL = 0.03
#: TTFT: ours minus vLLM's is the same time before its arrival stamp plus the first chunk's way
#: out: vLLM stamps the first token when its front end's output loop takes it from the engine core,
#: and writes the chunk when the request's stream coroutine runs next. Measured 2.4-111 ms above
#: vLLM's means (3-61% of TTFTs of 50-380 ms; the 111 ms at c=8 beside the llama.cpp tests), so
#: 3% cannot hold: asserted are the order and a 0.25 s bound. A late first chunk shortens our TPOT
#: (first to last token) as much (-7.7% then; within 1.7% otherwise): TPOT is bounded above by
#: 3%, and TTFT + (n - 1) x TPOT is held to the E2E tolerance.
TTFT_MAX_EXCESS_S = 0.25
SLACK_S = 0.001  # clock reads on both sides


def test_our_latency_means_match_the_engines_histograms(sweep: Sweep) -> None:
    table = _comparison(sweep)
    text = table.to_string(float_format=lambda x: f"{x:.4f}")
    (sweep.run_dir.parent / "comparison.txt").write_text(text + "\n")  # beside the run dir
    print(text)
    for stage in sweep.stages:
        rec = stage.records
        first = (rec["first_token_user_s"] - rec["first_token_kernel_s"]).mean() * 1e3
        last = (rec["last_token_user_s"] - rec["last_token_kernel_s"]).mean() * 1e3
        print(f"c={stage.concurrency}: our read delay, first token {first:.2f} ms, last {last:.2f}")
    for row in table.to_dict("records"):
        ours, theirs = row["ours_ms"] / 1e3, row["vllm_ms"] / 1e3
        if row["metric"] in ("e2e_s", "last_token_s"):
            assert theirs - SLACK_S <= ours <= theirs * (1 + END_REL), row
        elif row["metric"] == "ttft_s":
            assert theirs - SLACK_S <= ours <= theirs + TTFT_MAX_EXCESS_S, row
        else:  # tpot_s
            assert ours <= theirs * (1 + END_REL), row


def test_vllm_vocabulary_names_are_what_the_engine_exposes(sweep: Sweep) -> None:
    samples = parse_samples(sweep.scraper.texts[-1][1])
    maps = [m for vocabulary, m in metric_maps() if vocabulary == "vllm"]
    deprecated = {"vllm:gpu_cache_usage_perc"}  # before v1
    missing = [
        m.key
        for m in maps
        if m.metric not in deprecated
        and not any(name == m.metric and m.selects(labels) for name, labels, _ in samples)
    ]
    assert missing == [], "mapped but not exposed by vLLM"
    recorded = sweep.telemetry[sweep.telemetry["source"] == sweep.source]
    signals = set(recorded["signal"])
    assert {m.signal for m in maps} - signals == set()
    last = recorded.groupby("signal")["value"].last()
    assert last["finished_length"] >= sum(STAGE_REQUESTS)  # ignore_eos: every one ran to length
    assert last["finished_stop"] == 0
    assert last["server_flops_total"] > 0  # --enable-mfu-metrics
    assert last["server_read_bytes_total"] > 0
