"""Alerts: per-stage checks against thresholds, the source document's defaults, all overridable.

Defaults (section 4 of the source): memory pressure > 90% (the stage's peak), GPU utilization >
95% (the stage's mean), error rate > 1%; TTFT / TPOT / E2E (P99 of the stage) only when a
threshold is given. A check fires when the value is strictly above its threshold; no data (NaN)
never fires. The values are the alert fields of the shared
:class:`locust_llm.report.diagnosis.thresholds.Thresholds`
(:data:`~locust_llm.report.diagnosis.thresholds.ALERT_FIELDS`).

Memory pressure is the KV-cache usage where the server reports one (vLLM, SGLang and the
simulator preallocate ~90% of GPU memory from the first second, so NVML memory says nothing
there), else NVML's GPU memory used / total. Severities: ``fail`` (``locust-llm report`` and
``run`` exit 3) for memory pressure, error rate and the SLO checks; GPU utilization > 95% is a
``warning`` (a healthy saturated server is busy), ``fail`` only with ``--alert gpu_util_fails=on``.

GPU utilization is NVML's "a kernel was running" share of the time, not how full the GPU is: a
decoding GPU reads near 100% at concurrency 1. Alone it is a property of the device at any load,
so its alert is a saturation alert: it fires only in a stage that is also saturated by its load
(:func:`saturation`): requests queued at the server (mean waiting at least ``no_queue_waiting``)
or throughput stopped scaling on the step up to it (the knee's step into it is not ``linear``:
efficiency below ``linear_efficiency``). Its message says which, and that saturated means busy,
not broken.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from locust_llm.errors import InputError
from locust_llm.report.diagnosis.knee import Step, find_knee
from locust_llm.report.diagnosis.thresholds import ALERT_FIELDS, Thresholds
from locust_llm.report.fmt import is_num, load_label, ms, num, pct, ratio

#: alert field of Thresholds -> (stage-table column, label, is a ratio), in ALERT_FIELDS order
#: (``gpu_mem`` reads the KV-cache peak first: :func:`_memory_pressure`)
CHECKS: dict[str, tuple[str, str, bool]] = {
    "gpu_mem": ("gpu_mem_util_max", "GPU memory (peak)", True),
    "gpu_util": ("gpu_util", "GPU saturated: utilization (mean)", True),
    "error_rate": ("error_rate", "error rate", True),
    "ttft": ("ttft_p99_s", "P99 TTFT", False),
    "tpot": ("tpot_p99_s", "P99 TPOT", False),
    "e2e": ("latency_p99_s", "P99 E2E latency", False),
}


@dataclass(frozen=True)
class Alert:
    """One threshold crossed in one stage."""

    name: str
    stage: int
    value: float
    threshold: float
    message: str
    severity: str = "fail"  # "fail": exit 3; "warning": shown only

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _parse_value(name: str, text: str, is_ratio: bool) -> float | None:
    text = text.strip().lower()
    if text in ("off", "none", ""):
        return None
    scale = 1.0
    if is_ratio and text.endswith("%"):
        text, scale = text[:-1], 0.01
    elif not is_ratio and text.endswith("ms"):
        text, scale = text[:-2], 1e-3
    elif not is_ratio and text.endswith("s"):
        text = text[:-1]
    try:
        value = float(text) * scale
    except ValueError:
        raise InputError(f"--alert {name}={text!r}: expected a number") from None
    if not math.isfinite(value) or value < 0:
        raise InputError(f"--alert {name}: expected a non-negative number, got {text!r}")
    return value


def parse_thresholds(spec: str | None, base: Thresholds | None = None) -> Thresholds:
    """``'gpu_mem=95%,error_rate=0.05,ttft=500ms,gpu_util=off'`` over ``base`` (defaults)."""
    out = base or Thresholds()
    if not spec:
        return out
    known = {*ALERT_FIELDS, SATURATION_FAILS}
    changes: dict[str, Any] = {}  # only alert fields: float | None
    for item in spec.split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if sep and name == SATURATION_FAILS:
            flag = value.strip().lower()
            if flag not in ("on", "off", "yes", "no", "true", "false"):
                raise InputError(f"--alert {name}={value.strip()!r}: expected on or off")
            changes[name] = flag in ("on", "yes", "true")
            continue
        if not sep or name not in known:
            raise InputError(
                f"--alert: cannot read {item.strip()!r}; expected NAME=VALUE with NAME one of "
                f"{', '.join(sorted(known))}"
            )
        changes[name] = _parse_value(name, value, CHECKS[name][2])
    return replace(out, **changes)


SATURATION_FAILS = "gpu_util_fails"  # --alert gpu_util_fails=on: GPU utilization fails the run


def _memory_pressure(row: Mapping[str, Any]) -> tuple[str, str]:
    """(column, label) memory pressure is read from: KV usage if reported, else NVML memory."""
    if is_num(row.get("kv_cache_usage_max")):
        return "kv_cache_usage_max", "memory pressure (KV cache, peak)"
    return CHECKS["gpu_mem"][:2]


def failing(alerts: Sequence[Alert]) -> list[Alert]:
    """The alerts that fail the run (exit 3)."""
    return [a for a in alerts if a.severity == "fail"]


def saturation(
    rows: Sequence[Mapping[str, Any]], thresholds: Thresholds, steps: Sequence[Step] | None = None
) -> dict[int, str]:
    """Stage -> why its load saturates the server, in words, for the stages that it does: a
    queue at the server (mean waiting at least ``no_queue_waiting``), or throughput that stopped
    scaling on the step up to the stage (the knee's step into it is not ``linear``). A stage
    with neither (the first of a sweep without a queue, a one-stage run without one) is not.
    ``steps``: the report's knee steps (its MoE reading included); by default the rows' own."""
    if steps is None:
        steps = find_knee(rows, thresholds=thresholds).steps
    into = {step.hi_stage: step for step in steps}
    out: dict[int, str] = {}
    for row in rows:
        stage = int(row["stage"])
        waiting = row.get("waiting")
        step = into.get(stage)
        if is_num(waiting) and waiting >= thresholds.no_queue_waiting:
            out[stage] = (
                f"{num(waiting, 1)} requests waiting (busy, not broken: more load only queues)"
            )
        elif step is not None and step.cls != "linear" and is_num(step.gain):
            out[stage] = (
                f"throughput {ratio(step.gain)} for {ratio(step.load_ratio)} the load from "
                f"{step.lo_load} (busy, not broken: more load adds little throughput)"
            )
    return out


def check(
    rows: Sequence[Mapping[str, Any]], thresholds: Thresholds, steps: Sequence[Step] | None = None
) -> list[Alert]:
    """Every alert that fires, stage by stage in the rows' order (GPU utilization only where
    the stage is saturated: :func:`saturation`, from the knee's ``steps``)."""
    alerts = []
    saturated: dict[int, str] | None = None
    for row in rows:
        for name, (column, label, is_ratio) in CHECKS.items():
            limit = getattr(thresholds, name)
            if name == "gpu_mem":
                column, label = _memory_pressure(row)
            value = row.get(column)
            if limit is None or not is_num(value) or not value > limit:
                continue
            shown = (
                f"{pct(value, 1)} > {pct(limit, 1)}"
                if is_ratio
                else f"{ms(value)} ms > {ms(limit)} ms"
            )
            if name == "gpu_util":
                saturated = saturation(rows, thresholds, steps) if saturated is None else saturated
                why = saturated.get(int(row["stage"]))
                if why is None:  # busy at a load it still keeps up with: the device, not a limit
                    continue
                shown += f" and {why}"
            where = load_label(row.get("concurrency"), row.get("rate"))
            warn = name == "gpu_util" and not thresholds.gpu_util_fails
            severity = "warning" if warn else "fail"
            alerts.append(
                Alert(
                    name,
                    int(row["stage"]),
                    float(value),
                    float(limit),
                    f"stage {row['stage']} (load {where}): {label} {shown} ({severity})",
                    severity,
                )
            )
    return alerts
