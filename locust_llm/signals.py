"""Name maps: Prometheus metrics of GPU exporters and LLM servers -> canonical telemetry signals.

Pure (no I/O). Six vocabularies feed the signals of ``locust_llm.rundir.SIGNALS``:

==========  =====================================================================
``ours``    locust-llm's GPU exporter (``nvml_*``, base units already)
``dcgm``    NVIDIA dcgm-exporter (``DCGM_FI_*``; % -> ratio, MiB -> bytes)
``vllm``    vLLM (``vllm:*``; v1's ``kv_cache_usage_perc`` or the older ``gpu_cache_usage_perc``)
``sglang``  SGLang (``sglang:*``; a *retracted* request is SGLang's preemption)
``tgi``     Hugging Face text-generation-inference (``tgi_*``)
``llamacpp`` llama.cpp server with ``--metrics`` (``llamacpp:*``)
==========  =====================================================================

Rules, applied per scrape of one source:

* Names are matched on the *sample* name as exposed (counters keep ``_total``).
* GPU signals are keyed by the ``gpu`` label (ours and dcgm-exporter both use it; ``""`` when
  absent); server signals always have ``gpu == ""``.
* Several series of one metric and key (a vLLM data-parallel ``engine`` label, SGLang ranks) are
  reduced: counts (running, waiting, preemptions) are summed, everything else is averaged.
* When a source exposes several metrics for one signal, the first in :data:`METRICS` order wins
  (``DCGM_FI_DEV_GPU_UTIL`` before ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, vLLM's current KV name
  before the deprecated one).
* Ours and dcgm-exporter's names and unit factors come from the exporter's own table
  (:mod:`locust_llm.gpu.names`). dcgm-exporter's default counters have no total-memory gauge:
  unless ``DCGM_FI_DEV_FB_TOTAL`` is exported, ``mem_total_bytes`` = FB_USED + FB_FREE (+
  FB_RESERVED when exported), MiB converted to bytes.
* A NaN sample stays NaN (missing data is never 0).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from locust_llm.errors import InputError

MIB = 1024.0 * 1024.0

#: Signal recorded by the scraper per source and scrape: 1 = scraped and parsed, 0 = failed.
#: From a Prometheus server it is that server's own ``up`` series for the instance.
SCRAPE_UP = "scrape_up"

#: Signals whose parallel series (engines, ranks) add up rather than average.
SUMMED_SIGNALS: frozenset[str] = frozenset(
    {
        "running",
        "waiting",
        "preemptions",
        "generation_tokens_total",
        "prompt_tokens_total",
        "prompt_tokens_computed_total",
        "prompt_tokens_cached_total",
        "decode_calls_total",
    }
)


@dataclass(frozen=True, slots=True)
class MetricMap:
    """One exposed metric feeding one canonical signal: ``signal = value * scale``."""

    metric: str
    signal: str
    vocabulary: str
    scale: float = 1.0
    per_gpu: bool = False  # keyed by the ``gpu`` label


def _gpu(metric: str, signal: str, vocabulary: str, scale: float = 1.0) -> MetricMap:
    return MetricMap(metric, signal, vocabulary, scale, per_gpu=True)


#: GpuSample field (locust_llm.gpu.names) -> canonical signal.
GPU_FIELD_SIGNALS: dict[str, str] = {
    "utilization_ratio": "gpu_util",
    "memory_used_bytes": "mem_used_bytes",
    "memory_total_bytes": "mem_total_bytes",
    "dram_bandwidth_utilization_ratio": "dram_bw_util",
    "power_watts": "power_w",
}


def _exporter_maps() -> tuple[MetricMap, ...]:
    """Ours and dcgm-exporter's names and unit factors, from the exporter's own name table."""
    from locust_llm.gpu.names import GPU_METRICS, HOST_METRICS

    mapped = [m for m in GPU_METRICS if m.field in GPU_FIELD_SIGNALS]
    ours = [_gpu(m.sample_name, GPU_FIELD_SIGNALS[m.field], "ours") for m in mapped]
    ours.append(MetricMap(HOST_METRICS["host_cpu_utilization_ratio"][0], "host_cpu_util", "ours"))
    dcgm = [
        _gpu(m.dcgm, GPU_FIELD_SIGNALS[m.field], "dcgm", m.dcgm_scale)
        for m in mapped
        if m.dcgm is not None
    ]
    # the profiling engine-active ratio stands in for GPU_UTIL when only DCP fields are exported
    dcgm.append(_gpu("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gpu_util", "dcgm"))
    return (*ours, *dcgm)


def _token_counter_maps() -> tuple[MetricMap, ...]:
    """Servers' cumulative token counters and llama.cpp's slot occupancy per decode call.

    ``prompt_tokens_total`` counts every prompt token; llama.cpp counts only the ones it computed
    (cache hits apart), so its counter feeds ``prompt_tokens_computed_total``. TGI has histograms
    only: their ``_sum`` series are the totals.
    """
    table = {
        "generation_tokens_total": (
            "llamacpp:tokens_predicted_total",
            "vllm:generation_tokens_total",
            "sglang:generation_tokens_total",
            "tgi_request_generated_tokens_sum",
        ),
        "prompt_tokens_total": (
            "vllm:prompt_tokens_total",
            "sglang:prompt_tokens_total",
            "tgi_request_input_length_sum",
        ),
        "prompt_tokens_computed_total": ("llamacpp:prompt_tokens_total",),
        "prompt_tokens_cached_total": (
            "llamacpp:prompt_tokens_cached_total",
            "vllm:prefix_cache_hits_total",
            "sglang:cached_tokens_total",
        ),
        "decode_calls_total": ("llamacpp:n_decode_total",),
        "busy_slots_per_decode": ("llamacpp:n_busy_slots_per_decode",),
    }
    return tuple(
        MetricMap(metric, signal, metric.split(":", 1)[0] if ":" in metric else "tgi")
        for signal, metrics in table.items()
        for metric in metrics
    )


#: Every known metric, in priority order within each signal.
METRICS: tuple[MetricMap, ...] = (
    *_exporter_maps(),
    # vLLM
    MetricMap("vllm:num_requests_running", "running", "vllm"),
    MetricMap("vllm:num_requests_waiting", "waiting", "vllm"),
    MetricMap("vllm:kv_cache_usage_perc", "kv_cache_usage", "vllm"),  # a 0..1 ratio despite "perc"
    MetricMap("vllm:gpu_cache_usage_perc", "kv_cache_usage", "vllm"),
    MetricMap("vllm:num_preemptions_total", "preemptions", "vllm"),
    # SGLang
    MetricMap("sglang:num_running_reqs", "running", "sglang"),
    MetricMap("sglang:num_queue_reqs", "waiting", "sglang"),
    MetricMap("sglang:token_usage", "kv_cache_usage", "sglang"),
    MetricMap("sglang:num_retracted_requests_total", "preemptions", "sglang"),
    # text-generation-inference (no KV-usage or preemption metric)
    MetricMap("tgi_batch_current_size", "running", "tgi"),
    MetricMap("tgi_queue_size", "waiting", "tgi"),
    # llama.cpp server
    MetricMap("llamacpp:requests_processing", "running", "llamacpp"),
    MetricMap("llamacpp:requests_deferred", "waiting", "llamacpp"),
    MetricMap("llamacpp:kv_cache_usage_ratio", "kv_cache_usage", "llamacpp"),  # gone since 2025
    *_token_counter_maps(),
)

#: dcgm-exporter memory parts that make up the total (MiB).
DCGM_FB_PARTS: tuple[str, ...] = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE")
DCGM_FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"

_BY_METRIC: dict[str, MetricMap] = {m.metric: m for m in METRICS}
_PRIORITY: dict[str, int] = {m.metric: i for i, m in enumerate(METRICS)}
_FB_NAMES = frozenset((*DCGM_FB_PARTS, DCGM_FB_RESERVED))

#: Every metric name the maps read (for a Prometheus ``{__name__=~...}`` query).
KNOWN_METRICS: tuple[str, ...] = tuple(
    dict.fromkeys([*(m.metric for m in METRICS), *DCGM_FB_PARTS, DCGM_FB_RESERVED])
)

Sample = tuple[str, Mapping[str, str], float]
SignalValue = tuple[str, str, float]


def gpu_key(labels: Mapping[str, str]) -> str:
    """GPU index of a series: the ``gpu`` label (ours and dcgm-exporter); ``""`` when absent."""
    return str(labels.get("gpu", ""))


def _reduce(signal: str, values: list[float]) -> float:
    if signal in SUMMED_SIGNALS:
        return math.fsum(values)
    return math.fsum(values) / len(values)


def map_samples(samples: Iterable[Sample]) -> list[SignalValue]:
    """Canonical ``(signal, gpu, value)`` triples from one source's samples at one instant.

    ``samples`` are ``(sample name, labels, value)``; unknown names are ignored. The result is
    sorted by (signal, gpu) and holds at most one value per key.
    """
    raw: dict[tuple[str, str], list[float]] = defaultdict(list)
    for name, labels, value in samples:
        spec = _BY_METRIC.get(name)
        if spec is not None:
            raw[(name, gpu_key(labels) if spec.per_gpu else "")].append(float(value))
        elif name in _FB_NAMES:
            raw[(name, gpu_key(labels))].append(float(value))

    chosen: dict[tuple[str, str], tuple[int, float]] = {}
    for (name, gpu), values in raw.items():
        spec = _BY_METRIC.get(name)
        if spec is None:
            continue
        rank = _PRIORITY[name]
        key = (spec.signal, gpu)
        if key not in chosen or rank < chosen[key][0]:
            chosen[key] = (rank, _reduce(spec.signal, values) * spec.scale)

    result = {key: value for key, (_, value) in chosen.items()}
    for gpu in {g for (name, g) in raw if name in _FB_NAMES}:
        if ("mem_total_bytes", gpu) in result:
            continue
        parts = [raw.get((name, gpu)) for name in DCGM_FB_PARTS]
        if all(parts):
            reserved = raw.get((DCGM_FB_RESERVED, gpu), [0.0])
            mib = sum(sum(p) / len(p) for p in parts if p) + sum(reserved) / len(reserved)
            result[("mem_total_bytes", gpu)] = mib * MIB
    return [(signal, gpu, value) for (signal, gpu), value in sorted(result.items())]


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def _not_prometheus(text: str, why: object) -> InputError:
    first = text.strip().splitlines()[0][:80] if text.strip() else "(empty)"
    return InputError(f"not Prometheus text exposition ({why}); starts with {first!r}")


def select_lines(text: str, names: Collection[str]) -> str:
    """The sample lines of ``text`` whose metric name is in ``names`` (comments dropped).

    A cheap pre-filter so the full parser only sees the few lines the maps read (a vLLM page is
    mostly histogram buckets). A line that does not start with a metric name is an InputError.
    """
    kept = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        match = _METRIC_NAME.match(line)
        end = match.end() if match else 0
        if match is None or (end < len(line) and line[end] not in "{ \t"):
            raise _not_prometheus(text, f"bad line {line[:40]!r}")
        if match.group() in names:
            kept.append(line)
    return "\n".join(kept) + "\n" if kept else ""


def parse_samples(text: str, names: Collection[str] | None = None) -> list[Sample]:
    """Samples ``(name, labels, value)`` of Prometheus text exposition ``text``, only those named
    in ``names`` when given; an unparsable text is an InputError."""
    from prometheus_client.parser import text_string_to_metric_families

    if names is not None:
        text = select_lines(text, names)
    try:
        return [
            (s.name, s.labels, s.value)
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise _not_prometheus(text, exc) from exc


_KNOWN_SET = frozenset(KNOWN_METRICS)


def extract_signals(text: str) -> list[SignalValue]:
    """Canonical ``(signal, gpu, value)`` triples from one scrape's Prometheus text."""
    return map_samples(parse_samples(text, _KNOWN_SET))


def vocabularies(text: str) -> set[str]:
    """Which vocabularies a scrape speaks (for logs and docs: "dcgm", "vllm" ...)."""
    return {_BY_METRIC[name].vocabulary for name, _, _ in parse_samples(text) if name in _BY_METRIC}
