"""The knee of a sweep: how throughput scales with load, the best load range and a recommended cap.

Pure. Stages other than soak with completed requests are ordered by load (concurrency, or rate in
open loop). Each step from one load to the next is classified (the thresholds are fields of
:class:`locust_llm.report.diagnosis.thresholds.Thresholds`):

- gain = QPS ratio, load ratio = load ratio (open loop: of the arrivals due in the windows),
  efficiency = (gain - 1) / (load ratio - 1),
  latency cost = P99 latency ratio;
- ``linear`` (still scaling) when efficiency >= 0.5 (at least half of proportional scaling),
- ``flat`` when gain is within 2% of 1, ``falling`` when it is lower, ``flattening`` otherwise.

Recommended cap: walk up the loads; a stage is accepted when it meets the SLOs (error rate at most
1%, and P99 TTFT / TPOT / E2E within those given), its verdict is not ``overloaded``, in open
loop it achieved at least ``open_loop_achieved`` (95%) of the offered rate, and its throughput
gain over the cap so far is worth its latency cost: gain - 1 >= max(5%, 10% of (P99 ratio - 1)).
At a stage that is not accepted, the walk goes on from the first higher stage that is (stages
are not always monotonic: a higher load can beat a worse middle one); it ends when none is.
A single stage gives no cap. When the last step still scales (``linear``), "the knee lies
above the sweep". Best range: from the last stage of the unbroken run of
``linear`` steps from the lowest load (the knee) to the cap.

The reading reads consecutive steps of one class together. A run of ``linear`` steps says
"scales linearly" only when throughput grew by at least ``linear_wording`` (90%) of the load
ratio over the run; otherwise it says by how much: "1-50 scales x17.5 for x50 the load (QPS
0.8 -> 14.2, 35% efficiency)", efficiency = throughput ratio / load ratio. On the seed's
table this gives "1-50 scales x40 for x50 the load; 50-100 flattens; 100-200 falls; best
50-100; cap 100".
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from locust_llm.report.diagnosis.thresholds import (
    DEFAULT_THRESHOLDS,
    Slo,
    Thresholds,
    error_rate_exceeded,
)
from locust_llm.report.fmt import is_num, load_label, ms, num, ratio
from locust_llm.roofline.floors import ModelSpec


@dataclass(frozen=True)
class Step:
    """From one load to the next."""

    lo_stage: int
    hi_stage: int
    lo_load: str
    hi_load: str
    gain: float
    load_ratio: float
    efficiency: float
    latency_ratio: float
    cls: str  # linear | flattening | flat | falling
    lo_qps: float = math.nan
    hi_qps: float = math.nan
    lo_p99_s: float = math.nan
    hi_p99_s: float = math.nan


@dataclass(frozen=True)
class Knee:
    """The sweep's reading and conclusion."""

    steps: tuple[Step, ...] = ()
    knee_stage: int | None = None
    cap_stage: int | None = None
    best: str = ""  # e.g. "50-100"
    cap: str = ""  # e.g. "100"
    reading: str = ""
    conclusion: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        return {
            "knee_stage": self.knee_stage,
            "cap_stage": self.cap_stage,
            "best": self.best,
            "cap": self.cap,
            "reading": self.reading,
            "conclusion": self.conclusion,
            "notes": list(self.notes),
            "steps": [s.__dict__ for s in self.steps],
        }


def _f(row: Mapping[str, Any], key: str) -> float:
    value = row.get(key)
    return float(value) if is_num(value) else math.nan


def _load(row: Mapping[str, Any]) -> float:
    c = _f(row, "concurrency")
    return c if not math.isnan(c) else _f(row, "rate")


def _offered(row: Mapping[str, Any]) -> float:
    """The load a step's ratio compares: the concurrency, or in open loop the arrivals due in
    the window per second (a Poisson draw of 12 arrivals where 20 were nominal is the load
    the server was offered), else the nominal rate."""
    due = _f(row, "offered_rps")
    return due if due > 0 and math.isnan(_f(row, "concurrency")) else _load(row)


def _label(row: Mapping[str, Any]) -> str:
    return load_label(row.get("concurrency"), row.get("rate"))


def achieved_share(row: Mapping[str, Any]) -> float:
    """Open loop: the achieved rate / the arrivals due in the window (the table's
    ``achieved_ratio``: :func:`locust_llm.report.tables.achieved`; QPS / the nominal rate where
    a table lacks it); NaN in closed loop."""
    share = _f(row, "achieved_ratio")
    if math.isnan(share) and _f(row, "rate") > 0:
        share = _f(row, "qps") / _f(row, "rate")
    return share


def falls_short(row: Mapping[str, Any], threshold: float) -> bool:
    """Open loop: the stage achieved less than ``threshold`` of the arrivals due in its window,
    and more than one request short (which request of the window's edges completes inside the
    shifted window is chance: one of 19 arrivals is 5%); False in closed loop."""
    share = achieved_share(row)
    if not share < threshold:
        return False
    due, served = _f(row, "arrivals_due"), _f(row, "arrivals_served")
    return math.isnan(due - served) or due - served > 1


def meets_slo(
    row: Mapping[str, Any], slo: Slo, thresholds: Thresholds = Thresholds()
) -> tuple[bool, str]:
    """(ok, why not) for one stage against the SLOs and the error-rate limit."""
    if error_rate_exceeded(_f(row, "error_rate"), thresholds):
        return False, f"error rate {_f(row, 'error_rate') * 100:.1f}%"
    checks = (
        ("ttft_p99_s", slo.ttft_s, "TTFT"),
        ("tpot_p99_s", slo.tpot_s, "TPOT"),
        ("latency_p99_s", slo.e2e_s, "E2E"),
    )
    for key, limit, label in checks:
        if limit is not None and _f(row, key) > limit:
            return False, f"P99 {label} {ms(_f(row, key))} ms > SLO {ms(limit)} ms"
    return True, ""


def _classify(gain: float, efficiency: float, thresholds: Thresholds) -> str:
    if efficiency >= thresholds.linear_efficiency:
        return "linear"
    if gain < 1 - thresholds.flat_band:
        return "falling"
    if gain <= 1 + thresholds.flat_band:
        return "flat"
    return "flattening"


def moe_expected_gain(model: ModelSpec, lo_batch: float, hi_batch: float) -> float:
    """Decode throughput ratio the weight reads alone allow from ``lo_batch`` to ``hi_batch``
    for an MoE model: batch / bytes read per step (experts touched grow with the batch)."""
    lo, hi = max(1, round(lo_batch)), max(1, round(hi_batch))
    per_step = [model.params_read(b) for b in (lo, hi)]
    return (hi / per_step[1]) / (lo / per_step[0])


def _moe_class(
    thresholds: Thresholds,
    model: ModelSpec | None,
    lo: Mapping[str, Any],
    hi: Mapping[str, Any],
    gain: float,
    cls: str,
) -> str:
    """``moe`` for a flattening step an MoE model's expert reads explain (gain at least
    ``moe_gain_share`` (80%) of what they allow, the batch still growing); else ``cls``."""
    if model is None or not model.num_experts or cls != "flattening":
        return cls
    batch = [_f(r, "running") if _f(r, "running") > 0 else _load(r) for r in (lo, hi)]
    if not (batch[1] > batch[0] > 0):
        return cls
    expected = moe_expected_gain(model, batch[0], batch[1])
    return "moe" if gain >= thresholds.moe_gain_share * expected else cls


def _latency_words(r: float, thresholds: Thresholds) -> str:
    if r >= thresholds.latency_explodes:
        return f"latency explodes (P99 {ratio(r)})"
    if r >= thresholds.latency_climb:
        return f"latency climbs (P99 {ratio(r)})"
    return f"latency holds (P99 {ratio(r)})"


def _times(value: float) -> str:
    """A multiplier to three figures: x17.8, x50, x1.13."""
    return f"x{value:.3g}" if math.isfinite(value) else "x?"


def scaling_words(group: Sequence[Step], thresholds: Thresholds = DEFAULT_THRESHOLDS) -> str:
    """How a run of scaling steps grew: "scales linearly (QPS 1 -> 9.6, x9.6 for x10 the
    load)" near x1 per x1, else "scales x17.8 for x50 the load (QPS 0.8 -> 14.2, 36%
    efficiency)"; efficiency = throughput ratio / load ratio over the run (1 = proportional),
    "linearly" from ``linear_wording`` (x9 or more for x10 the load)."""
    gain = math.prod(s.gain for s in group)
    load_ratio = math.prod(s.load_ratio for s in group)
    share = gain / load_ratio if load_ratio > 0 else math.nan
    for_load = f"{_times(gain)} for {_times(load_ratio)} the load"
    qps = f"QPS {num(group[0].lo_qps)} -> {num(group[-1].hi_qps)}"
    if share >= thresholds.linear_wording:
        return f"scales linearly ({qps}, {for_load})"
    return f"scales {for_load} ({qps}, {share:.0%} efficiency)"


def _phrase(group: list[Step], thresholds: Thresholds) -> str:
    first, last = group[0], group[-1]
    span = f"{first.lo_load}-{last.hi_load}"
    qps = f"QPS {num(first.lo_qps)} -> {num(last.hi_qps)}"
    gain = last.hi_qps / first.lo_qps if first.lo_qps > 0 else math.nan
    lat = last.hi_p99_s / first.lo_p99_s if first.lo_p99_s > 0 else math.nan
    cls = first.cls
    if cls == "linear":
        return f"{span} {scaling_words(group, thresholds)}"
    if cls == "moe":
        return (
            f"{span} throughput grows sublinearly ({qps}, {ratio(gain)}) as an MoE model's "
            "does while each step reads more experts: not the limit"
        )
    if cls == "flattening":
        return (
            f"{span} throughput flattens ({qps}, {ratio(gain)}) while "
            f"{_latency_words(lat, thresholds)}: "
            "near the limit"
        )
    if cls == "flat":
        words = _latency_words(lat, thresholds)
        return f"{span} throughput stays flat ({qps}) while {words}: overload"
    return f"{span} throughput falls ({qps}) and {_latency_words(lat, thresholds)}: overload"


def _swept(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The stages the sweep compares: not soak, with completed requests and a load, by load
    (of equal loads the first)."""
    stages = sorted(
        (
            r
            for r in rows
            if r.get("kind") != "soak" and _f(r, "completed") > 0 and not math.isnan(_load(r))
        ),
        key=_load,
    )
    dedup: list[Mapping[str, Any]] = []
    for r in stages:
        if not dedup or _load(r) > _load(dedup[-1]):
            dedup.append(r)
    return dedup


def sweep_steps(
    dedup: Sequence[Mapping[str, Any]],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    model: ModelSpec | None = None,
) -> list[Step]:
    """Each step from one swept load to the next, classified (module docstring)."""
    steps = []
    for lo, hi in itertools.pairwise(dedup):
        gain = _f(hi, "qps") / _f(lo, "qps") if _f(lo, "qps") > 0 else math.nan
        lr = _offered(hi) / _offered(lo) if _offered(lo) > 0 else math.nan
        eff = (gain - 1) / (lr - 1) if lr > 1 else math.nan
        lat = (
            _f(hi, "latency_p99_s") / _f(lo, "latency_p99_s")
            if _f(lo, "latency_p99_s") > 0
            else math.nan
        )
        steps.append(
            Step(
                int(lo["stage"]),
                int(hi["stage"]),
                _label(lo),
                _label(hi),
                gain,
                lr,
                eff,
                lat,
                _moe_class(thresholds, model, lo, hi, gain, _classify(gain, eff, thresholds)),
                _f(lo, "qps"),
                _f(hi, "qps"),
                _f(lo, "latency_p99_s"),
                _f(hi, "latency_p99_s"),
            )
        )
    return steps


#: Step classes that say the load met no more capacity: near the limit (``flattening``) or
#: overload (``flat``, ``falling``). A stage reached by one has no headroom: its verdict is
#: never ``low_concurrency`` (the reading would say the opposite).
NO_HEADROOM: tuple[str, ...] = ("flattening", "flat", "falling")

#: What the reading says of a stage reached by a step of each class.
SAYS: dict[str, str] = {
    "linear": "scales",
    "moe": "scales (MoE)",
    "flattening": "near the limit",
    "flat": "overload",
    "falling": "overload",
}


def stage_scaling(
    rows: Sequence[Mapping[str, Any]],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    model: ModelSpec | None = None,
) -> dict[int, tuple[str, str]]:
    """The one classification of how each stage answered its load, which the reading, the
    cap and the verdict all read: stage -> (the class of the step that reached it from the
    next-lower load, the class of the step from it to the next-higher load): ``linear``,
    ``moe``, ``flattening``, ``flat``, ``falling``; "" where there is no such step (the lowest
    or highest load, a stage with no completed request, a soak stage)."""
    out = {int(r["stage"]): ("", "") for r in rows if is_num(r.get("stage"))}
    for step in sweep_steps(_swept(rows), thresholds, model):
        out[step.hi_stage] = (step.cls, out.get(step.hi_stage, ("", ""))[1])
        out[step.lo_stage] = (out.get(step.lo_stage, ("", ""))[0], step.cls)
    return out


def no_headroom(scaling: str, scaling_next: str, onward: bool = True) -> str:
    """What the reading says of a stage that has no headroom by its steps, or "": reached by
    a flattening, flat or falling step (the reading calls it near the limit or overload), or,
    with ``onward``, leading to the next load by one (a busy stage from which more load added
    little; one whose device was seen idle keeps its headroom below the knee)."""
    for cls in (scaling, scaling_next if onward else ""):
        if cls in NO_HEADROOM:
            return SAYS[cls]
    return ""


def contradictions(
    rows: Sequence[Mapping[str, Any]], kinds: Sequence[str], knee: Knee
) -> list[str]:
    """Where the stage verdicts' ``kinds`` (one per row) say the opposite of the reading or
    the cap: headroom (``low_concurrency``: "offer more load") on a stage the reading calls
    near the limit or overloaded (the step that reached it flattens, stays flat or falls);
    nothing saturated (``healthy``) on a stage it calls overloaded; ``low_concurrency`` on a
    stage above the recommended cap that met the SLOs. Empty when they agree."""
    out = []
    into = {int(s.hi_stage): s.cls for s in knee.steps}
    cap_load = math.nan
    for r in rows:
        if knee.cap_stage is not None and int(r["stage"]) == knee.cap_stage:
            cap_load = _load(r)
    for r, kind in zip(rows, kinds, strict=True):
        stage = int(r["stage"])
        said = no_headroom(into.get(stage, ""), "", onward=False)
        if kind == "low_concurrency" and said:
            out.append(f"stage {stage}: verdict {kind} (headroom), reading '{said}'")
        if kind == "healthy" and into.get(stage) in ("flat", "falling"):
            out.append(f"stage {stage}: verdict {kind} (nothing saturated), reading 'overload'")
        slo_missed = any(n.startswith(f"load {_label(r)} misses the SLOs") for n in knee.notes)
        if kind == "low_concurrency" and _load(r) > cap_load and not slo_missed:
            out.append(
                f"stage {stage}: verdict {kind} (offer more load) above the cap at {knee.cap}"
            )
    return out


def _cut_off_phrase(rows: Sequence[Mapping[str, Any]], above: float, blocked: set[int]) -> str:
    """The stages above the swept loads whose requests were cut off and whose verdict says
    overloaded: "512: 0 of 480 completed, the rest cut off: overload"; "" when none."""
    cut = sorted(
        (
            r
            for r in rows
            if int(r["stage"]) in blocked
            and r.get("kind") != "soak"
            and _load(r) > above
            and _f(r, "cut_off") > 0
        ),
        key=_load,
    )
    if not cut:
        return ""
    span = _label(cut[0]) if len(cut) == 1 else f"{_label(cut[0])}-{_label(cut[-1])}"
    done = sum(_f(r, "completed") for r in cut)
    sent = sum(_f(r, "sent") for r in cut)
    return f"{span}: {num(done)} of {num(sent)} requests completed, the rest cut off: overload"


def find_knee(
    rows: Sequence[Mapping[str, Any]],
    *,
    slo: Slo | None = None,
    thresholds: Thresholds = Thresholds(),
    overloaded: Sequence[int] = (),
    model: ModelSpec | None = None,
) -> Knee:
    """Classify the sweep's steps and pick the best range and the cap (module docstring);
    stages in ``overloaded`` (their verdict says so) are never the cap."""
    slo = slo or Slo()
    dedup = _swept(rows)
    if not dedup:
        none = ("no stage with completed requests and a load: no knee",)
        failed = sum(_f(r, "requests") for r in rows if _f(r, "requests") > 0)
        if failed and not any(_f(r, "completed") > 0 for r in rows):
            reading = f"no request completed: all {num(failed)} failed (see the verdict)"
            return Knee(reading=reading, notes=none)
        return Knee(notes=none)
    unit = "concurrency" if not math.isnan(_f(dedup[0], "concurrency")) else "rate"
    steps = sweep_steps(dedup, thresholds, model)
    notes: list[str] = []
    blocked = set(overloaded)

    def acceptable(i: int) -> tuple[bool, str]:
        ok, why = meets_slo(dedup[i], slo, thresholds)
        if not ok:
            if why.startswith("error rate"):  # the error-rate limit holds with no SLO given
                return False, f"fails too often: {why} > {thresholds.error_rate:.0%}"
            return False, f"misses the SLOs: {why}"
        if int(dedup[i]["stage"]) in blocked:
            return False, "is overloaded (see its verdict)"
        share = achieved_share(dedup[i])
        if falls_short(dedup[i], thresholds.open_loop_achieved):
            due = _f(dedup[i], "offered_rps")
            due = due if not math.isnan(due) else _f(dedup[i], "rate")
            return False, (
                f"achieves {num(_f(dedup[i], 'qps'), 2)} of {num(due, 2)} req/s due "
                f"({share:.0%} < {thresholds.open_loop_achieved:.0%})"
            )
        return True, ""

    def worth(lo: int, hi: int) -> tuple[bool, float, float]:
        gain = _f(dedup[hi], "qps") / _f(dedup[lo], "qps") if _f(dedup[lo], "qps") > 0 else 0.0
        p_lo, p_hi = _f(dedup[lo], "latency_p99_s"), _f(dedup[hi], "latency_p99_s")
        lat = p_hi / p_lo if p_lo > 0 else math.nan
        cost = lat - 1 if not math.isnan(lat) else 0.0
        return gain - 1 >= max(thresholds.min_gain, thresholds.latency_weight * cost), gain, lat

    ok0, why0 = acceptable(0)
    cap_ix: int | None = 0 if ok0 else None
    if not ok0:
        notes.append(f"the lowest load ({_label(dedup[0])}) {why0}")
    else:
        cap = 0
        i = 1
        while i < len(dedup):
            ok, why = acceptable(i)
            good, gain, lat = worth(cap, i) if ok else (False, math.nan, math.nan)
            if good:
                cap, i = i, i + 1
                continue
            # not accepted: a higher load may still beat the cap (non-monotonic stages are
            # chosen by the objective, not by the first drop)
            later = [j for j in range(i + 1, len(dedup)) if acceptable(j)[0] and worth(cap, j)[0]]
            if not ok:
                notes.append(f"load {_label(dedup[i])} {why}")
            else:
                notes.append(
                    f"load {_label(dedup[i])}: throughput {ratio(gain)} is not worth P99 "
                    f"{ratio(lat)}"
                )
            if not later:
                break
            cap, i = later[0], later[0] + 1
        cap_ix = cap
    knee_ix = 0
    for i, step in enumerate(steps, start=1):
        if step.cls not in ("linear", "moe"):
            break
        knee_ix = i
    groups: list[list[Step]] = []
    for step in steps:
        if groups and groups[-1][-1].cls == step.cls:
            groups[-1].append(step)
        else:
            groups.append([step])
    cut_off = _cut_off_phrase(rows, _load(dedup[-1]), blocked)
    reading = "; ".join(
        [*(_phrase(g, thresholds) for g in groups), *([cut_off] if cut_off else [])]
    )
    if not steps and cut_off and ok0:  # one stage scaled, the loads above it were cut off
        lab = _label(dedup[0])
        return Knee(
            (), int(dedup[0]["stage"]), int(dedup[0]["stage"]), lab, lab, reading,
            f"best {unit} {lab}; cap {unit} at {lab}", tuple(notes),
        )  # fmt: skip
    if not steps:
        notes.append("one load level only: sweep the load to find the knee")
        cap_ix = None  # never a cap from a single stage
        return Knee(
            tuple(steps), None, None, "", "", reading,
            f"one {unit} only: no cap (sweep the load)", tuple(notes),
        )  # fmt: skip
    if cap_ix is None:
        return Knee(
            tuple(steps),
            None,
            None,
            "",
            "",
            reading,
            f"no cap: the lowest {unit} ({_label(dedup[0])}) {why0}; lower the load or fix "
            "the server",
            tuple(notes),
        )
    if steps[-1].cls in ("linear", "moe"):
        notes.append(
            f"still scaling at the highest {unit} ({_label(dedup[-1])}): the knee lies "
            "above it; extend the sweep"
        )
    knee_ix = min(knee_ix, cap_ix)
    lo_lab, cap_lab = _label(dedup[knee_ix]), _label(dedup[cap_ix])
    best = lo_lab if knee_ix == cap_ix else f"{lo_lab}-{cap_lab}"
    conclusion = f"best {unit} {best}; cap {unit} at {cap_lab}"
    return Knee(
        tuple(steps),
        int(dedup[knee_ix]["stage"]),
        int(dedup[cap_ix]["stage"]),
        best,
        cap_lab,
        reading,
        conclusion,
        tuple(notes),
    )
