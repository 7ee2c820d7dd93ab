"""The per-stage table: requests + telemetry + stage windows (+ roofline) -> one row per stage.

Pure (numpy/pandas in, DataFrame out, no I/O). Definitions follow ARCHITECTURE.md: a request
belongs to the stage whose window holds its start time and is left out when it started in the
stage's first ``warmup_s``; the stage's duration is its window minus the warm-up (a stage that
ends at a request count ends at its last completion); QPS = completed / duration (open loop:
the achieved rate, the window's requests served over the window stretched by the growth of
their wait, against the arrivals due in it: :func:`achieved`; ``completed_in_window`` /
``completed_after_window`` split the completions at the window's end, and ``latency_sched_*``
is latency from the scheduled send time, beside latency from the send); TPS = output tokens of
completed requests / duration (total TPS adds their input tokens); latency, TTFT and TPOT
statistics are over completed requests, percentiles exact with numpy's default linear
interpolation; error rate = failed / all, per kind too (requests the load test cancelled itself
at its end, and client-side bugs, count in neither; ``sent`` counts every record, ``cut_off``
those cancelled or timed out, ``cut_off_wait_p50_s`` how long they had been in flight, median);
goodput = completed requests meeting every SLO given / duration. Telemetry is combined as each
signal's definition says (:mod:`locust_llm.telemetry.signals`: over the GPUs of a source, then
over sources, each source at its latest sample), the same way the live web tab combines it, and
that timeline is averaged (and its peak taken) over the same window; a signal with no samples in
a window is NaN ("no data"), never 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from locust_llm.metrics import FAILURE_KINDS
from locust_llm.report.diagnosis import decompose, resources
from locust_llm.report.diagnosis.thresholds import Slo
from locust_llm.roofline.floors import GpuSpec, ModelSpec, step_cost
from locust_llm.rundir.layout import Stage, assign_stages, stage_ends
from locust_llm.telemetry.counters import SeriesLookup, series_increase, series_rate
from locust_llm.telemetry.counters import increase as counter_increase
from locust_llm.telemetry.signals import Signal, get_signal
from locust_llm.workloads.arrivals import UNSENT_REASONS

NAN = math.nan

#: Open loop: the stage's arrivals drawn, sent (records) and never sent (total, then by
#: reason: :data:`locust_llm.workloads.arrivals.UNSENT_REASONS`); drawn = sent + unsent.
ARRIVAL_COLUMNS: tuple[str, ...] = (
    "arrivals_drawn",
    "arrivals_sent",
    "arrivals_unsent",
    *(f"unsent_{reason}" for reason in UNSENT_REASONS),
)

#: The columns of stages.csv, in order (units in the names; ratios are 0..1).
COLUMNS: tuple[str, ...] = (
    "stage",
    "name",
    "kind",
    "concurrency",
    "rate",
    "start_wall_s",
    "end_wall_s",
    "duration_s",
    "requests",
    "completed",
    "failed",
    "cancelled",
    "client_errors",
    "sent",
    "cut_off",
    "cut_off_wait_p50_s",
    "qps",
    "output_tps",
    "total_tps",
    "latency_avg_s",
    "latency_p50_s",
    "latency_p90_s",
    "latency_p95_s",
    "latency_p99_s",
    "ttft_avg_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_avg_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "itl_p50_s",
    "itl_p99_s",
    "decode_stall_share",
    "first_token_step_share",
    "served_ttft_avg_s",
    "served_decode_avg_s",
    "served_tpot_avg_s",
    "error_rate",
    *(f"error_rate_{k}" for k in FAILURE_KINDS),
    "goodput_rps",
    "slo_attainment",
    "dispatch_delay_p99_s",
    "completed_in_window",
    "completed_after_window",
    "offered_rps",
    "achieved_ratio",
    "arrivals_due",
    "arrivals_served",
    *ARRIVAL_COLUMNS,
    "latency_sched_p50_s",
    "latency_sched_p99_s",
    "input_tokens_avg",
    "cached_tokens_avg",
    "output_tokens_avg",
    "input_tokens_estimated_ratio",
    "output_tokens_estimated_ratio",
    "ttft_floor_s",
    "tpot_floor_s",
    "model_bw_util",
    "gpu_util",
    "gpu_util_max",
    "gpu_mem_util",
    "gpu_mem_util_max",
    "dram_bw_util",
    "kv_cache_usage",
    "kv_cache_usage_max",
    "running",
    "running_max",
    "running_busy",
    "waiting",
    "waiting_max",
    "waiting_share",
    "waiting_capacity_max",
    "server_step_tokens",
    "preemptions",
    "sim_lag_mean_s",
    "sim_late_share",
    "server_output_tokens",
    "server_prompt_tps",
    "server_cached_tps",
    "server_output_tps",
    "busy_slots_per_decode",
    "power_w",
    "worker_cpu_max",
    "worker_cpu_max_id",
    "worker_cpu_demand_max",
    "telemetry_samples",
    "server_samples",
    *decompose.COLUMNS,
    *resources.COLUMNS,
    # the steps that reached the stage and left it for the next load (knee.stage_scaling;
    # the report fills them)
    "scaling",
    "scaling_next",
)


@dataclass(frozen=True)
class Floors:
    """What is served, for roofline floors: model shapes and device ceilings."""

    model: ModelSpec
    gpu: GpuSpec
    tp: int = 1  # tensor-parallel degree: GPUs the model is split over


def _pcts(values: np.ndarray, qs: Sequence[float]) -> list[float]:
    values = values[np.isfinite(values)]
    if values.size == 0:
        return [NAN] * len(qs)
    return [float(x) for x in np.percentile(values, qs)]


def _mean_known(values: np.ndarray) -> float:
    """Mean of the values >= 0 (-1 and NaN: unknown); NaN when none is known."""
    known = values[np.isfinite(values) & (values >= 0)]
    return float(known.mean()) if known.size else NAN


def _mean(values: np.ndarray) -> float:
    values = values[np.isfinite(values)]
    return float(values.mean()) if values.size else NAN


def _request_stats(
    req: dict[str, np.ndarray],
    duration: float,
    slo: Slo,
    open_loop: bool,
    window_end_s: float = NAN,
) -> dict:
    ok = req["ok"]
    kinds = req["error_kind"][~ok]
    # requests the load test itself stopped are neither completed nor the server's failures
    cancelled = int((kinds == "cancelled").sum())
    client_errors = int((kinds == "client_error").sum())  # our own bugs: not the server's
    n, completed = int(ok.size) - cancelled - client_errors, int(ok.sum())
    failed = n - completed
    # cut off: sent and never answered in full, because the load test stopped them (cancelled
    # at the stage's or the run's end) or the client gave up waiting (timeout); how long they
    # had been in flight (e2e_s: send -> cancel / timeout) says whether the server was slow
    cut = (kinds == "cancelled") | (kinds == "timeout")
    cut_wait = req["e2e_s"][~ok][cut]
    dur = duration if duration > 0 else NAN
    e2e, ttft, tpot = req["e2e_s"][ok], req["ttft_s"][ok], req["tpot_s"][ok]
    out_tok = req["output_tokens"][ok].astype(float)
    in_tok = req["input_tokens"][ok].astype(float)
    in_known = in_tok[in_tok >= 0]
    row: dict = {
        "requests": n,
        "completed": completed,
        "failed": failed,
        "cancelled": cancelled,
        "client_errors": client_errors,
        "sent": int(ok.size),
        "cut_off": int(cut.sum()),
        "cut_off_wait_p50_s": _pcts(cut_wait, (50,))[0],
        "qps": completed / dur,
        "output_tps": float(out_tok.sum()) / dur,
        "total_tps": float(out_tok.sum() + in_known.sum()) / dur,
        "latency_avg_s": _mean(e2e),
        "ttft_avg_s": _mean(ttft),
        "tpot_avg_s": _mean(tpot),
        "error_rate": failed / n if n else NAN,
        "input_tokens_avg": float(in_known.mean()) if in_known.size else NAN,
        # prompt tokens the server's prefix cache served (usage.prompt_tokens_details), where
        # the answers said; NaN when none did
        "cached_tokens_avg": _mean_known(req["cached_tokens"][ok]),
        "output_tokens_avg": float(out_tok.mean()) if out_tok.size else NAN,
        # share of completed requests whose counts are ours, not the server's usage
        "input_tokens_estimated_ratio": _mean(req["input_tokens_estimated"][ok]),
        "output_tokens_estimated_ratio": _mean(req["tokens_estimated"][ok]),
    }
    p50, p90, p95, p99 = _pcts(e2e, (50, 90, 95, 99))
    row.update(latency_p50_s=p50, latency_p90_s=p90, latency_p95_s=p95, latency_p99_s=p99)
    t50, t99 = _pcts(ttft, (50, 99))
    o50, o99 = _pcts(tpot, (50, 99))
    row.update(ttft_p50_s=t50, ttft_p99_s=t99, tpot_p50_s=o50, tpot_p99_s=o99)
    row["itl_p50_s"] = _pcts(req["itl_p50_s"][ok], (50,))[0]
    row["itl_p99_s"] = _pcts(req["itl_p99_s"][ok], (99,))[0]
    row["decode_stall_share"] = decode_stall_share(tpot, req["itl_p50_s"][ok], out_tok)
    row["first_token_step_share"] = first_token_step_share(
        req["start_wall_s"][ok] + ttft, row["tpot_avg_s"]
    )
    for kind in FAILURE_KINDS:
        row[f"error_rate_{kind}"] = float((kinds == kind).sum()) / n if n else NAN
    if slo.given and n:
        good = np.ones(completed, dtype=bool)
        for value, limit in ((ttft, slo.ttft_s), (tpot, slo.tpot_s), (e2e, slo.e2e_s)):
            if limit is not None:
                good &= ~(value > limit)  # NaN TPOT (one-token answer) does not break it
        row["goodput_rps"] = float(good.sum()) / dur
        row["slo_attainment"] = float(good.sum()) / n
    else:
        row["goodput_rps"] = row["slo_attainment"] = NAN
    delay = req["start_wall_s"] - req["scheduled_wall_s"]
    row["dispatch_delay_p99_s"] = _pcts(delay, (99,))[0] if open_loop else NAN
    row.update(_open_loop_stats(req, ok, dur, window_end_s, open_loop))
    return row


#: Requests with fewer output tokens than this do not count in the stall share: their median gap
#: rests on a handful of gaps.
STALL_TOKENS_MIN = 8


def decode_stall_share(tpot_s: np.ndarray, itl_p50_s: np.ndarray, tokens: np.ndarray) -> float:
    """Share of the decode time spent beyond each request's own median inter-token gap: 1 -
    sum((n - 1) x ITL P50) / sum((n - 1) x TPOT) over the requests with at least
    :data:`STALL_TOKENS_MIN` tokens. A decode step that also computes whole prompts (chunked
    prefill off, or a token budget wider than the prompts) is several decode steps long, and
    every sequence decoding beside it waits that long for its next token: those waits lift
    TPOT (the mean gap) above the median gap, which is a plain decode step. Batches that grow
    and shrink move both alike. NaN without such requests or without the median gaps (runs
    recorded before they were kept)."""
    use = np.isfinite(tpot_s) & np.isfinite(itl_p50_s) & (tokens >= STALL_TOKENS_MIN)
    gaps = tokens[use] - 1.0
    decode = float((gaps * tpot_s[use]).sum())
    if not decode > 0:
        return NAN
    return 1.0 - float((gaps * itl_p50_s[use]).sum()) / decode


#: Fewer first tokens than this in a stage: no share of steps is read from them.
FIRST_TOKENS_MIN = 10


def first_token_step_share(first_token_wall_s: np.ndarray, tpot_s: float) -> float:
    """Share of the server's steps in which some request of the stage got its first token:
    the first-token times binned by the mean TPOT (one decode step), the bins holding one
    over the bins from the first to the last. A prompt's prefill ends in the step that yields
    its first token, so this is the share of steps that finished a prompt: prompts that
    arrive together (closed-loop users finishing in one step, a burst) share steps, where
    prompts per second x TPOT counts one step each. NaN under :data:`FIRST_TOKENS_MIN`
    first tokens or without a TPOT."""
    t = first_token_wall_s[np.isfinite(first_token_wall_s)]
    if t.size < FIRST_TOKENS_MIN or not tpot_s > 0:
        return NAN
    bins = np.floor((t - t.min()) / tpot_s)
    return float(np.unique(bins).size / (bins.max() + 1))


#: Fewer first tokens than this in a stage's window: its served means are NaN (not read).
SERVED_MIN = 5


def served_phases(
    first_token_wall_s: np.ndarray,
    end_wall_s: np.ndarray,
    ttft_s: np.ndarray,
    lo: float,
    hi: float,
) -> tuple[float, float]:
    """(mean TTFT, mean decode time) of the requests the server served in ``[lo, hi)``: the
    TTFT of those whose first token fell in it, the decode time of those that finished in it
    (where none did, of those whose first token fell in it, finished later), as the simulator's
    ground truth reads a window (``locust_llm.sim.labels``). Arrays of successful requests, in
    any stage. A stage row's own means are of the requests *sent* in it; behind a queue that
    grows, those get their first tokens stages later and their TTFT grows with the queue, while
    the server's steps in the window served earlier requests. NaN where fewer than
    :data:`SERVED_MIN` first tokens fell in the window."""
    first = (first_token_wall_s >= lo) & (first_token_wall_s < hi)
    if int(first.sum()) < SERVED_MIN:
        return NAN, NAN
    decode = end_wall_s - first_token_wall_s
    ended = (end_wall_s >= lo) & (end_wall_s < hi)
    pick = ended if ended.any() else first
    return _mean(ttft_s[first]), _mean(decode[pick])


def served_tpot(end_wall_s: np.ndarray, tpot_s: np.ndarray, lo: float, hi: float) -> float:
    """Mean TPOT of the requests that finished in ``[lo, hi)`` (arrays of successful requests,
    in any stage): the pace of the steps the server ran in the window, where a stage row's own
    TPOT is of the requests sent in it, which may decode in the next stage's steps. NaN where
    fewer than :data:`SERVED_MIN` finished in it with a TPOT."""
    pick = (end_wall_s >= lo) & (end_wall_s < hi) & np.isfinite(tpot_s)
    return _mean(tpot_s[pick]) if int(pick.sum()) >= SERVED_MIN else NAN


def _open_loop_stats(
    req: dict[str, np.ndarray], ok: np.ndarray, dur: float, window_end_s: float, open_loop: bool
) -> dict:
    """Open loop: completions inside the stage window and after it (the tail), and latency
    from the scheduled send time beside latency from the send (the achieved rate:
    :func:`achieved`)."""
    out = dict.fromkeys(
        ("completed_in_window", "completed_after_window", "latency_sched_p50_s",
         "latency_sched_p99_s"),
        NAN,
    )  # fmt: skip
    if not open_loop:
        return out
    done = req["start_wall_s"][ok] + req["e2e_s"][ok]
    inside = int((done < window_end_s).sum()) if math.isfinite(window_end_s) else int(ok.sum())
    out["completed_in_window"] = inside
    out["completed_after_window"] = int(ok.sum()) - inside
    since_due = req["e2e_s"][ok] + np.nan_to_num(
        (req["start_wall_s"] - req["scheduled_wall_s"])[ok], nan=0.0
    )
    out["latency_sched_p50_s"], out["latency_sched_p99_s"] = _pcts(since_due, (50, 99))
    return out


class TelemetryIndex:
    """Telemetry split by signal and sorted by time, for fast window queries."""

    def __init__(self, telemetry: pd.DataFrame, gpu: GpuSpec | None = None) -> None:
        #: signal -> (time_s, value, source, gpu), sorted by time
        self.series: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        self._combined: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if telemetry is None or telemetry.empty:
            return
        frame = telemetry.sort_values("time_s", kind="stable")
        for signal, part in frame.groupby("signal", sort=False):
            self.series[str(signal)] = (
                part["time_s"].to_numpy(float),
                part["value"].to_numpy(float),
                part["source"].astype(str).to_numpy(),
                part["gpu"].astype(str).to_numpy(),
            )
        mem = _mem_util(frame, gpu)
        if mem is not None:
            self.series["gpu_mem_util"] = mem

    def window(self, signal: str, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        """(values, sources) of ``signal`` sampled in [lo, hi), every source and GPU apart."""
        if signal not in self.series:
            return np.empty(0), np.empty(0, dtype=object)
        t, v, src, _ = self.series[signal]
        a, b = np.searchsorted(t, lo, "left"), np.searchsorted(t, hi, "left")
        return v[a:b], src[a:b]

    def timeline(self, signal: str) -> tuple[np.ndarray, np.ndarray]:
        """(times, values) of ``signal`` combined over GPUs and sources by its definition, at
        every sample time (NaN kept: gaps); see :func:`combined_timeline`."""
        if signal not in self.series:
            return np.empty(0), np.empty(0)
        if signal not in self._combined:
            self._combined[signal] = combined_timeline(*self.series[signal], get_signal(signal))
        return self._combined[signal]

    def combined_window(self, signal: str, lo: float, hi: float) -> np.ndarray:
        """The finite values of :meth:`timeline` at times in [lo, hi)."""
        t, v = self.timeline(signal)
        a, b = np.searchsorted(t, lo, "left"), np.searchsorted(t, hi, "left")
        values = v[a:b]
        return values[np.isfinite(values)]


_GAP = -np.inf  # marks a recorded NaN (a failed scrape) so that filling forward keeps it a gap


def _reduce_rows(frame: pd.DataFrame | Any, how: str, axis: int | None = None) -> Any:
    kw = {} if axis is None else {"axis": axis}
    if how == "sum":
        return frame.sum(min_count=1, **kw)
    return getattr(frame, how)(**kw)


def combined_timeline(
    t: np.ndarray, v: np.ndarray, src: np.ndarray, gpu: np.ndarray, signal: Signal
) -> tuple[np.ndarray, np.ndarray]:
    """One value per sample time: at each time, every source's GPUs combined by the signal's
    ``over_gpus`` (server signals: their series by ``over_instances``), then the sources, each
    at its latest sample at or before that time, by ``over_instances``. A source's failed
    scrape (NaN) counts as no data from it until its next sample; nothing left is NaN."""
    if t.size == 0:
        return np.empty(0), np.empty(0)
    frame = pd.DataFrame({"t": t, "s": src, "g": gpu, "v": v})
    by_gpu = signal.over_gpus if signal.per_gpu else signal.over_instances
    per_source = _reduce_rows(frame.groupby(["t", "s"], sort=True)["v"], by_gpu)
    if per_source.index.get_level_values("s").nunique() == 1:
        return per_source.index.get_level_values("t").to_numpy(float), per_source.to_numpy(float)
    wide = per_source.fillna(_GAP).unstack("s").ffill()
    wide = wide.mask(wide == _GAP)
    values = _reduce_rows(wide, signal.over_instances, axis=1)
    return wide.index.to_numpy(float), values.to_numpy(float)


def _mem_util(frame: pd.DataFrame, gpu: GpuSpec | None) -> tuple | None:
    used = frame[frame["signal"] == "mem_used_bytes"]
    if used.empty:
        return None
    keys = ["time_s", "source", "gpu"]
    total = frame[frame["signal"] == "mem_total_bytes"][[*keys, "value"]]
    merged = used[[*keys, "value"]].merge(total, on=keys, how="left", suffixes=("", "_total"))
    denom = merged["value_total"].to_numpy(float)
    if gpu is not None and not math.isnan(gpu.memory_bytes):
        denom = np.where(np.isfinite(denom), denom, gpu.memory_bytes)
    with np.errstate(divide="ignore", invalid="ignore"):
        util = merged["value"].to_numpy(float) / denom
    util[~np.isfinite(util)] = NAN
    return (
        merged["time_s"].to_numpy(float),
        util,
        merged["source"].astype(str).to_numpy(),
        merged["gpu"].astype(str).to_numpy(),
    )


#: Server-side signals whose sample count says whether a stage's telemetry can be used.
SERVER_SAMPLE_SIGNALS: tuple[str, ...] = ("gpu_util", "kv_cache_usage", "running", "waiting")


def _telemetry_stats(tel: TelemetryIndex, lo: float, hi: float) -> dict:
    row: dict = {}

    def combined(signal: str) -> tuple[float, float]:
        values = tel.combined_window(signal, lo, hi)
        if values.size == 0:
            return NAN, NAN
        return float(values.mean()), float(values.max())

    def samples(signal: str) -> tuple[np.ndarray, np.ndarray]:
        values, sources = tel.window(signal, lo, hi)
        keep = np.isfinite(values)
        return values[keep], sources[keep]

    for signal in ("gpu_util", "gpu_mem_util", "kv_cache_usage", "running", "waiting"):
        row[signal], row[f"{signal}_max"] = combined(signal)
    # the batch while the engine had work: the samples taken between requests (none running)
    # pull the mean below every batch a step ran with
    running = tel.combined_window("running", lo, hi)
    running = running[running >= 1]
    row["running_busy"] = float(running.mean()) if running.size else NAN
    # the share of the stage's samples with a request waiting: how long a queue stood, where
    # the mean cannot tell a queue standing throughout from a burst (the verdict's admission)
    waiting = tel.combined_window("waiting", lo, hi)
    row["waiting_share"] = float((waiting >= 1).mean()) if waiting.size else NAN
    # vLLM says why requests wait: for scheduling capacity (batch slots, KV blocks and the token
    # budget alike) or deferred (remote KV, grammar, LoRA)
    row["waiting_capacity_max"] = combined("waiting_capacity")[1]
    # the server's mean tokens per engine step (vLLM's iteration tokens): a step budget's fill
    engine_steps = series_increase(tel.series, "engine_steps_total", lo, hi)
    step_tokens = series_increase(tel.series, "step_tokens_total", lo, hi)
    row["server_step_tokens"] = step_tokens / engine_steps if engine_steps > 0 else NAN
    row["dram_bw_util"] = combined("dram_bw_util")[0]
    row["power_w"] = combined("power_w")[0]
    row["preemptions"] = series_increase(tel.series, "preemptions", lo, hi)  # summed
    # a simulated server's own lag (diagnosis/lag.py): its latencies then include host delay,
    # and the verdict's confidence says so
    steps = series_increase(tel.series, "sim_steps", lo, hi)
    lag = series_increase(tel.series, "sim_lag_s", lo, hi)
    late = series_increase(tel.series, "sim_late_steps", lo, hi)
    row["sim_lag_mean_s"] = lag / steps if steps > 0 else NAN
    row["sim_late_share"] = (late if late == late else 0.0) / steps if steps > 0 else NAN
    row.update(_counter_stats(tel, lo, hi))
    cpu, cpu_src = samples("worker_cpu_util")  # the busiest worker (over_instances: max)
    row["worker_cpu_max"] = float(cpu.max()) if cpu.size else NAN
    row["worker_cpu_max_id"] = str(cpu_src[int(np.argmax(cpu))]) if cpu.size else ""
    demand, _ = samples("worker_cpu_demand")  # wanted, not only got: a shared host's share
    row["worker_cpu_demand_max"] = float(demand.max()) if demand.size else NAN
    # the best-covered server signal's samples: a verdict on 2 samples is no verdict
    row["server_samples"] = max(
        (int(np.isfinite(tel.window(s, lo, hi)[0]).sum()) for s in SERVER_SAMPLE_SIGNALS),
        default=0,
    )
    row["telemetry_samples"] = int(
        sum(np.isfinite(tel.window(s, lo, hi)[0]).sum() for s in tel.series)
    )
    return row


def _counter_stats(tel: TelemetryIndex, lo: float, hi: float) -> dict:
    """Increments of the server's cumulative counters over a stage window, each source's by the
    one counter rule (:mod:`locust_llm.telemetry.counters`: from its value at the window's start
    to its value at its end, a drop being a restart), summed over sources.

    ``server_output_tokens``: what the server counted generating, to its first scrape at or
    after the window's end (so a stage's edge is off by what finished within one scrape
    interval of it). ``server_prompt_tps``,
    ``server_cached_tps``, ``server_output_tps``: its prompt tokens (prefix-cache hits
    included, except where it counts them apart), its cache hits and the tokens it generated,
    per second over the window's scrapes. ``busy_slots_per_decode``:
    llama.cpp's average since start, turned into the window's own: the increase of average x
    decode calls over the increase of decode calls.
    """
    series = tel.series
    out = {
        "server_output_tokens": series_increase(
            series, "generation_tokens_total", lo, hi, past_end=True
        )
    }
    # what the server did per second in the window, whatever the client's completions: prompt
    # tokens (counted as each prompt's prefill ends; cache hits included, or apart where the
    # server counts them apart: llama.cpp) and the prefix cache's hits (resources.py decides)
    prompt = series_rate(series, "prompt_tokens_total", lo, hi)
    out["server_prompt_tps"], out["server_cached_tps"] = prompt, NAN
    if math.isnan(prompt):
        out["server_prompt_tps"] = series_rate(series, "prompt_tokens_computed_total", lo, hi)
    else:
        out["server_cached_tps"] = series_rate(series, "prompt_tokens_cached_total", lo, hi)
    out["server_output_tps"] = series_rate(series, "generation_tokens_total", lo, hi)
    out["busy_slots_per_decode"] = _busy_slots_per_decode(series, lo, hi)
    return out


def _busy_slots_per_decode(series: SeriesLookup, lo: float, hi: float) -> float:
    """llama.cpp's busy slots per decode call over [lo, hi]: the since-start average times the
    calls is a counter (busy slots summed over calls); its increase over the calls' increase,
    both summed over sources, from the scrapes that hold both (NaN: no calls measured)."""
    if "decode_calls_total" not in series or "busy_slots_per_decode" not in series:
        return NAN
    busy, calls = [], []
    for t, c, a in _aligned(series, "decode_calls_total", "busy_slots_per_decode"):
        busy.append(counter_increase(t, a * c, lo, hi))
        calls.append(counter_increase(t, c, lo, hi))
    known = [(b, c) for b, c in zip(busy, calls, strict=True) if c > 0 and not math.isnan(b)]
    if not known:
        return NAN
    return float(sum(b for b, _ in known) / sum(c for _, c in known))


def _aligned(
    series: SeriesLookup, first: str, second: str
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per source holding both signals: (times, first's values, second's values) at the
    scrapes that hold both."""
    t1, v1, s1, _ = series[first]
    t2, v2, s2, _ = series[second]
    out = []
    for source in sorted(set(s1) & set(s2)):
        a = pd.Series(v1[s1 == source], index=t1[s1 == source])
        b = pd.Series(v2[s2 == source], index=t2[s2 == source])
        both = pd.concat([a.groupby(level=0).last(), b.groupby(level=0).last()], axis=1).dropna()
        values = both.to_numpy(float)
        out.append((both.index.to_numpy(float), values[:, 0], values[:, 1]))
    return out


def _floor_stats(row: dict, floors: Floors | None) -> dict:
    out = {"ttft_floor_s": NAN, "tpot_floor_s": NAN, "model_bw_util": NAN}
    if floors is None:
        return out
    batch = resources.observed_batch(row)
    if not batch > 0:
        return out
    n_in = row["input_tokens_avg"] if math.isfinite(row["input_tokens_avg"]) else 0.0
    n_out = row["output_tokens_avg"] if math.isfinite(row["output_tokens_avg"]) else 0.0
    context = round(n_in + n_out / 2)
    # the resource model's step at the same batch (blended between whole batches): MBU and
    # model bandwidth utilization price the same bytes
    decode = resources.blended_step_cost(floors.model, batch, max(1, context), (), floors.tp)
    compute, memory = decode.times(floors.gpu, floors.model.weight_bits)
    out["tpot_floor_s"] = max(memory, compute)
    if row["tpot_avg_s"] > 0:
        out["model_bw_util"] = memory / row["tpot_avg_s"]
    if n_in >= 1:
        cost = step_cost(floors.model, prefill_chunks=[(round(n_in), 0)], tp=floors.tp)
        out["ttft_floor_s"] = cost.seconds(floors.gpu, floors.model.weight_bits)
    return out


REQUEST_ARRAYS: tuple[str, ...] = (
    "ok",
    "error_kind",
    "e2e_s",
    "ttft_s",
    "tpot_s",
    "itl_p50_s",
    "itl_p99_s",
    "output_tokens",
    "input_tokens",
    "cached_tokens",
    "tokens_estimated",
    "input_tokens_estimated",
    "start_wall_s",
    "scheduled_wall_s",
    "stage",  # the stage the record was sent in (its worker's view): open-loop sends counted
)


def request_arrays(requests: pd.DataFrame) -> dict[str, np.ndarray]:
    """The request columns the table needs, as numpy arrays (absent optional ones are NaN)."""
    n = len(requests)
    out: dict[str, np.ndarray] = {}
    for col in REQUEST_ARRAYS:
        if col not in requests:
            out[col] = np.full(n, NAN)
        elif col == "ok":
            out[col] = requests[col].fillna(False).to_numpy(bool)
        elif col == "error_kind":
            out[col] = requests[col].fillna("").astype(str).to_numpy(object)
        else:
            out[col] = requests[col].to_numpy(float, na_value=NAN)
    return out


def stage_table(
    requests: pd.DataFrame,
    telemetry: pd.DataFrame | None,
    stages: Sequence[Stage],
    *,
    run_end_wall_s: float = NAN,
    mode: str = "closed",
    slo: Slo = Slo(),
    floors: Floors | None = None,
    limits: resources.ServerLimits | None = None,
) -> pd.DataFrame:
    """One row per stage (columns :data:`COLUMNS`), in the stages' order; the time split
    (:mod:`~locust_llm.report.diagnosis.decompose`) and the resource model
    (:mod:`~locust_llm.report.diagnosis.resources`) included."""
    arrays = request_arrays(requests)
    ends = stage_ends(stages, run_end_wall_s)
    stage_ix = assign_stages(arrays["start_wall_s"], stages, ends)
    order = np.argsort(stage_ix, kind="stable")
    sorted_ix = stage_ix[order]
    tel = TelemetryIndex(
        telemetry if telemetry is not None else pd.DataFrame(), floors.gpu if floors else None
    )
    sent_by_stage = scheduled_sends(requests)
    rows = []
    for stage, end in zip(stages, ends, strict=True):
        a, b = (
            np.searchsorted(sorted_ix, stage.index, "left"),
            np.searchsorted(sorted_ix, stage.index, "right"),
        )
        pick = order[a:b]
        req = {k: v[pick] for k, v in arrays.items()}
        lo = stage.start_wall_s + stage.warmup_s
        done = req["start_wall_s"] + np.nan_to_num(req["e2e_s"])
        last_done = float(done.max()) if done.size else NAN
        if math.isnan(end) or (stage.target_requests and last_done < end):
            # still open, or a request-count stage: it ends with its last completion (the
            # shape notices that up to a second later; that second is not the stage's work)
            end = last_done
        row: dict = {
            "stage": stage.index,
            "name": stage.name,
            "kind": stage.kind,
            "concurrency": float(stage.concurrency) if stage.concurrency is not None else NAN,
            "rate": float(stage.rate) if stage.rate is not None else NAN,
            "start_wall_s": stage.start_wall_s,
            "end_wall_s": end,
            "duration_s": end - lo,
        }
        row.update(_request_stats(req, end - lo, slo, mode == "open", end))
        row.update(_telemetry_stats(tel, lo, end if not math.isnan(end) else lo))
        row.update(_floor_stats(row, floors))
        row.update(arrival_stats(stage, sent_by_stage))
        row["offered_rps"] = row["achieved_ratio"] = NAN
        if mode == "open":
            row.update(achieved(req, row, stage, lo, end))
        rows.append(row)
    model, gpu, tp = (floors.model, floors.gpu, floors.tp) if floors else (None, None, 1)
    ok = arrays["ok"] & np.isfinite(arrays["e2e_s"])
    finished = decompose.FinishedRequests(
        end_wall_s=arrays["start_wall_s"][ok] + arrays["e2e_s"][ok],
        stage=stage_ix[ok],
        ttft_s=arrays["ttft_s"][ok],
        e2e_s=arrays["e2e_s"][ok],
        input_tokens=np.where(
            arrays["input_tokens"] >= 0,
            arrays["input_tokens"] - np.nan_to_num(arrays["cached_tokens"]),
            np.nan,
        )[ok],
    )
    firsts = finished.end_wall_s - finished.e2e_s + finished.ttft_s
    for row in rows:
        lo, hi = row["end_wall_s"] - row["duration_s"], row["end_wall_s"]
        row["served_ttft_avg_s"], row["served_decode_avg_s"] = served_phases(
            firsts, finished.end_wall_s, finished.ttft_s, lo, hi
        )
        row["served_tpot_avg_s"] = served_tpot(finished.end_wall_s, arrays["tpot_s"][ok], lo, hi)
    decompose.decompose(
        rows, tel.series, model, gpu, tp=tp, open_loop=mode == "open", finished=finished
    )
    resources.add_resources(rows, model, gpu, limits or resources.ServerLimits(), tp=tp)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def achieved(
    req: dict[str, np.ndarray],
    row: dict[str, Any],
    stage: Stage,
    lo: float,
    end: float,
) -> dict[str, float]:
    """Open loop: the achieved rate against the arrivals due in the window.

    A request completes about one latency after it was due, so counting the window's own
    completions falls short of its arrivals by those due in its last latency even when the
    server keeps up (more, the more the latencies spread). A server that keeps up admits the
    window's arrivals as they come; one past capacity works off a queue that grows, so the
    arrivals due late wait longer for their first token than those due early (the time a
    growing batch adds to each decode step, while the stage ramps up, is no queue). So:
    served = the window's requests that completed (whenever), or that the server was
    answering when the load test cancelled them (their first token had come); stretch = how
    much longer than the window the server took to admit them: the growth of the median time
    to first token from the scheduled time (P50 of the requests due in the window's last
    quarter minus the first's, over the 3/4 of the window between them; a request cut off,
    cancelled or timed out, before its first token waited without end), none when it did not
    grow. ``qps`` =
    served / (window + stretch), ``offered_rps`` = the arrivals due / the window (run.json's
    arrivals drawn in the stage, pro rata to the window; the nominal rate x time where the
    run dir did not count them), ``achieved_ratio`` = ``qps`` / ``offered_rps``
    (``arrivals_served`` / ``arrivals_due``: a stage falls short by more than one of them
    before the ratio is judged: :func:`~locust_llm.report.diagnosis.knee.falls_short`)."""
    span = end - lo
    keys = ("qps", "offered_rps", "achieved_ratio", "arrivals_due", "arrivals_served")
    if not span > 0:
        return dict.fromkeys(keys, NAN)
    kinds = req["error_kind"]
    cut = (kinds == "cancelled") | (kinds == "timeout")
    due_at = np.where(
        np.isfinite(req["scheduled_wall_s"]), req["scheduled_wall_s"], req["start_wall_s"]
    )
    # an answer without a first-token time (not streamed) had it at its end
    first_token = np.where(
        np.isfinite(req["ttft_s"]), req["ttft_s"], np.where(req["ok"], req["e2e_s"], np.nan)
    )
    waited = req["start_wall_s"] + first_token - due_at
    waited[~np.isfinite(waited)] = np.inf  # no first token: still waiting when cut off
    counted = req["ok"] | cut  # answered, or cut off (other failures tell nothing of time)
    quarter = span / 4
    first = waited[counted & (due_at < lo + quarter)]
    last = waited[counted & (due_at >= end - quarter)]
    growth = 0.0
    if first.size and last.size:
        growth = max(float(np.median(last)) - float(np.median(first)), 0.0) / (span - quarter)
    stretch = span * (1 + growth) if math.isfinite(growth) else math.inf
    # answered, or being answered when the load test stopped it (its first token had come)
    served = float((req["ok"] | ((kinds == "cancelled") & np.isfinite(req["ttft_s"]))).sum())
    stage_span = end - stage.start_wall_s
    drawn = row["arrivals_drawn"]
    due = (
        drawn * span / stage_span if math.isfinite(drawn) and stage_span > 0 else row["rate"] * span
    )
    rate = served / stretch  # 0 when the queue grew without end
    return {
        "qps": rate,
        "offered_rps": due / span,
        "achieved_ratio": rate * span / due if due > 0 else NAN,
        "arrivals_due": due,
        "arrivals_served": rate * span,
    }


def scheduled_sends(requests: pd.DataFrame) -> dict[int, int]:
    """Open loop: records with a scheduled send time, per the stage they were sent in (the
    record's own ``stage``, as the arrival counts are kept)."""
    if "stage" not in requests or "scheduled_wall_s" not in requests:
        return {}
    sent = requests[requests["scheduled_wall_s"].notna()]
    return {int(k): int(v) for k, v in sent.groupby("stage").size().items()}


def arrival_stats(stage: Stage, sent_by_stage: dict[int, int]) -> dict[str, float]:
    """Open loop: the stage's arrivals (run.json: drawn, and unsent by reason) beside the ones
    sent (records); NaN when run.json did not count them (closed loop, older run dirs)."""
    if stage.arrivals_drawn is None:
        return dict.fromkeys(ARRIVAL_COLUMNS, NAN)
    out = {
        "arrivals_drawn": float(stage.arrivals_drawn),
        "arrivals_sent": float(sent_by_stage.get(stage.index, 0)),
    }
    for reason in UNSENT_REASONS:
        out[f"unsent_{reason}"] = float(stage.arrivals_unsent.get(reason, 0))
    out["arrivals_unsent"] = sum(out[f"unsent_{r}"] for r in UNSENT_REASONS)
    return out
