"""The bottleneck verdict on synthetic run dirs of every regime, and the pure rules directly."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from rundir_factory import make_run, regime

from locust_llm.report.build import build_report
from locust_llm.report.diagnosis.causes import KINDS
from locust_llm.report.diagnosis.thresholds import Thresholds
from locust_llm.report.diagnosis.verdict import Verdict, stage_verdict
from locust_llm.report.fmt import ms, pct
from locust_llm.report.load import load_run


def _report(tmp_path: Path, name: str):
    specs, kw = regime(name)
    # the synthetic server's batch limit (ServerModel.max_num_seqs), as a server would record it:
    # without it the 47-of-48 batch at the top decode stage reads as 20% of its KV capacity
    kw.setdefault("extra", {"max_num_seqs": 64})
    return build_report(load_run(make_run(tmp_path / name, specs, stage_s=30, **kw)))


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("decode", "decode_bound"),
        ("prefill", "prefill_bound"),
        ("oom", "memory_oom"),
        ("low_concurrency", "low_concurrency"),
        ("overloaded", "overloaded"),
        ("client_bound", "client_bound"),
        ("no_telemetry", "insufficient_data"),
    ],
)
def test_each_regime_gets_its_verdict(tmp_path: Path, name: str, kind: str) -> None:
    report = _report(tmp_path, name)
    assert report.overall.kind == kind
    assert report.overall.evidence and report.overall.actions
    assert kind in KINDS


def test_decode_evidence_quotes_the_top_stage_numbers(tmp_path: Path) -> None:
    report = _report(tmp_path, "decode")
    top = report.rows[-1]
    text = " ".join(report.overall.evidence)
    assert f"TPOT avg {ms(top['tpot_avg_s'], 1)} ms" in text
    assert f"GPU utilization {pct(top['gpu_util'])}" in text
    assert any("--quantization" in a for a in report.overall.actions)
    assert any("speculative" in a for a in report.overall.actions)


def test_prefill_evidence_names_the_ttft_share(tmp_path: Path) -> None:
    report = _report(tmp_path, "prefill")
    top = report.rows[-1]
    share = top["ttft_avg_s"] / top["latency_avg_s"]
    assert f"is {pct(share)} of E2E" in " ".join(report.overall.evidence)
    assert any("--enable-chunked-prefill" in a for a in report.overall.actions)


def test_oom_evidence_counts_the_failures(tmp_path: Path) -> None:
    report = _report(tmp_path, "oom")
    top = report.rows[-1]
    text = " ".join(report.overall.evidence)
    assert f"{pct(top['error_rate_oom'], 1)} of requests" in text
    assert f"GPU memory peaked at {pct(top['gpu_mem_util_max'])}" in text
    assert any("--gpu-memory-utilization" in a for a in report.overall.actions)


def test_low_concurrency_cites_the_batch_limit(tmp_path: Path) -> None:
    report = _report(tmp_path, "low_concurrency")
    text = " ".join(report.overall.evidence)
    assert "max-num-seqs 128" in text and "waiting" in text
    assert any("--max-num-seqs" in a for a in report.overall.actions)


def test_overloaded_and_client_bound_evidence(tmp_path: Path) -> None:
    over = _report(tmp_path, "overloaded")
    assert "standing queue" in " ".join(over.overall.evidence)
    client = _report(tmp_path, "client_bound")
    top = client.rows[-1]
    assert f"w1 CPU peaked at {pct(top['worker_cpu_max'])}" in client.overall.evidence[0]


def test_no_telemetry_says_what_is_missing(tmp_path: Path) -> None:
    report = _report(tmp_path, "no_telemetry")
    assert "no server telemetry" in report.overall.evidence[0]
    assert math.isnan(report.rows[-1]["gpu_util"])  # no data, not 0


def _row(**kw: float) -> dict:
    base = {
        "stage": 0,
        "kind": "step",
        "concurrency": 10.0,
        "requests": 100.0,
        "completed": 100.0,
        "qps": 5.0,
        "error_rate": 0.0,
        "latency_avg_s": 1.0,
        "latency_p99_s": 1.5,
        "ttft_avg_s": 0.1,
        "tpot_avg_s": 0.02,
    }
    base.update(kw)
    return base


def test_errors_rule_lists_kinds_and_their_actions() -> None:
    v = stage_verdict(
        _row(error_rate=0.05, error_rate_http_429=0.04, error_rate_timeout=0.01, gpu_util=0.5)
    )
    assert v.kind == "errors"
    assert "http_429 4.0%" in v.evidence[0] and "timeout 1.0%" in v.evidence[0]
    assert any(a.startswith("http_429") for a in v.actions)


def test_thresholds_are_rules_fields() -> None:
    row = _row(
        worker_cpu_max=0.85,
        worker_cpu_max_id="w2",
        gpu_util=0.95,
        running=10.0,
        waiting=0.0,
        kv_cache_usage=0.5,
        kv_cache_usage_max=0.6,
    )
    assert stage_verdict(row).kind != "client_bound"
    assert stage_verdict(row, thresholds=Thresholds(client_cpu=0.8)).kind == "client_bound"


def test_too_few_requests_is_insufficient_data() -> None:
    v = stage_verdict(_row(requests=2.0, gpu_util=0.99))
    assert v.kind == "insufficient_data" and "2 requests" in v.evidence[0]
    assert isinstance(v, Verdict) and v.as_dict()["stage"] == 0
