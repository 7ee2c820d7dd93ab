"""Long-run stability of soak stages: per-minute P99 latency and throughput, and their drift.

Pure. For each stage of kind ``soak``: completed requests are binned by the whole minute (from the
end of the warm-up) in which they started; a minute's P99 latency needs ``soak_min_per_minute``
requests, its throughput is completed requests / 60 s (partial last minutes are dropped). A
least-squares line through each series gives the slope per hour; drift % per hour = slope /
mean of the series x 100. The stage is ``unstable`` when P99 latency drifts up, or throughput
down, by more than ``soak_max_drift_pct_per_h`` and by more than ``soak_sigmas`` standard errors
of the slope (so minute-to-minute noise in a short soak is not called a trend); fewer than
``soak_min_minutes`` usable minutes is ``insufficient_data``. The thresholds are fields of the
shared :class:`locust_llm.report.diagnosis.thresholds.Thresholds`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from locust_llm.report.diagnosis.thresholds import Thresholds
from locust_llm.report.diagnosis.verdict import ACTIONS, Verdict
from locust_llm.report.fmt import num
from locust_llm.rundir.layout import Stage


@dataclass(frozen=True)
class SoakResult:
    """Drift of one soak stage."""

    stage: int
    minutes: tuple[float, ...]
    p99_s: tuple[float, ...]
    qps: tuple[float, ...]
    p99_drift_pct_per_h: float
    qps_drift_pct_per_h: float
    verdict: Verdict
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "minutes": list(self.minutes),
            "p99_s": list(self.p99_s),
            "qps": list(self.qps),
            "p99_drift_pct_per_h": self.p99_drift_pct_per_h,
            "qps_drift_pct_per_h": self.qps_drift_pct_per_h,
            "verdict": self.verdict.as_dict(),
        }


def drift_pct_per_hour(minutes: np.ndarray, values: np.ndarray) -> tuple[float, float]:
    """(drift, standard error), both in % of the series' mean per hour (NaN: < 3 points).

    Drift is the least-squares slope; its standard error comes from the residuals, so a
    drift within ~2 standard errors of 0 is noise, not a trend.
    """
    keep = np.isfinite(values)
    x, y = minutes[keep] / 60.0, values[keep]
    if x.size < 3 or np.ptp(x) == 0 or y.mean() == 0:
        return math.nan, math.nan
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    se = math.sqrt(float((resid**2).sum()) / (x.size - 2) / float(((x - x.mean()) ** 2).sum()))
    return float(slope / y.mean() * 100.0), float(se / y.mean() * 100.0)


def soak_drift(
    stage: Stage,
    start_wall_s: np.ndarray,
    e2e_s: np.ndarray,
    ok: np.ndarray,
    end_wall_s: float,
    thresholds: Thresholds = Thresholds(),
) -> SoakResult:
    """Per-minute series and drift of one soak stage from its requests' arrays."""
    lo = stage.start_wall_s + stage.warmup_s
    full = int(max(0.0, (end_wall_s - lo)) // 60) if math.isfinite(end_wall_s) else 0
    minute = np.floor((start_wall_s[ok] - lo) / 60.0).astype(np.int64)
    lat = e2e_s[ok]
    mins, p99s, qpss = [], [], []
    for m in range(full):
        sel = lat[minute == m]
        mins.append(float(m))
        qpss.append(sel.size / 60.0)
        p99s.append(
            float(np.percentile(sel, 99))
            if sel.size >= thresholds.soak_min_per_minute
            else math.nan
        )
    x = np.asarray(mins, dtype=float)
    p99_drift, p99_se = drift_pct_per_hour(x, np.asarray(p99s, dtype=float))
    qps_drift, qps_se = drift_pct_per_hour(x, np.asarray(qpss, dtype=float))
    usable = int(np.isfinite(np.asarray(p99s, dtype=float)).sum())
    limit = thresholds.soak_max_drift_pct_per_h
    evidence = [
        f"P99 latency drifts {num(p99_drift)} ± {num(p99_se)}%/h, throughput "
        f"{num(qps_drift)} ± {num(qps_se)}%/h over {usable} minutes "
        f"(limit ±{num(limit)}%/h beyond {num(thresholds.soak_sigmas)} standard errors)"
    ]
    if usable < thresholds.soak_min_minutes:
        kind = "insufficient_data"
        evidence = [
            f"{usable} usable minutes in soak stage {stage.index} "
            f"(< {thresholds.soak_min_minutes}, "
            f"each needs {thresholds.soak_min_per_minute} requests)"
        ]
    elif (p99_drift > limit and p99_drift > thresholds.soak_sigmas * p99_se) or (
        qps_drift < -limit and -qps_drift > thresholds.soak_sigmas * qps_se
    ):
        kind = "unstable"
    else:
        kind = "healthy"
    verdict = Verdict(kind, tuple(evidence), ACTIONS[kind], stage.index)
    return SoakResult(
        stage.index, tuple(mins), tuple(p99s), tuple(qpss), p99_drift, qps_drift, verdict
    )


def soak_results(
    stages: Sequence[Stage],
    ends: Sequence[float],
    stage_ix: np.ndarray,
    start_wall_s: np.ndarray,
    e2e_s: np.ndarray,
    ok: np.ndarray,
    thresholds: Thresholds = Thresholds(),
) -> list[SoakResult]:
    """Drift results for every soak stage (requests given as whole-run arrays + stage index)."""
    out = []
    for stage, end in zip(stages, ends, strict=True):
        if stage.kind != "soak":
            continue
        sel = stage_ix == stage.index
        out.append(soak_drift(stage, start_wall_s[sel], e2e_s[sel], ok[sel], end, thresholds))
    return out
