"""Time decomposition per stage: TTFT = queue + prefill, E2E = TTFT + decode.

Pure (numpy in, dicts out). Two sources, best first:

1. ``server``: the server's own per-request phase histograms (vLLM's
   ``vllm:request_queue_time_seconds`` / ``..._prefill_time_...`` / ``..._decode_time_...``, TGI's
   ``tgi_request_queue_duration``), recorded as the cumulative signals ``phase_queue_s``,
   ``phase_prefill_s``, ``phase_decode_s`` and ``phase_requests``
   (:mod:`locust_llm.telemetry.signals`).
   The server adds a request to those sums when it finishes (vLLM), often stages after the
   client sent it, so a stage window's increase would mix stages. Instead each scrape
   interval's increase is shared among the stages in proportion to the client's successful
   requests that ended in that interval (:func:`attributed_phases`): a stage's mean queue time
   is its shares of ``phase_queue_s`` over its shares of ``phase_requests``, the same for
   prefill and decode, whenever the stage's requests finish. Without client records that end
   between scrapes, the increase over the stage window itself (each source's, summed, by the
   one counter rule of :mod:`locust_llm.telemetry.counters`: :func:`server_phases`). Queue
   and prefill are the server's own means; the rest of the client's mean TTFT is
   ``outside_avg_s``, time the engine did not stamp (its front end's HTTP, chat template and
   tokenizing, transit, the client's read; judged against a real vLLM's histograms in
   tests/test_vllm_regimes.py); where queue + prefill pass the client's mean (the sums are
   shared among the stages' requests, so a stage can carry time of requests batched with
   another stage's) that is NaN and ``split_excess_s`` says by how much. A server with a
   queue histogram but no prefill one (TGI) gives prefill = client TTFT - server queue
   (nothing outside; ``split_excess_s`` where its queue passes TTFT).
2. ``model``: prefill predicted by the roofline for one prompt of the stage's mean length in a
   step shared with the stage's observed decode batch (``step_cost(decode_contexts=[context] *
   (batch - 1), prefill_chunks=[(input, 0)])``), divided by an efficiency calibrated on the
   lowest-load stage (predicted / observed mean TTFT there less the wait for the step under
   way, or less Little's law's queue when the waiting gauge shows one there; clamped to
   0.05..1). Without a roofline (no model/GPU given) the lowest-load stage's mean TTFT per
   input token is the prefill rate. Queue = mean TTFT - prefill (>= 0). A simulated server
   that lagged (``sim_lag_mean_s``, its mean step lag over the window) handed first tokens
   out late by that much: it is ``outside_avg_s``, not prefill.

2a. ``server prefill clock`` (before the model, for a server that keeps a prefill clock but no
   phase histograms: llama.cpp's ``prompt_seconds_total``): its increase over the stage window
   per request of the stage is the prefill, the queue the rest of TTFT.

One queue estimate per stage, from the server's own counters where it exports them (the
histograms, the prefill clock), the model otherwise. Little's law on the waiting gauge, mean
waiting / completions per second (``queue_little_s``), stays in the stage table as a
cross-check, not in the split: on a real llama.cpp server (``requests_deferred``) it fell a
third short of the queue the server's prefill clock leaves (tests/test_llamacpp_prefix_cache.py).
Decode = mean E2E - mean TTFT (client side).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from locust_llm.report.diagnosis.thresholds import DEFAULT_THRESHOLDS
from locust_llm.report.fmt import column as _f
from locust_llm.roofline.floors import GpuSpec, ModelSpec, step_cost
from locust_llm.telemetry.counters import SeriesLookup, counter_steps, series_increase

NAN = math.nan

#: The columns this module adds to the stage table.
COLUMNS: tuple[str, ...] = (
    "queue_avg_s",
    "prefill_avg_s",
    "outside_avg_s",
    "split_excess_s",
    "decode_avg_s",
    "ttft_split_source",
    "phase_requests",
    "queue_little_s",
    "prefill_efficiency",
)

PHASE_SIGNALS: tuple[str, ...] = ("phase_queue_s", "phase_prefill_s", "phase_decode_s")
MIN_EFFICIENCY, MAX_EFFICIENCY = 0.05, 1.0
#: Mean waiting requests below ``no_queue_waiting``: the gauge says nothing queues. The
#: attributed server phases stand for a stage when they cover at least ``min_attributed_share``
#: of its completed requests (the rest ended after the last scrape, or in a gap); else the
#: window's.
_TH = DEFAULT_THRESHOLDS


@dataclass(frozen=True)
class ServerPhases:
    """Mean phase times of the requests that finished in a window, from the server's sums."""

    queue_s: float
    prefill_s: float
    decode_s: float
    requests: float


def server_phases(series: SeriesLookup, lo: float, hi: float) -> ServerPhases | None:
    """The server's mean phase times over [lo, hi); None without phase histograms there."""
    count = series_increase(series, "phase_requests", lo, hi)
    if not count > 0:
        return None
    queue, prefill, decode = (series_increase(series, s, lo, hi) / count for s in PHASE_SIGNALS)
    if math.isnan(queue):
        return None
    return ServerPhases(queue, prefill, decode, count)


@dataclass(frozen=True)
class FinishedRequests:
    """The client's successful requests: when each ended (wall clock, s) and the stage row it
    belongs to (-1: none, e.g. sent in a warm-up), in any order."""

    end_wall_s: np.ndarray
    stage: np.ndarray
    ttft_s: np.ndarray  # the client's TTFT of each (NaN: not known)
    e2e_s: np.ndarray
    input_tokens: np.ndarray | None = None  # each one's prompt tokens computed (NaN: unknown)


def _at_times(series: SeriesLookup, signal: str, source: str, times: np.ndarray) -> np.ndarray:
    """``signal``'s value of ``source`` at each of ``times`` (the same scrapes), NaN where the
    scrape has none."""
    out = np.full(times.size, NAN)
    if signal not in series:
        return out
    t, v, src, _ = series[signal]
    pick = src == source
    ts, vs = t[pick], v[pick]
    at = np.searchsorted(ts, times)
    hit = (at < ts.size) & (ts[np.minimum(at, ts.size - 1)] == times)
    out[hit] = vs[at[hit]]
    return out


def _weights_or_count(weights: np.ndarray) -> np.ndarray:
    """Shares summing to 1: by ``weights`` where they are all known and not all zero, else
    equal."""
    if np.isfinite(weights).all():
        w = np.maximum(weights, 0.0)
        if w.sum() > 0:
            return w / w.sum()
    return np.full(weights.size, 1.0 / weights.size)


def _per_request(increase: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """An interval's (queue, prefill, decode) increase split among the requests counted in it
    (``weights`` per request: client TTFT, prompt tokens computed, decode time): prefill by
    prompt tokens (equal when not known), decode by decode time, and queue by what each one's
    TTFT leaves after its prefill share (so a quick request counted beside long-queued ones
    takes its own few milliseconds of queue, not a share of theirs)."""
    queue, prefill, decode = increase
    out = np.zeros((weights.shape[0], 3))
    if math.isfinite(prefill):
        out[:, 1] = prefill * _weights_or_count(weights[:, 1])
    out[:, 2] = decode * _weights_or_count(weights[:, 2])
    waited = weights[:, 0] - out[:, 1]
    out[:, 0] = queue * _weights_or_count(np.maximum(waited, 0.0))
    return out


def attributed_phases(series: SeriesLookup, finished: FinishedRequests) -> dict[int, ServerPhases]:
    """Each stage's mean phase times from the server's sums, attributed by the client.

    The server adds a request to its phase sums at one event of its life: vLLM when it
    finishes, TGI its queue time when it leaves the queue. Between two scrapes the sums grow by
    what the requests counted in between spent; the client saw those requests end (or get
    their first token), and knows each one's stage. Of those two events the one whose counts per
    scrape interval match the server's request count increases best is taken
    (:func:`_counting_event`). Each interval's increase (queue, prefill and decode seconds, and
    requests) is then split among the client's requests counted in it (:func:`_per_request`:
    prefill by prompt tokens, decode by decode time, queue by what each client TTFT leaves
    after its prefill share), and a stage's means are its requests' parts over its share of the
    count. Unlike a stage window's increase, this counts the requests sent in the stage, however
    long after the stage they finish. Intervals in which the client saw nothing are left out
    (another client's traffic), and so are failed scrapes (the interval runs on to the next
    good one) and the time before the first scrape."""
    if "phase_requests" not in series or finished.end_wall_s.size == 0:
        return {}
    n_stages = int(finished.stage.max()) + 2
    acc = np.zeros((n_stages, 4))  # per stage (index + 1): queue, prefill, decode, requests
    covered = np.zeros((n_stages, 3))  # the requests behind each phase's sum (finite steps)
    prompts = finished.input_tokens
    if prompts is None:
        prompts = np.full(finished.end_wall_s.size, np.nan)
    weights = np.column_stack((finished.ttft_s, prompts, finished.e2e_s - finished.ttft_s))
    t, v, src, _ = series["phase_requests"]
    names = (*PHASE_SIGNALS, "phase_requests")
    for source in np.unique(src):
        times = t[(src == source) & np.isfinite(v)]  # a failed scrape: the interval runs on
        if times.size < 2:
            continue
        values = np.column_stack([_at_times(series, n, source, times) for n in names])
        step = counter_steps(values)  # a restart: the counters start from zero again
        when = _counting_event(finished, times, step[:, 3])
        order = np.argsort(when, kind="stable")
        events, stages = when[order], finished.stage[order].astype(np.int64) + 1
        w = weights[order]
        first = np.searchsorted(events, times[:-1], "right")
        last = np.searchsorted(events, times[1:], "right")
        for i in np.flatnonzero((last > first) & (step[:, 3] > 0)):
            held, part = stages[first[i] : last[i]], w[first[i] : last[i]]
            counted = np.bincount(held, minlength=n_stages) / held.size * step[i, 3]
            acc[:, 3] += counted
            each = _per_request(step[i, :3], part)
            for k in range(3):  # a phase this source does not export (TGI: prefill) stays 0
                if math.isfinite(step[i, k]):
                    acc[:, k] += np.bincount(held, weights=each[:, k], minlength=n_stages)
                    covered[:, k] += counted
    out = {}
    for index in range(n_stages - 1):
        count = acc[index + 1, 3]
        if not (count > 0 and covered[index + 1, 0] > 0):
            continue
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.where(covered[index + 1] > 0, acc[index + 1, :3] / covered[index + 1], NAN)
        out[index] = ServerPhases(float(means[0]), float(means[1]), float(means[2]), count)
    return out


def _counting_event(
    finished: FinishedRequests, times: np.ndarray, counted: np.ndarray
) -> np.ndarray:
    """Per request, the time of the event the server counts it at: its end, or its first token
    (its end less its decode time), whichever's counts per scrape interval are closer to the
    server's increases ``counted`` (ends on a tie)."""
    ends = finished.end_wall_s
    firsts = ends - (finished.e2e_s - finished.ttft_s)
    best, best_err = ends, math.inf
    for when in (ends, firsts):
        if not np.isfinite(when).all():
            continue
        seen = np.diff(np.searchsorted(np.sort(when), times, "right"))
        err = float(np.abs(seen - counted).sum())
        if err < best_err:
            best, best_err = when, err
    return best


def _load(row: Mapping[str, Any]) -> float:
    c = _f(row, "concurrency")
    return c if not math.isnan(c) else _f(row, "rate")


def predicted_prefill_s(
    model: ModelSpec,
    gpu: GpuSpec,
    input_tokens: float,
    output_tokens: float,
    batch: float,
    tp: int = 1,
    cached_tokens: float = 0.0,
) -> float:
    """Roofline time of the step that prefills one prompt of ``input_tokens`` beside
    ``batch - 1`` decoding sequences at the stage's mean context (efficiency 1), on one of
    ``tp`` tensor-parallel GPUs. The first ``cached_tokens`` of the prompt come from the prefix
    cache: only the rest is computed (attending to the cached part)."""
    cached = min(max(0.0, cached_tokens), input_tokens - 1) if math.isfinite(cached_tokens) else 0
    n_new = max(1, round(input_tokens - cached))
    context = round(input_tokens + (output_tokens if math.isfinite(output_tokens) else 0) / 2)
    others = max(0, round(batch) - 1) if math.isfinite(batch) else 0
    cost = step_cost(model, [max(1, context)] * others, [(n_new, round(cached))], tp=tp)
    return cost.seconds(gpu, model.weight_bits)


def computed_prompt_tokens(row: Mapping[str, Any]) -> float:
    """Mean prompt tokens the server had to compute: the prompt less what its prefix cache
    served (``cached_tokens_avg``, when the answers said)."""
    n_in, cached = _f(row, "input_tokens_avg"), _f(row, "cached_tokens_avg")
    if math.isfinite(n_in) and math.isfinite(cached) and 0 < cached < n_in:
        return n_in - cached
    return n_in


def step_wait_s(row: Mapping[str, Any], open_loop: bool) -> float:
    """Mean wait for the step under way before a request can join the batch: none with an
    empty batch; a whole decode step in closed loop (a user sends right after its previous
    answer's last step ended, so the next step has started), half a step for open-loop
    arrivals (uniform in the step)."""
    tpot, batch = _f(row, "tpot_avg_s"), _batch(row)
    if not (tpot > 0 and batch > 0):
        return 0.0
    others = min(1.0, max(0.0, batch - 1.0))
    return tpot * others * (0.5 if open_loop else 1.0)


def _batch(row: Mapping[str, Any]) -> float:
    running = _f(row, "running")
    return running if running > 0 else _f(row, "concurrency")


@dataclass(frozen=True)
class PrefillModel:
    """How the model predicts a stage's prefill time."""

    model: ModelSpec | None
    gpu: GpuSpec | None
    tp: int
    open_loop: bool
    efficiency: float = NAN  # roofline / observed at the lowest-load stage
    s_per_token: float = NAN  # without a roofline: the lowest-load stage's TTFT per token

    def prefill_s(self, row: Mapping[str, Any]) -> float:
        n_in = _f(row, "input_tokens_avg")
        if not n_in >= 1:
            return NAN
        if self.model is not None and self.gpu is not None and not math.isnan(self.efficiency):
            predicted = predicted_prefill_s(
                self.model, self.gpu, n_in, _f(row, "output_tokens_avg"), _batch(row), self.tp,
                cached_tokens=_cached(row),
            )  # fmt: skip
            return predicted / self.efficiency
        return self.s_per_token * computed_prompt_tokens(row)


def calibrate(
    rows: Sequence[Mapping[str, Any]],
    model: ModelSpec | None,
    gpu: GpuSpec | None,
    tp: int = 1,
    open_loop: bool = False,
) -> PrefillModel:
    """The prefill model, its efficiency set on the lowest-load stage (TTFT there = the wait
    for the step under way + prefill)."""
    lowest = _calibration_row(rows)
    base = PrefillModel(model, gpu, tp, open_loop)
    if lowest is None:
        return base
    n_in = _f(lowest, "input_tokens_avg")
    observed = _f(lowest, "ttft_avg_s") - calibration_queue_s(lowest, open_loop)
    if not (n_in >= 1 and observed > 0):
        return base
    if model is not None and gpu is not None:
        predicted = predicted_prefill_s(
            model, gpu, n_in, _f(lowest, "output_tokens_avg"), _batch(lowest), tp,
            cached_tokens=_cached(lowest),
        )  # fmt: skip
        eff = min(MAX_EFFICIENCY, max(MIN_EFFICIENCY, predicted / observed))
        return PrefillModel(model, gpu, tp, open_loop, efficiency=eff)
    per_token = observed / computed_prompt_tokens(lowest)
    return PrefillModel(model, gpu, tp, open_loop, s_per_token=per_token)


def calibration_queue_s(row: Mapping[str, Any], open_loop: bool) -> float:
    """The part of the calibration stage's TTFT that is not prefill: the wait for the step
    under way, or, when the waiting gauge says requests queue there too (a KV budget or batch
    limit that binds even at the lowest load), Little's law on that gauge (mean waiting /
    completions per second), whichever is longer."""
    wait = step_wait_s(row, open_loop)
    waiting, qps = _f(row, "waiting"), _f(row, "qps")
    if waiting >= _TH.no_queue_waiting and qps > 0:
        return max(wait, waiting / qps)
    return wait


def _cached(row: Mapping[str, Any]) -> float:
    cached = _f(row, "cached_tokens_avg")
    return cached if math.isfinite(cached) else 0.0


def decompose(
    rows: Sequence[dict[str, Any]],
    series: SeriesLookup,
    model: ModelSpec | None = None,
    gpu: GpuSpec | None = None,
    *,
    tp: int = 1,
    open_loop: bool = False,
    finished: FinishedRequests | None = None,
) -> None:
    """Add :data:`COLUMNS` to every stage row in place (see the module docstring)."""
    prefill_model = calibrate(rows, model, gpu, tp, open_loop)
    attributed = attributed_phases(series, finished) if finished is not None else {}
    for row in rows:
        _decompose_row(row, series, prefill_model, attributed)


def _calibration_row(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    usable = [
        r
        for r in rows
        if r.get("kind") != "soak" and _f(r, "ttft_avg_s") > 0 and not math.isnan(_load(r))
    ]
    return min(usable, key=_load) if usable else None


def _decompose_row(
    row: dict[str, Any],
    series: SeriesLookup,
    prefill_model: PrefillModel,
    attributed: Mapping[int, ServerPhases],
) -> None:
    ttft, e2e = _f(row, "ttft_avg_s"), _f(row, "latency_avg_s")
    qps, waiting = _f(row, "qps"), _f(row, "waiting")
    row["decode_avg_s"] = e2e - ttft
    row["queue_little_s"] = waiting / qps if qps > 0 else NAN
    row["prefill_efficiency"] = prefill_model.efficiency
    hi = _f(row, "end_wall_s")
    lo = hi - _f(row, "duration_s")  # the window after the warm-up, as the telemetry columns
    phases = attributed.get(int(row["stage"])) if "stage" in row else None
    enough = _TH.min_attributed_share * _f(row, "completed")
    if phases is not None and not phases.requests >= enough:
        phases = None  # most of the stage's requests finished out of the scrapes' reach
    if phases is None and not math.isnan(lo + hi):
        phases = server_phases(series, lo, hi)
    if phases is not None:
        queue, prefill = phases.queue_s, phases.prefill_s
        if math.isnan(prefill):  # a queue histogram only (TGI): prefill is the rest of TTFT
            prefill = max(0.0, ttft - queue)
            left = ttft - queue  # nothing is outside; what the queue leaves of TTFT
        else:
            # the server's own means, as it stamped them; what the client waited beyond them
            # (the front end's HTTP, template and tokenizing, transit, the client's read) is
            # outside the engine (a real vLLM on a busy 2-core host: 245 ms of 1.18 s at 8
            # users, 2-30 ms alone). Spreading it over queue and prefill in their ratio put
            # the queue 18% of TTFT above the engine's (tests/test_vllm_regimes.py)
            left = ttft - queue - prefill
        # each request's client TTFT holds its server phases, so no time outside the engine
        # is negative; the server's means can still pass the client's mean TTFT: its sums grow
        # as requests finish and are shared among the stages' requests (by prompt tokens in a
        # scrape interval, or all of a stage window's), so a stage can carry time of requests
        # batched with another stage's. Say by how much instead of showing a negative time
        # (less than half a millisecond is 0 ms outside)
        past = left <= -_TH.split_excess_floor_s
        excess = -left if past else NAN
        outside = NAN if math.isnan(phases.prefill_s) or past else max(left, 0.0)
        row.update(
            queue_avg_s=queue,
            prefill_avg_s=prefill,
            outside_avg_s=outside,
            split_excess_s=excess,
            ttft_split_source="server",
            phase_requests=phases.requests,
        )
        if not math.isnan(phases.decode_s):
            row["decode_avg_s"] = phases.decode_s
        return
    clock = _prefill_clock_s(series, row, lo, hi)
    if not math.isnan(clock + ttft):  # the server's own prefill clock (llama.cpp)
        prefill = min(clock, ttft)
        row.update(
            queue_avg_s=ttft - prefill, prefill_avg_s=prefill, outside_avg_s=NAN,
            split_excess_s=NAN, ttft_split_source="server prefill clock", phase_requests=NAN,
        )  # fmt: skip
        return
    prefill = prefill_model.prefill_s(row)
    if math.isnan(prefill) or math.isnan(ttft):
        row.update(
            queue_avg_s=NAN, prefill_avg_s=NAN, outside_avg_s=NAN, split_excess_s=NAN,
            ttft_split_source="", phase_requests=NAN,
        )  # fmt: skip
        return
    wait = step_wait_s(row, prefill_model.open_loop)
    queue = max(wait, ttft - prefill)
    if waiting < _TH.no_queue_waiting:  # the waiting gauge says no queue: only the step under way
        queue = min(queue, wait)
    queue = min(queue, ttft)
    # a simulated server that fell behind handed each first token out late by its step's lag:
    # host delay, not prefill; outside the engine, as the server's own split books it
    lag = _f(row, "sim_lag_mean_s")
    outside = min(lag, ttft - queue) if lag > 0 else NAN
    row.update(
        queue_avg_s=queue,
        prefill_avg_s=ttft - queue - (outside if outside > 0 else 0.0),
        outside_avg_s=outside,  # else NaN: the model's prefill is the rest of TTFT
        split_excess_s=NAN,
        ttft_split_source="model",
        phase_requests=NAN,
    )


def _prefill_clock_s(series: SeriesLookup, row: Mapping[str, Any], lo: float, hi: float) -> float:
    """Mean server seconds of prompt computation per request of the stage, from a prefill
    clock the server keeps (llama.cpp's ``prompt_seconds_total``) over the stage window; NaN
    without one or without requests."""
    requests = _f(row, "requests")
    if math.isnan(lo + hi) or not requests > 0:
        return NAN
    seconds = series_increase(series, "prompt_seconds_total", lo, hi)
    return seconds / requests if seconds > 0 else NAN


def split_line(row: Mapping[str, Any]) -> str:
    """``TTFT = x ms queue + y ms prefill [+ z ms outside the engine] (source: server | model)``,
    or "" without a split."""
    source = row.get("ttft_split_source") or ""
    queue, prefill = _f(row, "queue_avg_s"), _f(row, "prefill_avg_s")
    if not source or math.isnan(queue + prefill):
        return ""
    text = f"TTFT = {queue * 1e3:.0f} ms queue + {prefill * 1e3:.0f} ms prefill"
    outside = _f(row, "outside_avg_s")
    if not math.isnan(outside):
        text += f" + {outside * 1e3:.0f} ms outside the engine"
    text += f" (source: {source})"
    excess = _f(row, "split_excess_s")
    if excess > 0:
        text += (
            f"; the server's means pass the stage's mean TTFT by {excess * 1e3:.0f} ms: its "
            "sums grow as requests finish and are shared among the stages' requests, so this "
            "stage carries time of requests batched with another stage's"
        )
    return text
