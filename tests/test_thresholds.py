"""One Thresholds object for the verdict, the knee and the alerts: the shared error rate moves
all three together, the defaults are the ones documented, and no other module defines one."""

from __future__ import annotations

import ast
import math
from dataclasses import FrozenInstanceError, fields
from pathlib import Path

import pytest

from locust_llm.report.diagnosis.alerts import check, parse_thresholds
from locust_llm.report.diagnosis.knee import meets_slo
from locust_llm.report.diagnosis.thresholds import ALERT_FIELDS, Thresholds
from locust_llm.report.diagnosis.verdict import stage_verdict
from locust_llm.report.tables import Slo

ROOT = Path(__file__).resolve().parents[1]


def _row(error_rate: float) -> dict:
    return {
        "stage": 0, "concurrency": 8.0, "rate": math.nan, "requests": 200, "completed": 196,
        "error_rate": error_rate, "error_rate_http_5xx": error_rate, "error_rate_oom": 0.0,
        "worker_cpu_max": 0.2, "gpu_util": 0.5, "gpu_mem_util_max": 0.5, "running": 8.0,
        "waiting": 0.0, "kv_cache_usage_max": 0.3, "qps": 10.0, "latency_p99_s": 1.0,
    }  # fmt: skip


def _judged(row: dict, thresholds: Thresholds) -> tuple[str, bool, list[str]]:
    verdict = stage_verdict(row, [row], thresholds=thresholds).kind
    ok, _ = meets_slo(row, Slo(), thresholds)
    return verdict, ok, [a.name for a in check([row], thresholds)]


def test_the_error_rate_is_one_threshold_for_verdict_knee_and_alerts() -> None:
    row = _row(0.02)
    assert _judged(row, Thresholds()) == ("errors", False, ["error_rate"])
    assert _judged(_row(0.01), Thresholds()) != ("errors", False, ["error_rate"])  # strictly above
    raised = parse_thresholds("error_rate=5%")
    verdict, ok, alerts = _judged(row, raised)
    assert verdict != "errors" and ok and alerts == []
    off = parse_thresholds("error_rate=off")
    assert off.error_rate is None
    verdict, ok, alerts = _judged(row, off)
    assert verdict != "errors" and ok and alerts == []


def test_defaults_are_the_documented_values_and_frozen() -> None:
    t = Thresholds()
    assert (t.error_rate, t.gpu_mem, t.gpu_util, t.client_cpu) == (0.01, 0.90, 0.95, 0.90)
    assert (t.saturated_gpu_util, t.saturated_kv, t.saturated_bw_util) == (0.90, 0.90, 0.70)
    assert (t.linear_efficiency, t.flat_band, t.min_gain, t.latency_weight) == (
        0.5, 0.02, 0.05, 0.10,
    )  # fmt: skip
    assert (t.ttft, t.tpot, t.e2e) == (None, None, None)
    with pytest.raises(FrozenInstanceError):
        t.error_rate = 0.5  # type: ignore[misc]
    assert t.alert_values() == {
        "gpu_mem": 0.9, "gpu_util": 0.95, "error_rate": 0.01,
        "ttft": None, "tpot": None, "e2e": None,
    }  # fmt: skip
    assert set(ALERT_FIELDS) <= {f.name for f in fields(Thresholds)}


def test_alert_overrides_only_name_alert_fields() -> None:
    with pytest.raises(Exception, match="expected NAME=VALUE with NAME one of e2e, error_rate"):
        parse_thresholds("saturated_kv=0.5")


def test_no_other_module_defines_a_threshold_class_or_error_rate_default() -> None:
    offenders = []
    for path in sorted((ROOT / "locust_llm").rglob("*.py")):
        if path.name == "thresholds.py" or "sim" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            named = isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            if named and "error_rate" in node.target.id and node.value is not None:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.ClassDef) and node.name in (
                "Rules",
                "Rule",
                "SoakRule",
                "Thresholds",
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} class {node.name}")
    assert not offenders, offenders
