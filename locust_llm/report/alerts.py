"""Alerts: per-stage checks against thresholds, the source document's defaults, all overridable.

Defaults (section 4 of the source): GPU memory > 90% (the stage's peak), GPU utilization > 95%
(the stage's mean), error rate > 1%; TTFT / TPOT / E2E (P99 of the stage) only when a threshold is
given. A check fires when the value is strictly above its threshold; no data (NaN) never fires.
``locust-llm report`` exits 3 when any alert fires. The values are the alert fields of the
shared :class:`locust_llm.thresholds.Thresholds` (:data:`~locust_llm.thresholds.ALERT_FIELDS`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from locust_llm.errors import InputError
from locust_llm.report.fmt import is_num, load_label, ms, pct
from locust_llm.thresholds import ALERT_FIELDS, Thresholds

#: alert field of Thresholds -> (stage-table column, label, is a ratio), in ALERT_FIELDS order
CHECKS: dict[str, tuple[str, str, bool]] = {
    "gpu_mem": ("gpu_mem_util_max", "GPU memory (peak)", True),
    "gpu_util": ("gpu_util", "GPU utilization (mean)", True),
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
    known = set(ALERT_FIELDS)
    changes: dict[str, Any] = {}  # only alert fields: float | None
    for item in spec.split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in known:
            raise InputError(
                f"--alert: cannot read {item.strip()!r}; expected NAME=VALUE with NAME one of "
                f"{', '.join(sorted(known))}"
            )
        changes[name] = _parse_value(name, value, CHECKS[name][2])
    return replace(out, **changes)


def check(rows: Sequence[Mapping[str, Any]], thresholds: Thresholds) -> list[Alert]:
    """Every alert that fires, stage by stage in the rows' order."""
    alerts = []
    for row in rows:
        for name, (column, label, is_ratio) in CHECKS.items():
            limit = getattr(thresholds, name)
            value = row.get(column)
            if limit is None or not is_num(value) or not value > limit:
                continue
            shown = (
                f"{pct(value, 1)} > {pct(limit, 1)}"
                if is_ratio
                else f"{ms(value)} ms > {ms(limit)} ms"
            )
            where = load_label(row.get("concurrency"), row.get("rate"))
            alerts.append(
                Alert(
                    name,
                    int(row["stage"]),
                    float(value),
                    float(limit),
                    f"stage {row['stage']} (load {where}): {label} {shown}",
                )
            )
    return alerts
