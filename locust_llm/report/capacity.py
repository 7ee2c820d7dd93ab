"""The capacity search in the report: the answer stated once, with what limits the server there
(the verdict of the first load that failed), and every stage the search ran with its SLO
percentiles and their order-statistic intervals (:mod:`locust_llm.capacity.intervals`, the
module the search judged by, at the tails of one of the stage's looks as the search used
it: :mod:`locust_llm.capacity.sequential`), read from the report's own stage windows (warm-up
left out).

Pure given a built :class:`~locust_llm.report.build.Report`; absent (None) for a run without a
search (run.json has no ``extra.capacity``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from locust_llm.capacity.intervals import percentile_interval
from locust_llm.capacity.measure import Reading, StageRule
from locust_llm.capacity.search import CapacityAnswer, format_reading
from locust_llm.capacity.slo import parse_slo
from locust_llm.report.build import Report
from locust_llm.report.tables import request_arrays

#: what the seed's fixed sweep sends (1, 10, 50, 100, 200 users; 10, 20, 100, 200, 400 requests)
SEED_SWEEP_REQUESTS = 730


@dataclass(frozen=True)
class CapacityReport:
    """The search's answer and its stages, as the report shows them."""

    sentence: str
    cause: str  # the verdict's limiting resource at the first failing load ("" unknown)
    cost: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    data: dict[str, Any]  # summary.json's ``capacity``


def _stage_of(steps: list[dict[str, Any]], load: float | None) -> int:
    """The run's stage of the latest step at ``load`` (-1 none)."""
    for step in reversed(steps):
        if load is not None and step["load"] == load:
            return int(step.get("stage", -1))
    return -1


def _rule(settings: dict[str, Any]) -> StageRule:
    """The stage rule the search ran under, as far as its intervals need it."""
    default = StageRule()
    return StageRule(
        confidence=float(settings.get("confidence", default.confidence)),
        min_requests=int(settings.get("min_requests", default.min_requests)),
        max_requests=int(settings.get("max_requests", default.max_requests)),
    )


def capacity_report(report: Report) -> CapacityReport | None:
    """The capacity section's contents, or None when the run did not search."""
    data = report.run.info.extra.get("capacity")
    if not data:
        return None
    answer = CapacityAnswer.from_dict(data)
    steps: list[dict[str, Any]] = list(data.get("steps", []))
    above = _stage_of(steps, answer.above)
    cause = ""
    if 0 <= above < len(report.verdicts):
        cause = report.verdicts[above].resource
    sentence = answer.sentence(cause)
    windows = report.stages
    spent_s = sum(s.end_wall_s - s.start_wall_s for s in windows if math.isfinite(s.end_wall_s))
    cost = (
        f"{answer.stages} stages, {answer.requests} requests, {spent_s:.0f} s "
        f"(the seed's fixed sweep: {SEED_SWEEP_REQUESTS} requests for loads 1, 10, 50, 100, "
        "200 users)"
    )
    slo = parse_slo(data.get("slo", ""))
    rule = _rule(data.get("settings", {}))
    arrays = request_arrays(report.run.requests)
    order = np.argsort(arrays["start_wall_s"], kind="stable")  # in time order: correlation
    ok = arrays["ok"][order]
    stage_ix = report.stage_ix[order]
    headers = ("stage", "load", "step", "judged", *(p.label for p in slo.percentiles), "ended by")
    rows = []
    for step in steps:
        stage = int(step.get("stage", -1))
        inside = (stage_ix == stage) & ok
        cells = []
        for p in slo.percentiles:
            values = arrays[p.field][order][inside].tolist()
            iv = percentile_interval(values, p.q, in_order=True, tails=rule.look_tails(p.q / 100.0))
            reading = Reading(p.name, p.label, p.limit_s, iv.value, iv.lo, iv.hi, "")
            text = format_reading(reading).removeprefix(p.label + " ") if iv.n else "n/a"
            cells.append(f"{text} (n={iv.n})")
        judged = "met" if step["passes"] else "failed: " + ", ".join(step["broken_by"])
        if step["state"] == "unclear":
            judged += " (by point estimates)"
        load = step["load"]
        rows.append((
            str(stage), f"{load:g}", step["phase"], judged, *cells, step.get("ended_by", ""),
        ))  # fmt: skip
    out = dict(data)
    out.update(sentence=sentence, cause=cause, spent_s=spent_s)
    return CapacityReport(sentence, cause, cost, headers, tuple(rows), out)
