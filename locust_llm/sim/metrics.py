"""``GET /metrics`` of the simulator: vLLM's metric vocabulary plus the simulated GPU.

vLLM names, label ``model_name``: gauges ``vllm:num_requests_running``,
``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` (a 0..1 ratio, as vLLM reports it)
and its older name ``vllm:gpu_cache_usage_perc``; counters ``vllm:num_preemptions_total``,
``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
``vllm:request_success_total``, ``vllm:prefix_cache_queries_total`` and
``vllm:prefix_cache_hits_total`` (tokens, as vLLM v1 counts them); histograms with vLLM's
buckets (``vllm/v1/metrics/loggers.py``): ``vllm:time_to_first_token_seconds``,
``vllm:inter_token_latency_seconds``, ``vllm:e2e_request_latency_seconds`` and the per-request
phases ``vllm:request_queue_time_seconds`` (arrival to first scheduled),
``vllm:request_prefill_time_seconds`` (first scheduled to first token),
``vllm:request_decode_time_seconds`` (first token to last), and
``vllm:request_inference_time_seconds`` (first scheduled to last token), on the engine's clock,
observed when a request finishes.

The simulator's own health: ``locust_llm_sim_step_lag_seconds`` (histogram: how late each step's
tokens were handed out against the real-time schedule) and ``locust_llm_sim_late_steps_total``
(steps more than :data:`LATE_STEP_S` late). A simulator that falls behind on a busy host shows
here, and the report flags the stages it happened in.

The GPU is served by the exporter's own :class:`~locust_llm.gpu.collector.GpuCollector` over a
:class:`~locust_llm.sim.gpu.SimGpuSource`, so the names (``nvml_*``, labels ``gpu``, ``uuid``)
are exactly the exporter's. Histograms are plain bucket arrays (an observation is one bisect),
cheap enough for one ITL observation per streamed token.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from locust_llm.gpu.collector import GpuCollector
from locust_llm.report.diagnosis.lag import LATE_STEP_S
from locust_llm.sim.engine import Engine, SimRequest
from locust_llm.sim.gpu import SimGpuSource

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


#: Step lag buckets (seconds): sub-millisecond scheduling noise up to seconds of a stalled host.
LAG_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Histogram:
    """Bucket counts and a sum; ``observe`` is one bisect and two additions."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        out, total = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(total)))
        return out


class SimMetrics:
    """Request-level observations the HTTP front makes (seconds)."""

    def __init__(self) -> None:
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(REQUEST_BUCKETS)
        self.queue = Histogram(REQUEST_BUCKETS)
        self.prefill = Histogram(REQUEST_BUCKETS)
        self.decode = Histogram(REQUEST_BUCKETS)
        self.inference = Histogram(REQUEST_BUCKETS)
        self.success: dict[str, int] = {}  # finish reason -> count

    def finished(self, reason: str) -> None:
        self.success[reason] = self.success.get(reason, 0) + 1

    def phases(self, req: SimRequest) -> None:
        """vLLM's per-request phase histograms, from a finished request's engine times (vLLM
        observes all four when the request finishes, so their counts cover the same requests)."""
        queue, prefill, decode = phase_times(req)
        self.queue.observe(queue)
        self.prefill.observe(prefill)
        self.decode.observe(decode)
        self.inference.observe(max(0.0, req.finished_s - req.admitted_s))


def phase_times(req: SimRequest) -> tuple[float, float, float]:
    """A finished request's (queue, prefill, decode) seconds as vLLM's histograms count them:
    arrival -> first scheduled, first scheduled -> first token, first token -> last token."""
    return (
        max(0.0, req.admitted_s - req.arrival_s),
        max(0.0, req.first_token_s - req.admitted_s),
        max(0.0, req.finished_s - req.first_token_s),
    )


class LagStats:
    """How late the real-time loop handed out each step (seconds; 0 = on schedule)."""

    __slots__ = ("hist", "late_steps", "max_s")

    def __init__(self) -> None:
        self.hist = Histogram(LAG_BUCKETS)
        self.late_steps = 0
        self.max_s = 0.0

    def observe(self, lag_s: float) -> None:
        self.hist.observe(lag_s)
        self.late_steps += lag_s > LATE_STEP_S
        self.max_s = max(self.max_s, lag_s)


class VllmCollector(Collector):
    """Engine state and :class:`SimMetrics` under vLLM's names, fresh on every scrape."""

    def __init__(
        self,
        engine: Engine,
        metrics: SimMetrics,
        model_name: str,
        lag: LagStats | None = None,
    ) -> None:
        self.engine = engine
        self.metrics = metrics
        self.model_name = model_name
        self.lag = lag

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        eng, m, labels, value = self.engine, self.metrics, ["model_name"], [self.model_name]

        def gauge(name: str, doc: str, v: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=labels)
            g.add_metric(value, v)
            return g

        def counter(name: str, doc: str, v: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=labels)
            c.add_metric(value, v)
            return c

        def hist(name: str, doc: str, h: Histogram) -> HistogramMetricFamily:
            f = HistogramMetricFamily(name, doc, labels=labels)
            f.add_metric(value, h.cumulative(), h.sum)
            return f

        yield gauge("vllm:num_requests_running", "Requests in the running batch.", len(eng.running))
        yield gauge(
            "vllm:num_requests_waiting", "Requests waiting to be admitted.", len(eng.waiting)
        )
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage, 1 = full.", eng.kv_usage_ratio)
        yield gauge("vllm:gpu_cache_usage_perc", "KV-cache usage (older name).", eng.kv_usage_ratio)
        yield counter(
            "vllm:prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache.",
            eng.stats.prefix_cache_queries_total,
        )
        yield counter(
            "vllm:prefix_cache_hits",
            "Prompt tokens found in the prefix cache.",
            eng.stats.prefix_cache_hits_total,
        )
        yield counter(
            "vllm:num_preemptions", "Cumulative preemptions.", eng.stats.preemptions_total
        )
        yield counter(
            "vllm:prompt_tokens", "Prefilled prompt tokens.", eng.stats.prompt_tokens_total
        )
        yield counter(
            "vllm:generation_tokens", "Generated tokens.", eng.stats.generation_tokens_total
        )
        success = CounterMetricFamily(
            "vllm:request_success", "Finished requests.", labels=[*labels, "finished_reason"]
        )
        for reason, count in sorted(m.success.items()):
            success.add_metric([self.model_name, reason], count)
        yield success
        yield hist("vllm:time_to_first_token_seconds", "Time to first token.", m.ttft)
        yield hist("vllm:inter_token_latency_seconds", "Time between streamed tokens.", m.itl)
        yield hist("vllm:e2e_request_latency_seconds", "End-to-end request latency.", m.e2e)
        yield hist("vllm:request_queue_time_seconds", "Time waiting before admission.", m.queue)
        yield hist("vllm:request_prefill_time_seconds", "Time in the PREFILL phase.", m.prefill)
        yield hist("vllm:request_decode_time_seconds", "Time in the DECODE phase.", m.decode)
        yield hist("vllm:request_inference_time_seconds", "Time in the RUNNING phase.", m.inference)
        steps = HistogramMetricFamily(  # sum and count only: one +Inf bucket
            "vllm:iteration_tokens_total", "Tokens per engine step.", labels=labels
        )
        steps.add_metric(value, [("+Inf", eng.stats.steps_total)], eng.stats.step_tokens_total)
        yield steps
        if self.lag is not None:
            lag = HistogramMetricFamily(
                "locust_llm_sim_step_lag_seconds",
                "How late each engine step was handed out against the real-time schedule.",
            )
            lag.add_metric([], self.lag.hist.cumulative(), self.lag.hist.sum)
            yield lag
            late = CounterMetricFamily(
                "locust_llm_sim_late_steps",
                f"Engine steps handed out more than {LATE_STEP_S:g} s late.",
            )
            late.add_metric([], self.lag.late_steps)
            yield late


def build_registry(
    engine: Engine,
    metrics: SimMetrics,
    model_name: str,
    gpu_source: SimGpuSource,
    lag: LagStats | None = None,
) -> CollectorRegistry:
    """A fresh registry serving the vLLM families, the simulator's lag and the simulated GPUs."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(VllmCollector(engine, metrics, model_name, lag))
    registry.register(GpuCollector(gpu_source))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """Prometheus text exposition of ``registry``."""
    return generate_latest(registry)
