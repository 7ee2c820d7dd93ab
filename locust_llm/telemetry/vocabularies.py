"""Server and exporter vocabularies: exposed Prometheus metric names -> canonical signals.

Pure (no I/O). Each vocabulary is one registered entry (:func:`register_vocabulary`): its name,
the metrics it exposes in priority order, each with the canonical signal it feeds
(:mod:`locust_llm.telemetry.signals`) and a unit factor, and optionally a ``derive`` step for a
signal no
single metric gives. Adding a server is one :class:`Vocabulary`; adding a metric name to one is
one :class:`MetricMap` line in its entry. Built in:

============  =====================================================================
``ours``      locust-llm's GPU exporter (``nvml_*``, base units already)
``dcgm``      NVIDIA dcgm-exporter (``DCGM_FI_*``; % -> ratio, MiB -> bytes)
``vllm``      vLLM (``vllm:*``; v1's ``kv_cache_usage_perc`` or the older ``gpu_cache_usage_perc``)
``sglang``    SGLang (``sglang:*``; a *retracted* request is SGLang's preemption)
``tgi``       Hugging Face text-generation-inference (``tgi_*``)
``llamacpp``  llama.cpp server with ``--metrics`` (``llamacpp:*``)
``sim``       locust-llm's simulated server's own lag (``locust_llm_sim_*``)
============  =====================================================================

Rules, applied per scrape of one source:

* Names are matched on the *sample* name as exposed (counters keep ``_total``).
* Per-GPU signals are keyed by the ``gpu`` label (ours and dcgm-exporter both use it; ``""`` when
  absent); server signals always have ``gpu == ""``.
* Several series of one metric and key (a vLLM data-parallel ``engine`` label, SGLang ranks) are
  combined with the signal's ``over_instances`` reduction (running, waiting, preemptions summed;
  ratios averaged).
* When a source exposes several metrics for one signal, the first in registration order wins
  (``DCGM_FI_DEV_GPU_UTIL`` before ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, vLLM's current KV name
  before the deprecated one).
* Ours and dcgm-exporter's names and unit factors come from the exporter's own table
  (:mod:`locust_llm.gpu.names`). dcgm-exporter's default counters have no total-memory gauge:
  unless ``DCGM_FI_DEV_FB_TOTAL`` is exported, ``mem_total_bytes`` = FB_USED + FB_FREE (+
  FB_RESERVED when exported), MiB converted to bytes (the dcgm entry's ``derive``).
* A NaN sample stays NaN (missing data is never 0).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from locust_llm.gpu.names import GPU_METRICS, HOST_METRICS
from locust_llm.registry import Registry
from locust_llm.telemetry.promtext import Sample, parse_samples
from locust_llm.telemetry.signals import get_signal, reduce_values

MIB = 1024.0 * 1024.0
#: vLLM's ``finished_reason`` label values that have a ``finished_<reason>`` signal.
FINISH_REASONS = ("stop", "length", "abort", "error")

SignalValue = tuple[str, str, float]
#: Raw values of one scrape, keyed (metric name, gpu) -> every series' value.
RawValues = Mapping[tuple[str, str], list[float]]
#: ``derive(raw, mapped)`` -> extra {(signal, gpu): value}; a key already mapped is kept.
Derive = Callable[[RawValues, Mapping[tuple[str, str], float]], dict[tuple[str, str], float]]


@dataclass(frozen=True, slots=True)
class MetricMap:
    """One exposed metric feeding one canonical signal: ``signal = value * scale``; with
    ``labels``, only the series carrying those label values (vLLM's waiting ``reason``)."""

    metric: str
    signal: str
    scale: float = 1.0
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        """The series it reads: the metric name, with its label filter when it has one."""
        if not self.labels:
            return self.metric
        return self.metric + "{" + ",".join(f'{k}="{v}"' for k, v in self.labels) + "}"

    def selects(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.labels)


@dataclass(frozen=True)
class Vocabulary:
    """The metric names one server or exporter exposes, mapped onto canonical signals."""

    name: str
    summary: str
    metrics: tuple[MetricMap, ...]  # priority order within each signal
    extra_metrics: tuple[str, ...] = ()  # read only by ``derive`` (keyed by the gpu label)
    derive: Derive | None = None


_VOCABULARIES: Registry[Vocabulary] = Registry("vocabulary")
#: series key (MetricMap.key) -> (vocabulary, map, priority)
_BY_KEY: dict[str, tuple[str, MetricMap, int]] = {}
_BY_METRIC: dict[str, list[MetricMap]] = {}  # metric name -> its maps
_EXTRA: set[str] = set()
_KNOWN: tuple[str, ...] = ()


def register_vocabulary(vocabulary: Vocabulary) -> Vocabulary:
    """Add ``vocabulary`` after the registered ones (its signals must be registered; a metric
    name belongs to one vocabulary); returns it."""
    for m in vocabulary.metrics:
        get_signal(m.signal)  # KeyError naming the registered signals
        if m.key in _BY_KEY:
            raise ValueError(f"metric {m.key!r} is already mapped by {_BY_KEY[m.key][0]}")
    _VOCABULARIES.register(vocabulary.name, vocabulary)
    _reindex()
    return vocabulary


def unregister_vocabulary(name: str) -> None:
    """Remove a registered vocabulary (tests that register their own)."""
    if _VOCABULARIES.unregister(name):
        _reindex()


def _reindex() -> None:
    global _KNOWN
    _BY_KEY.clear()
    _BY_METRIC.clear()
    _EXTRA.clear()
    for vocabulary in _VOCABULARIES:
        for m in vocabulary.metrics:
            _BY_KEY[m.key] = (vocabulary.name, m, len(_BY_KEY))
            _BY_METRIC.setdefault(m.metric, []).append(m)
        _EXTRA.update(vocabulary.extra_metrics)
    names = [*_BY_METRIC, *(n for v in _VOCABULARIES for n in v.extra_metrics)]
    _KNOWN = tuple(dict.fromkeys(names))


def registered_vocabularies() -> tuple[Vocabulary, ...]:
    """Every vocabulary, in registration (= priority) order."""
    return tuple(_VOCABULARIES)


def metric_maps() -> tuple[tuple[str, MetricMap], ...]:
    """``(vocabulary, map)`` for every known metric, in priority order."""
    return tuple((vocab, m) for vocab, m, _ in _BY_KEY.values())


def known_metrics() -> tuple[str, ...]:
    """Every metric name the vocabularies read (for a Prometheus ``{__name__=~...}`` query)."""
    return _KNOWN


def gpu_key(labels: Mapping[str, str]) -> str:
    """GPU index of a series: the ``gpu`` label (ours and dcgm-exporter); ``""`` when absent."""
    return str(labels.get("gpu", ""))


def map_samples(samples: Iterable[Sample]) -> list[SignalValue]:
    """Canonical ``(signal, gpu, value)`` triples from one source's samples at one instant.

    ``samples`` are ``(sample name, labels, value)``; unknown names are ignored, and so are the
    series a labelled map does not select. The result is
    sorted by (signal, gpu) and holds at most one value per key.
    """
    raw: dict[tuple[str, str], list[float]] = defaultdict(list)
    for name, labels, value in samples:
        maps = _BY_METRIC.get(name)
        if maps is not None:
            for m in maps:
                if m.selects(labels):
                    per_gpu = get_signal(m.signal).per_gpu
                    raw[(m.key, gpu_key(labels) if per_gpu else "")].append(float(value))
        elif name in _EXTRA:
            raw[(name, gpu_key(labels))].append(float(value))

    chosen: dict[tuple[str, str], tuple[int, float]] = {}
    for (name, gpu), values in raw.items():
        known = _BY_KEY.get(name)
        if known is None:
            continue
        _, spec, rank = known
        key = (spec.signal, gpu)
        if key not in chosen or rank < chosen[key][0]:
            how = get_signal(spec.signal).over_instances
            chosen[key] = (rank, reduce_values(how, values) * spec.scale)

    result = {key: value for key, (_, value) in chosen.items()}
    for vocabulary in _VOCABULARIES:
        if vocabulary.derive is not None:
            for key, value in vocabulary.derive(raw, result).items():
                result.setdefault(key, value)
    return [(signal, gpu, value) for (signal, gpu), value in sorted(result.items())]


def extract_signals(text: str) -> list[SignalValue]:
    """Canonical ``(signal, gpu, value)`` triples from one scrape's Prometheus text."""
    return map_samples(parse_samples(text, _KNOWN))


def spoken_vocabularies(text: str) -> set[str]:
    """Which vocabularies a scrape speaks (for logs and docs: "dcgm", "vllm" ...)."""
    return {
        _BY_KEY[m.key][0] for name, _, _ in parse_samples(text) for m in _BY_METRIC.get(name, ())
    }


# ---- the built-in vocabularies ----------------------------------------------------------------
#: GpuSample field (locust_llm.gpu.names) -> canonical signal.
GPU_FIELD_SIGNALS: dict[str, str] = {
    "utilization_ratio": "gpu_util",
    "memory_used_bytes": "mem_used_bytes",
    "memory_total_bytes": "mem_total_bytes",
    "dram_bandwidth_utilization_ratio": "dram_bw_util",
    "power_watts": "power_w",
}

#: dcgm-exporter memory parts that make up the total (MiB).
DCGM_FB_PARTS: tuple[str, ...] = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE")
DCGM_FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"


def _dcgm_memory_total(
    raw: RawValues, mapped: Mapping[tuple[str, str], float]
) -> dict[tuple[str, str], float]:
    """``mem_total_bytes`` = FB_USED + FB_FREE (+ FB_RESERVED), MiB -> bytes, per GPU."""
    out: dict[tuple[str, str], float] = {}
    for gpu in {g for (name, g) in raw if name in (*DCGM_FB_PARTS, DCGM_FB_RESERVED)}:
        if ("mem_total_bytes", gpu) in mapped:
            continue
        parts = [raw.get((name, gpu)) for name in DCGM_FB_PARTS]
        if all(parts):
            reserved = raw.get((DCGM_FB_RESERVED, gpu), [0.0])
            mib = sum(sum(p) / len(p) for p in parts if p) + sum(reserved) / len(reserved)
            out[("mem_total_bytes", gpu)] = mib * MIB
    return out


def _exporter_vocabularies() -> tuple[Vocabulary, Vocabulary]:
    """Ours and dcgm-exporter's, from the exporter's own name table."""

    mapped = [m for m in GPU_METRICS if m.field in GPU_FIELD_SIGNALS]
    ours = [MetricMap(m.sample_name, GPU_FIELD_SIGNALS[m.field]) for m in mapped]
    ours.append(MetricMap(HOST_METRICS["host_cpu_utilization_ratio"][0], "host_cpu_util"))
    dcgm = [
        MetricMap(m.dcgm, GPU_FIELD_SIGNALS[m.field], m.dcgm_scale)
        for m in mapped
        if m.dcgm is not None
    ]
    # the profiling engine-active ratio stands in for GPU_UTIL when only DCP fields are exported
    dcgm.append(MetricMap("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gpu_util"))
    return (
        Vocabulary("ours", "locust-llm's GPU exporter (nvml_*)", tuple(ours)),
        Vocabulary(
            "dcgm",
            "NVIDIA dcgm-exporter (DCGM_FI_*)",
            tuple(dcgm),
            extra_metrics=(*DCGM_FB_PARTS, DCGM_FB_RESERVED),
            derive=_dcgm_memory_total,
        ),
    )


for _vocabulary in _exporter_vocabularies():
    register_vocabulary(_vocabulary)

register_vocabulary(Vocabulary("vllm", "vLLM (vllm:*)", (
    MetricMap("vllm:num_requests_running", "running"),
    MetricMap("vllm:num_requests_waiting", "waiting"),
    MetricMap("vllm:kv_cache_usage_perc", "kv_cache_usage"),  # a 0..1 ratio despite "perc"
    MetricMap("vllm:gpu_cache_usage_perc", "kv_cache_usage"),  # before v1
    MetricMap("vllm:num_preemptions_total", "preemptions"),
    MetricMap("vllm:generation_tokens_total", "generation_tokens_total"),
    MetricMap("vllm:prompt_tokens_total", "prompt_tokens_total"),
    # v1: local + external hits, in the tokens of the requests (before the older hit counter)
    MetricMap("vllm:prompt_tokens_cached_total", "prompt_tokens_cached_total"),
    MetricMap("vllm:prefix_cache_hits_total", "prompt_tokens_cached_total"),
    # why requests wait: for scheduling capacity (the batch or the KV cache) or deferred
    MetricMap("vllm:num_requests_waiting_by_reason", "waiting_capacity",
              labels=(("reason", "capacity"),)),
    MetricMap("vllm:num_requests_waiting_by_reason", "waiting_deferred",
              labels=(("reason", "deferred"),)),
    *(MetricMap("vllm:request_success_total", f"finished_{reason}",
                labels=(("finished_reason", reason),)) for reason in FINISH_REASONS),
    # the engine's own FLOP and byte estimates (vLLM's --enable-mfu-metrics; 0 without it)
    MetricMap("vllm:estimated_flops_per_gpu_total", "server_flops_total"),
    MetricMap("vllm:estimated_read_bytes_per_gpu_total", "server_read_bytes_total"),
    # per-request phase histograms, observed when a request finishes (diagnosis, issue 15)
    MetricMap("vllm:request_queue_time_seconds_sum", "phase_queue_s"),
    MetricMap("vllm:request_prefill_time_seconds_sum", "phase_prefill_s"),
    MetricMap("vllm:request_decode_time_seconds_sum", "phase_decode_s"),
    MetricMap("vllm:request_queue_time_seconds_count", "phase_requests"),
    MetricMap("vllm:prefix_cache_queries_total", "prefix_cache_queries"),  # tokens
    # tokens per engine step (prompt chunks + decoding sequences): how full the token budget is
    MetricMap("vllm:iteration_tokens_total_sum", "step_tokens_total"),
    MetricMap("vllm:iteration_tokens_total_count", "engine_steps_total"),
)))  # fmt: skip

register_vocabulary(Vocabulary("sglang", "SGLang (sglang:*)", (
    MetricMap("sglang:num_running_reqs", "running"),
    MetricMap("sglang:num_queue_reqs", "waiting"),
    MetricMap("sglang:token_usage", "kv_cache_usage"),
    MetricMap("sglang:num_retracted_requests_total", "preemptions"),  # SGLang's preemption
    MetricMap("sglang:generation_tokens_total", "generation_tokens_total"),
    MetricMap("sglang:prompt_tokens_total", "prompt_tokens_total"),  # cache hits included
    MetricMap("sglang:cached_tokens_total", "prompt_tokens_cached_total"),
)))  # fmt: skip

register_vocabulary(Vocabulary("tgi", "text-generation-inference (tgi_*)", (
    # no KV-usage or preemption metric
    MetricMap("tgi_batch_current_size", "running"),
    MetricMap("tgi_queue_size", "waiting"),
    # token totals only as histograms: their sums
    MetricMap("tgi_request_generated_tokens_sum", "generation_tokens_total"),
    MetricMap("tgi_request_input_length_sum", "prompt_tokens_total"),
    # queue time per request (histogram); TGI has no per-request prefill/decode split
    MetricMap("tgi_request_queue_duration_sum", "phase_queue_s"),
    MetricMap("tgi_request_queue_duration_count", "phase_requests"),
)))  # fmt: skip

register_vocabulary(Vocabulary("llamacpp", "llama.cpp server with --metrics (llamacpp:*)", (
    MetricMap("llamacpp:requests_processing", "running"),
    MetricMap("llamacpp:requests_deferred", "waiting"),
    MetricMap("llamacpp:kv_cache_usage_ratio", "kv_cache_usage"),  # older servers only
    MetricMap("llamacpp:tokens_predicted_total", "generation_tokens_total"),
    MetricMap("llamacpp:prompt_tokens_total", "prompt_tokens_computed_total"),  # hits apart
    MetricMap("llamacpp:prompt_tokens_cached_total", "prompt_tokens_cached_total"),
    MetricMap("llamacpp:n_decode_total", "decode_calls_total"),
    MetricMap("llamacpp:prompt_seconds_total", "prompt_seconds_total"),
    MetricMap("llamacpp:n_busy_slots_per_decode", "busy_slots_per_decode"),
)))  # fmt: skip

register_vocabulary(Vocabulary("sim", "locust-llm's simulated server (locust_llm_sim_*)", (
    # its own lag behind the real-time schedule (locust_llm.report.diagnosis.lag)
    MetricMap("locust_llm_sim_step_lag_seconds_sum", "sim_lag_s"),
    MetricMap("locust_llm_sim_step_lag_seconds_count", "sim_steps"),
    MetricMap("locust_llm_sim_late_steps_total", "sim_late_steps"),
)))  # fmt: skip
