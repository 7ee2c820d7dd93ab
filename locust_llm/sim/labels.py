"""Ground-truth labels: what limited the simulated server in a time window, from its traces.

Pure. :func:`ground_truth` reads the step lines and request lines of
:mod:`locust_llm.sim.trace` (``--step-trace`` and ``--trace``, or the same dicts built in
virtual time with :func:`~locust_llm.sim.trace.step_record` and
:func:`~locust_llm.sim.trace.request_times`) for the window ``[start, end)`` and returns a
:class:`GroundTruth`: the shares of step time each roofline term set, how much of it ran with
requests left waiting and why, the TTFT split (queue / prefill) and decode time of the requests
in the window, the simulator's own lag, and one label. Steps belong to the window by their
start, requests by their engine first token (TTFT split) or their engine finish (decode time).

Labels, the first rule that holds wins (thresholds are :class:`LabelRules` fields):

1. ``kv_capacity_admission``: requests were left waiting in at least ``admission_share`` of
   the step time, and the KV pool (no blocks, or a preemption) held them back more often than
   ``max_num_seqs`` did;
2. ``batch_limit_admission``: the same with ``max_num_seqs`` the main blocker;
3. ``under_loaded``: the GPU was busy less than ``busy_share`` of the window;
4. ``prefill_interference``: compute set at least ``bound_share`` of the step time, at least
   ``interference_share`` of it went to steps that decode sequences shared with prefill
   chunks, and the requests spent longer decoding than waiting for their first token (decode
   tokens slowed by other requests' prompts; the decode time of the requests that finished in
   the window, or where none did, of those whose first token fell in it);
5. ``compute_bound_prefill``: compute set at least ``bound_share`` of the step time and
   prefill tokens were at least half the tokens computed;
6. ``compute_bound_decode``: compute set at least ``bound_share`` of the step time (a decode
   batch past the roofline's ridge);
7. ``bandwidth_bound_decode``: memory bandwidth set the steps, its term (the bytes at the
   achievable bandwidth, in the steps it bounded) at least as long as the host's per-step and
   per-sequence overhead;
8. ``host_overhead``: otherwise (the host's overhead outlasted the memory term: the steps
   wait on the engine's host work, neither compute nor memory bandwidth).

:data:`LABELS` are the verdict's causes and :data:`VERDICT_KINDS` maps each to the verdict kind it
should produce, both taken from :mod:`locust_llm.report.diagnosis.causes` (declared there once).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from locust_llm.report.diagnosis.causes import CAUSE_KINDS, CAUSES
from locust_llm.report.diagnosis.lag import lag_summary

#: Each label -> the verdict kind a correct diagnosis gives (the labels are the verdict's causes,
#: declared once in :mod:`locust_llm.report.diagnosis.causes`).
VERDICT_KINDS: dict[str, str] = CAUSE_KINDS
LABELS: tuple[str, ...] = tuple(CAUSES)

_KV_BLOCKERS = ("kv_blocks", "preemption")


@dataclass(frozen=True, kw_only=True)
class LabelRules:
    """Thresholds of the label rules (ratios 0..1)."""

    admission_share: float = 0.5  # step time with requests left waiting by kv / max_num_seqs
    busy_share: float = 0.5  # below: under-loaded
    bound_share: float = 0.5  # compute's share of step time for the compute labels
    interference_share: float = 0.3  # step time in mixed decode + prefill steps


@dataclass(frozen=True, kw_only=True)
class GroundTruth:
    """What the traces say about one window. Times in seconds, shares 0..1; NaN = no data."""

    start_s: float
    end_s: float
    label: str
    verdict_kind: str
    steps: int
    busy_share: float  # step time / window
    compute_share: float  # of step time, in steps where compute set the duration
    memory_share: float  # of step time, in steps where memory bandwidth set it
    memory_set_share: float  # of step time, the memory term of the steps memory bounded
    overhead_share: float  # of step time, the fixed per-step overhead
    allreduce_share: float  # of step time, tensor-parallel all-reduces
    mixed_share: float  # of step time, steps holding both decode sequences and prefill chunks
    prefill_token_share: float  # prefill tokens / all tokens computed
    admission_wait_share: float  # of step time, steps that left requests waiting
    blocked_by: dict[str, float] = field(default_factory=dict)  # blocker -> share of step time
    admission_limit: str  # "kv_blocks", "max_num_seqs", "token_budget" or "none"
    requests: int  # requests whose first token fell in the window
    ttft_queue_s: float  # mean arrival -> first scheduled
    ttft_prefill_s: float  # mean first scheduled -> engine first token
    decode_s: float  # mean engine first token -> finish, of requests finishing in the window
    # (none: of those whose first token fell in it)
    tpot_s: float  # mean decode time per token after the first
    cached_token_share: float  # prompt tokens served by the prefix cache / prompt tokens
    lag_mean_s: float
    lag_max_s: float
    simulator_lagged: bool  # the real-time loop fell behind (see locust_llm.report.diagnosis.lag)

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and value is not None else math.nan


def _mean(values: list[float]) -> float:
    clean = [v for v in values if math.isfinite(v)]
    return math.fsum(clean) / len(clean) if clean else math.nan


def ground_truth(
    steps: Iterable[Mapping[str, Any]],
    requests: Iterable[Mapping[str, Any]] = (),
    *,
    start_s: float = -math.inf,
    end_s: float = math.inf,
    rules: LabelRules | None = None,
) -> GroundTruth:
    """The ground truth of ``[start_s, end_s)``; an open window spans the traces."""
    rules = rules or LabelRules()
    window = [s for s in steps if start_s <= _num(s.get("start")) < end_s]
    if window and not math.isfinite(start_s):
        start_s = min(_num(s["start"]) for s in window)
    if window and not math.isfinite(end_s):
        end_s = max(_num(s["start"]) + _num(s["duration_s"]) for s in window)
    busy = math.fsum(_num(s.get("duration_s")) for s in window)

    def share(pick: Any) -> float:
        if busy <= 0:
            return math.nan
        return math.fsum(_num(s["duration_s"]) for s in window if pick(s)) / busy

    def term_share(key: str) -> float:
        return math.fsum(_num(s.get(key)) for s in window) / busy if busy > 0 else math.nan

    def memory_set_share() -> float:
        """The memory term of the steps memory bounded, over the busy time."""
        if busy <= 0:
            return math.nan
        bounded = (s for s in window if s.get("bound") == "memory")
        return math.fsum(_num(s.get("memory_s")) for s in bounded) / busy

    blocked = {
        reason: share(lambda s, r=reason: s.get("blocked_by") == r)
        for reason in ("kv_blocks", "max_num_seqs", "token_budget", "preemption", "multi_step")
    }
    blocked = {k: v for k, v in blocked.items() if v > 0}
    kv_share = sum(blocked.get(r, 0.0) for r in _KV_BLOCKERS)
    seqs_share = blocked.get("max_num_seqs", 0.0)
    budget_share = blocked.get("token_budget", 0.0)
    admission_wait = share(lambda s: bool(s.get("blocked_by")))
    limit = "none"
    if max(kv_share, seqs_share, budget_share) > 0:
        limit = max(
            (("kv_blocks", kv_share), ("max_num_seqs", seqs_share), ("token_budget", budget_share)),
            key=lambda kv: kv[1],
        )[0]
    prefill = sum(int(s.get("prefill_tokens") or 0) for s in window)
    decode = sum(int(s.get("decode_seqs") or 0) for s in window)
    span = end_s - start_s if math.isfinite(end_s - start_s) else math.nan

    reqs = list(requests)
    started = [r for r in reqs if start_s <= _num(r.get("engine_first_token")) < end_s]
    ended = [
        r
        for r in reqs
        if start_s <= _num(r.get("engine_finish")) < end_s and r.get("outcome") == "ok"
    ]
    # a lagging real-time engine can schedule a request "before" its wall-clock arrival (its
    # clock is behind by the lag): such a request did not queue, and its prefill starts on arrival
    admitted = [max(_num(r.get("admission")), _num(r.get("arrival"))) for r in started]
    queue = [a - _num(r.get("arrival")) for a, r in zip(admitted, started, strict=True)]
    pre = [_num(r.get("engine_first_token")) - a for a, r in zip(admitted, started, strict=True)]
    if not ended:
        # no request finished in the window (their decoding outlasts it): the decode time of
        # those whose first token fell in it, finished later; read as "not longer than TTFT"
        # before, which labelled a stage whose requests decoded 20x their TTFT compute-bound
        # prefill
        ended = [r for r in started if r.get("outcome") == "ok"]
    dec = [_num(r.get("engine_finish")) - _num(r.get("engine_first_token")) for r in ended]
    tpot = [
        d / (int(r["tokens_sent"]) - 1)
        for d, r in zip(dec, ended, strict=True)
        if int(r.get("tokens_sent") or 0) > 1
    ]
    prompt = sum(int(r.get("prompt_tokens") or 0) for r in started)
    cached = sum(int(r.get("cached_tokens") or 0) for r in started)
    lag_mean, lag_max, lagged = lag_summary([_num(s.get("lag_s", 0.0)) for s in window])

    truth = {
        "compute_share": share(lambda s: s.get("bound") == "compute"),
        "memory_share": share(lambda s: s.get("bound") == "memory"),
        "memory_set_share": memory_set_share(),
        "overhead_share": term_share("overhead_s"),
        "mixed_share": share(
            lambda s: int(s.get("decode_seqs") or 0) > 0 and int(s.get("prefill_tokens") or 0) > 0
        ),
        "prefill_token_share": prefill / (prefill + decode) if prefill + decode else math.nan,
        "busy_share": busy / span if span and span > 0 else math.nan,
    }
    ttft = _mean([q + p for q, p in zip(queue, pre, strict=True)])
    decode_longer = bool(_mean(dec) > ttft)
    label = _label(truth, kv_share, seqs_share, admission_wait, decode_longer, rules)
    return GroundTruth(
        start_s=start_s,
        end_s=end_s,
        label=label,
        verdict_kind=VERDICT_KINDS[label],
        steps=len(window),
        allreduce_share=term_share("allreduce_s"),
        admission_wait_share=admission_wait,
        blocked_by=blocked,
        admission_limit=limit,
        requests=len(started),
        ttft_queue_s=_mean(queue),
        ttft_prefill_s=_mean(pre),
        decode_s=_mean(dec),
        tpot_s=_mean(tpot),
        cached_token_share=cached / prompt if prompt else math.nan,
        lag_mean_s=lag_mean,
        lag_max_s=lag_max,
        simulator_lagged=lagged,
        **truth,
    )


@dataclass(frozen=True)
class TtftSplit:
    """Mean queue and prefill time of the requests that arrived in a window (seconds)."""

    queue_s: float
    prefill_s: float
    requests: int


def ttft_split_of_arrivals(
    requests: Iterable[Mapping[str, Any]], start_s: float, end_s: float
) -> TtftSplit:
    """The TTFT split of the requests that *arrived* in ``[start_s, end_s)`` and finished
    ``ok``: the same requests a report's stage row takes its TTFT from (those its client sent in
    the stage and got an answer to), where :func:`ground_truth` takes the requests whose first
    token fell in the window. The two sets differ when a queue grows: its requests get their
    first token stages later."""
    queue, pre = [], []
    for r in requests:
        arrival, first = _num(r.get("arrival")), _num(r.get("engine_first_token"))
        ok = r.get("outcome") == "ok"
        if not (ok and start_s <= arrival < end_s and math.isfinite(first)):
            continue
        admitted = max(_num(r.get("admission")), arrival)
        queue.append(admitted - arrival)
        pre.append(first - admitted)
    return TtftSplit(_mean(queue), _mean(pre), len(queue))


def _label(
    truth: Mapping[str, float],
    kv_share: float,
    seqs_share: float,
    admission_wait: float,
    decode_longer: bool,
    rules: LabelRules,
) -> str:
    """The first rule of the module docstring that holds."""
    if (kv_share + seqs_share) >= rules.admission_share and admission_wait > 0:
        return "kv_capacity_admission" if kv_share >= seqs_share else "batch_limit_admission"
    busy = truth["busy_share"]
    if not busy >= rules.busy_share:  # NaN (no steps) reads as under-loaded
        return "under_loaded"
    if truth["compute_share"] >= rules.bound_share:
        if truth["mixed_share"] >= rules.interference_share and decode_longer:
            return "prefill_interference"
        if truth["prefill_token_share"] >= 0.5:
            return "compute_bound_prefill"
        return "compute_bound_decode"
    if truth["overhead_share"] > truth["memory_set_share"]:
        return "host_overhead"
    return "bandwidth_bound_decode"
