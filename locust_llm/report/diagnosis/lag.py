"""When the simulator fell behind: the rule, and the report's per-stage warning.

The simulator runs in real time on the same host as the load generator; on a busy host its
steps are handed out late and the run would read as a slower GPU. Its ``/metrics`` count that
lag (``locust_llm_sim_step_lag_seconds`` sum and count, ``locust_llm_sim_late_steps_total``),
which the telemetry scraper records as the cumulative signals ``sim_lag_s``, ``sim_steps`` and
``sim_late_steps`` (``locust_llm.telemetry.signals``). A stage *lagged* when, over its window,
the mean step lag reached ``Thresholds.sim_lag_mean_s`` or at least ``sim_late_share`` of its
steps were more than :data:`LATE_STEP_S` late. :func:`lag_warnings` names every such stage for the
report; :func:`lag_summary` applies the same rule to a step trace's ``lag_s`` values.

Pure (pandas only for the telemetry frame).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from locust_llm.report.diagnosis.thresholds import DEFAULT_THRESHOLDS
from locust_llm.telemetry.counters import summed_increase

#: A step handed out later than this is a *late* step (seconds): the definition the
#: simulator's ``late_steps`` counter counts by (``sim/metrics.py``), not a judgement.
LATE_STEP_S = 0.01

#: The cumulative telemetry signals the simulator's lag metrics feed.
LAG_SIGNALS = ("sim_lag_s", "sim_steps", "sim_late_steps")


def lagged(mean_lag_s: float, late_share: float) -> bool:
    """The rule: mean lag >= ``sim_lag_mean_s`` or late steps >= ``sim_late_share`` of all."""
    th = DEFAULT_THRESHOLDS
    return mean_lag_s >= th.sim_lag_mean_s or late_share >= th.sim_late_share


def lag_summary(lags_s: Sequence[float]) -> tuple[float, float, bool]:
    """(mean lag, max lag, lagged) of the steps' ``lag_s`` values (NaN, NaN, False if none)."""
    clean = [v for v in lags_s if math.isfinite(v)]
    if not clean:
        return math.nan, math.nan, False
    mean = math.fsum(clean) / len(clean)
    late = sum(v > LATE_STEP_S for v in clean) / len(clean)
    return mean, max(clean), lagged(mean, late)


def _increase(frame: Any, signal: str, lo: float, hi: float) -> float:
    """How much a cumulative signal grew over the window (summed over sources, restarts counted
    from zero: :func:`locust_llm.telemetry.counters.summed_increase`)."""
    part = frame[frame["signal"] == signal]
    return summed_increase(
        part["time_s"].to_numpy(float),
        part["value"].to_numpy(float),
        part["source"].astype(str).to_numpy(),
        lo,
        hi,
    )


def lag_warnings(telemetry: Any, windows: Sequence[tuple[str, float, float]]) -> list[str]:
    """One warning per stage window ``(name, start, end)`` in which the simulator lagged.

    ``telemetry`` is the run's long-format frame (``locust_llm.rundir.layout.TELEMETRY_COLUMNS``);
    runs against other servers have no lag signals and get no warnings.
    """
    if telemetry is None or telemetry.empty or not (telemetry["signal"] == LAG_SIGNALS[1]).any():
        return []
    frame = telemetry[telemetry["signal"].isin(LAG_SIGNALS)].sort_values("time_s", kind="stable")
    out = []
    for name, lo, hi in windows:
        steps = _increase(frame, "sim_steps", lo, hi)
        if not steps > 0:
            continue
        lag = _increase(frame, "sim_lag_s", lo, hi)
        late = _increase(frame, "sim_late_steps", lo, hi)
        mean = lag / steps
        share = late / steps if math.isfinite(late) else 0.0
        if lagged(mean, share):
            out.append(
                f"stage {name}: the simulated server fell behind its real-time schedule "
                f"(mean step lag {mean * 1e3:.1f} ms, {share:.0%} of {steps:.0f} steps more "
                f"than {LATE_STEP_S * 1e3:g} ms late): its latencies include host delay, "
                "not only the simulated GPU's"
            )
    return out
