"""Canonical telemetry signals: one definition each, with its unit and how values combine.

Pure (no I/O). Every part that reads telemetry takes its signal names, units and reductions from
here: the scraper and the Prometheus reader (through the vocabularies in
:mod:`locust_llm.telemetry.vocabularies`, which map exposed metric names onto these signals), the
report's
stage table and plots (:mod:`locust_llm.report.tables`) and the live web tab
(:mod:`locust_llm.webui.data`). So with several GPUs or several servers, the tab and the report
give the same ``running``, ``gpu_util`` and so on.

A value is combined in two steps, each with its own reduction (``sum``, ``mean``, ``max`` or
``min``; NaN values are left out, and nothing left is NaN, never 0):

1. ``over_gpus``: the GPUs of one source at one instant (per-GPU signals only);
2. ``over_instances``: several sources at one instant (servers, exporters, Locust workers), and
   the parallel series of one metric inside one scrape (a vLLM data-parallel ``engine`` label,
   SGLang ranks), which are instances of the server too.

==================  ========  ====  =========  ==========  =====================================
signal              unit      GPU   over GPUs  over inst.  meaning
==================  ========  ====  =========  ==========  =====================================
``gpu_util``        ratio     yes   mean       mean        GPU busy ratio 0..1
``mem_used_bytes``  bytes     yes   sum        sum         GPU memory used
``mem_total_bytes`` bytes     yes   sum        sum         GPU memory total
``gpu_mem_util``    ratio     yes   max        max         used / total of the fullest GPU
                                                           (the report derives it per sample)
``dram_bw_util``    ratio     yes   mean       mean        DRAM bandwidth utilization 0..1
``power_w``         watts     yes   sum        sum         GPU power draw
``kv_cache_usage``  ratio     no    -          mean        server KV-cache usage 0..1
``running``         requests  no    -          sum         requests in the server's batch
``waiting``         requests  no    -          sum         requests queued in the server
``preemptions``     count     no    -          sum         cumulative; windows use its increase
``prefix_cache_``   tokens    no    -          sum         cumulative prompt tokens looked up in
``queries``                                                the prefix cache (vLLM); its hits are
                                                           ``prompt_tokens_cached_total``
``host_cpu_util``   ratio     no    -          mean        CPU ratio of the exporter's host
``generation_``     tokens    no    -          sum         cumulative server counters (issue
``tokens_total``,                                          16): output tokens, prompt tokens
``prompt_tokens_*``                                        (``_total`` with cache hits,
``_total``,                                                ``_computed_total`` without: llama.cpp,
``decode_calls_``                                          ``_cached_total`` the hits), decode
``total``                                                  calls and ``prompt_seconds_total``
                                                           (llama.cpp: its prefill seconds)
``busy_slots_per_`` slots     no    -          mean        llama.cpp's busy slots per decode call,
``decode``                                                 average since its start
``worker_cpu_util`` ratio     no    -          max         a Locust worker's CPU ratio (source =
                                                           worker id); the busiest one counts
``worker_cpu_``     ratio     no    -          max         a worker's CPU demand: running or
``demand``                                                 waiting for a core, / wall time
``scrape_up``       ratio     no    -          min         1 scraped and parsed, 0 failed
``phase_queue_s``   seconds   no    -          sum         cumulative: summed per-request queue
                                                           time (arrival -> first scheduled) of
                                                           finished requests
``phase_prefill_s`` seconds   no    -          sum         cumulative: summed prefill time (first
                                                           scheduled -> first token)
``phase_decode_s``  seconds   no    -          sum         cumulative: summed decode time (first
                                                           token -> last token)
``phase_requests``  count     no    -          sum         cumulative: requests those sums cover
==================  ========  ====  =========  ==========  =====================================

Adding a signal is one :func:`register_signal` call; a vocabulary then maps metrics onto it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from locust_llm.registry import Registry

Reduction = Literal["sum", "mean", "max", "min"]
REDUCTIONS: tuple[str, ...] = ("sum", "mean", "max", "min")

#: Signal recorded by the scraper per source and scrape: 1 = scraped and parsed, 0 = failed.
#: From a Prometheus server it is that server's own ``up`` series for the instance.
SCRAPE_UP = "scrape_up"


@dataclass(frozen=True, kw_only=True)
class Signal:
    """One canonical signal (values in ``unit``: ratios 0..1, bytes, watts, counts)."""

    name: str
    unit: str
    doc: str
    per_gpu: bool = False  # keyed by the ``gpu`` label
    over_gpus: Reduction = "mean"  # the GPUs of one source at one instant
    over_instances: Reduction = "mean"  # several sources (or parallel series) at one instant
    cumulative: bool = False  # a counter: a window's value is its increase
    derived: bool = False  # computed by the report from other signals, never recorded

    def __post_init__(self) -> None:
        for how in (self.over_gpus, self.over_instances):
            if how not in REDUCTIONS:
                raise ValueError(f"signal {self.name}: reduction {how!r} not in {REDUCTIONS}")


_REGISTRY: Registry[Signal] = Registry("signal")


def register_signal(signal: Signal) -> Signal:
    """Add ``signal`` (a name is registered once); returns it."""
    return _REGISTRY.register(signal.name, signal)


def registered_signals() -> tuple[Signal, ...]:
    """Every canonical signal, in registration order."""
    return tuple(_REGISTRY)


def get_signal(name: str) -> Signal:
    """The signal registered as ``name``; a KeyError listing the registered names otherwise."""
    return _REGISTRY.get(name)


def signal_docs() -> dict[str, str]:
    """Recorded signal name -> "meaning (unit)": the names telemetry.parquet may hold."""
    return {s.name: f"{s.doc} ({s.unit})" for s in _REGISTRY if not s.derived}


def reduce_values(how: Reduction, values: Iterable[float]) -> float:
    """``values`` combined by ``how``, NaN left out; NaN when no finite value is left."""
    finite = [float(v) for v in values if math.isfinite(v)]
    if not finite:
        return math.nan
    if how == "sum":
        return math.fsum(finite)
    if how == "mean":
        return math.fsum(finite) / len(finite)
    return max(finite) if how == "max" else min(finite)


def combine(name: str, values: Mapping[tuple[str, str], float]) -> float:
    """One value of signal ``name`` from values keyed ``(source, gpu)`` at one instant: over the
    GPUs of each source, then over the sources (see the module docstring); NaN when none."""
    signal = get_signal(name)
    by_source: dict[str, list[float]] = defaultdict(list)
    for (source, _gpu), value in values.items():
        by_source[source].append(value)
    if signal.per_gpu:
        per_source = [reduce_values(signal.over_gpus, v) for v in by_source.values()]
    else:
        per_source = [reduce_values(signal.over_instances, v) for v in by_source.values()]
    return reduce_values(signal.over_instances, per_source)


def _builtin(name: str, unit: str, doc: str, **how: object) -> None:
    register_signal(Signal(name=name, unit=unit, doc=doc, **how))  # type: ignore[arg-type]


_GPU_SUM = {"per_gpu": True, "over_gpus": "sum", "over_instances": "sum"}
_GPU_MEAN = {"per_gpu": True, "over_gpus": "mean", "over_instances": "mean"}
_builtin("gpu_util", "ratio", "GPU busy ratio 0..1", **_GPU_MEAN)
_builtin("mem_used_bytes", "bytes", "GPU memory used", **_GPU_SUM)
_builtin("mem_total_bytes", "bytes", "GPU memory total", **_GPU_SUM)
_builtin(
    "gpu_mem_util", "ratio", "GPU memory used / total of the fullest GPU (derived by the report)",
    per_gpu=True, over_gpus="max", over_instances="max", derived=True,
)  # fmt: skip
_builtin(
    "dram_bw_util", "ratio",
    "DRAM bandwidth utilization ratio 0..1 (GPM / DCGM_FI_PROF_DRAM_ACTIVE)", **_GPU_MEAN,
)  # fmt: skip
_builtin("power_w", "watts", "GPU power draw", **_GPU_SUM)
_builtin("kv_cache_usage", "ratio", "server KV-cache usage ratio 0..1", over_instances="mean")
_builtin("running", "requests", "requests running in the server's batch", over_instances="sum")
_builtin("waiting", "requests", "requests queued in the server", over_instances="sum")
_builtin(
    "preemptions", "count", "server preemptions, cumulative count",
    over_instances="sum", cumulative=True,
)  # fmt: skip
_builtin(
    "prefix_cache_queries", "tokens",
    "server prompt tokens looked up in the prefix cache, cumulative",
    over_instances="sum", cumulative=True,
)  # fmt: skip
_builtin(
    "waiting_capacity", "requests", "requests queued for scheduling capacity (vLLM's reason)",
    over_instances="sum",
)  # fmt: skip
_builtin(
    "waiting_deferred", "requests",
    "requests deferred by transient constraints: LoRA budget, KV transfer (vLLM's reason)",
    over_instances="sum",
)  # fmt: skip
_FINISHED_BY = (
    ("stop", "a stop token or string"),
    ("length", "max_tokens or the context"),
    ("abort", "aborted: the client went away"),
    ("error", "an engine error"),
)
for _reason, _why in _FINISHED_BY:
    _builtin(
        f"finished_{_reason}", "count", f"server: requests finished by {_why}, cumulative",
        over_instances="sum", cumulative=True,
    )  # fmt: skip
_builtin(
    "server_flops_total", "flop", "server's own estimate of the FLOPs it ran, cumulative",
    over_instances="sum", cumulative=True,
)  # fmt: skip
_builtin(
    "server_read_bytes_total", "bytes",
    "server's own estimate of the bytes it read from memory, cumulative",
    over_instances="sum", cumulative=True,
)  # fmt: skip
_builtin("host_cpu_util", "ratio", "CPU utilization ratio 0..1 of the exporter's host")
# servers' token counters (issue 16): prompt tokens with and without cache hits are apart because
# llama.cpp counts only the ones it computed; busy slots per decode is llama.cpp's since-start mean
_COUNTER = {"over_instances": "sum", "cumulative": True}
_builtin("generation_tokens_total", "tokens", "server output tokens generated", **_COUNTER)
_builtin("prompt_tokens_total", "tokens", "server prompt tokens, cache hits included", **_COUNTER)
_builtin(
    "prompt_tokens_computed_total", "tokens", "server prompt tokens computed, cache hits apart",
    **_COUNTER,
)  # fmt: skip
_builtin(
    "prompt_tokens_cached_total", "tokens", "server prompt tokens served from its prefix cache",
    **_COUNTER,
)  # fmt: skip
_builtin("decode_calls_total", "count", "server decode (forward) calls", **_COUNTER)
# vLLM's iteration-token histogram: tokens each engine step computed (prompt chunks and one per
# decoding sequence), as a sum and a count: the mean step against --max-num-batched-tokens
_builtin(
    "step_tokens_total", "tokens", "server tokens computed by its engine steps, summed",
    **_COUNTER,
)  # fmt: skip
_builtin("engine_steps_total", "count", "server engine steps", **_COUNTER)
_builtin(
    "prompt_seconds_total", "s", "server seconds spent computing prompts (llama.cpp's prefill)",
    **_COUNTER,
)  # fmt: skip
_builtin(
    "busy_slots_per_decode", "slots",
    "busy slots per decode call, average since the server started (llama.cpp)",
    over_instances="mean",
)  # fmt: skip
_builtin(
    "sim_lag_s", "seconds",
    "simulated server: summed step lag behind its real-time schedule "
    "(locust_llm.report.diagnosis.lag)",
    over_instances="sum", cumulative=True,
)  # fmt: skip
_builtin(
    "sim_steps", "count", "simulated server: engine steps handed out, cumulative count",
    over_instances="sum", cumulative=True,
)  # fmt: skip
_builtin(
    "sim_late_steps", "count",
    "simulated server: steps handed out > 10 ms late, cumulative count",
    over_instances="sum", cumulative=True,
)  # fmt: skip
_builtin(
    "worker_cpu_util", "ratio", "Locust worker CPU ratio 0..1 (source = worker id)",
    over_instances="max",
)  # fmt: skip
_builtin(
    "worker_cpu_demand", "ratio",
    "Locust worker CPU demand: time running or waiting for a core / wall time "
    "(locust_llm.client.cpu_demand; source = worker id)",
    over_instances="max",
)  # fmt: skip
_builtin(
    SCRAPE_UP, "ratio", "1 = target scraped and parsed, 0 = scrape failed (a gap)",
    over_instances="min",
)  # fmt: skip
# per-request phase histograms (vLLM's request_*_time_seconds, TGI's request_queue_duration):
# their _sum and _count, so a stage's increase / requests' increase is the phase's mean
for _phase, _what in (
    ("queue", "arrival -> first scheduled"),
    ("prefill", "first scheduled -> first token"),
    ("decode", "first token -> last token"),
):
    _builtin(
        f"phase_{_phase}_s", "seconds",
        f"server: summed per-request {_phase} time ({_what}) of finished requests, cumulative",
        over_instances="sum", cumulative=True,
    )  # fmt: skip
_builtin(
    "phase_requests", "count",
    "server: finished requests the phase sums cover (the histogram's _count), cumulative",
    over_instances="sum", cumulative=True,
)  # fmt: skip
