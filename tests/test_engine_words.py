"""The verdict's actions in the engine's own words (report/diagnosis/engines.py) and the
scraper's identification of the engine from its /metrics (telemetry/scraper.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from locust_llm.report.diagnosis.actions import CAUSE_ACTIONS, KIND_ACTIONS, with_values
from locust_llm.report.diagnosis.engines import (
    ENGINE_WORDS,
    VLLM_FLAGS,
    engine_of,
    in_engine_words,
)
from locust_llm.report.diagnosis.verdict import stage_verdict
from locust_llm.telemetry.scraper import TelemetryScraper

LLAMACPP_PAGE = Path(__file__).parent / "llamacpp" / "metrics_sample.txt"
EVERY_ACTION = tuple(
    dict.fromkeys(a for table in (CAUSE_ACTIONS, KIND_ACTIONS) for v in table.values() for a in v)
)


def _flags(text: str) -> set[str]:
    return set(re.findall(r"--[a-z][a-z-]+", text))


@pytest.mark.parametrize("engine", sorted(ENGINE_WORDS))
def test_no_action_given_for_another_engine_keeps_a_vllm_flag(engine: str) -> None:
    filled = with_values(EVERY_ACTION, {"max_num_seqs": 4})
    out = in_engine_words(filled, engine)
    own = {f for r in ENGINE_WORDS[engine].values() if r for f in _flags(r)}
    assert out and all(not (VLLM_FLAGS & _flags(a)) - own for a in out), out
    # an action is left out only when one of its phrases has no counterpart there
    for action in filled:
        if not in_engine_words((action,), engine):
            assert any(p in action for p, r in ENGINE_WORDS[engine].items() if r is None), action


def test_llamacpp_words_for_the_batch_limit_and_the_kv_cache() -> None:
    batch = with_values(CAUSE_ACTIONS["batch_limit_admission"], {"max_num_seqs": 4})
    assert in_engine_words(batch, "llamacpp")[0].startswith(
        "raise the batch limit (--parallel (now 4))"
    )
    kv = in_engine_words(with_values(CAUSE_ACTIONS["kv_capacity_admission"], {}), "llamacpp")
    assert any("--cache-type-k q8_0 --cache-type-v q8_0" in a for a in kv)
    assert not any("gpu-memory-utilization" in a for a in kv)  # llama.cpp has no such knob
    assert in_engine_words(batch, "vllm") == batch and in_engine_words(batch, "") == batch


@pytest.mark.parametrize(
    ("server", "engine"),
    [
        ({"server_engine": "llamacpp"}, "llamacpp"),
        ({"server_engine": "sim"}, "vllm"),
        ({"server_engine": "sglang"}, "sglang"),
        ({"server_engine": "llamacpp,vllm"}, ""),  # two engines: the default words
        ({"max_num_seqs_source": "llama.cpp /props total_slots"}, "llamacpp"),
        ({}, ""),
    ],
)
def test_the_engine_a_run_names(server: dict[str, str], engine: str) -> None:
    assert engine_of(server) == engine


def test_a_stage_verdict_on_a_llamacpp_server_names_its_flags() -> None:
    row = {"stage": 0, "requests": 40, "running_max": 4, "waiting_max": 6, "waiting_avg": 3.0,
           "running_avg": 4.0, "kv_cache_usage_max": 0.3, "server_samples": 20,
           "ttft_p50_s": 1.0, "queue_avg_s": 0.8, "concurrency": 8}  # fmt: skip
    verdict = stage_verdict(row, server={"max_num_seqs": 4, "server_engine": "llamacpp"})
    flags = set().union(*(_flags(a) for a in verdict.actions))
    assert not VLLM_FLAGS & flags, verdict.actions


def test_the_scraper_names_the_engine_its_target_speaks() -> None:
    pages = {"http://a/metrics": LLAMACPP_PAGE.read_text(), "http://b/metrics": "up 1\n"}
    scraper = TelemetryScraper(list(pages), fetch=lambda url, _t: pages[url])
    scraper.scrape_once(now=1.0)
    assert scraper.engines == {"http://a/metrics": "llamacpp"}
