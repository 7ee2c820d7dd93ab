"""The exporter's Prometheus Collector: fresh metric families from a GPU source on every scrape.

Modelled on client_python's ``ProcessCollector``: no background timer, no timestamps, no state
but the source. Each scrape calls ``source.read()`` once; if that raises, the scrape still answers
with ``nvml_up 0`` and ``nvml_scrape_duration_seconds``. A field the source leaves ``None`` is
omitted for that GPU (never reported as 0). Each family is built under its own guard, so one bad
value costs that family only.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from locust_llm.gpu import names
from locust_llm.gpu.source import GpuSample, GpuSource, HostSample

log = logging.getLogger(__name__)


class GpuCollector(Collector):
    """Serve one :class:`GpuSource` as ``nvml_*`` and ``host_*`` metrics.

    ``source``: anything with ``read() -> HostSample`` (NVML, fake, replay, the simulator's).
    Register it on any ``CollectorRegistry``; ``describe()`` returns nothing so registering
    does not read the hardware (the metric set depends on what each GPU supports).
    """

    def __init__(
        self, source: GpuSource, *, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.source = source
        self._clock = clock
        self._warned: set[str] = set()
        self._lock = threading.Lock()  # sources keep state between reads (GPM, counters)

    def describe(self) -> Iterable[Metric]:
        """Nothing up front: the families depend on what the devices support."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Read the source once and yield every family it supports, then up and duration."""
        start = self._clock()
        try:
            with self._lock:
                sample = self.source.read()
            up = 1.0
        except Exception as exc:  # the source's failure is data (nvml_up 0), not a 500
            self._warn_once("read", "GPU source read failed: %s", exc)
            sample, up = None, 0.0
        families = list(self._families(sample)) if sample is not None else []
        yield from families
        yield GaugeMetricFamily(names.UP_METRIC, "1 if the GPU source answered this scrape.", up)
        yield GaugeMetricFamily(
            names.SCRAPE_DURATION_METRIC,
            "Seconds this scrape took to read the GPU source and build the metrics.",
            self._clock() - start,
        )

    def _families(self, sample: HostSample) -> Iterator[Metric]:
        gpus = sample.gpus
        for metric in names.GPU_METRICS:
            family = self._guard(metric.name, _gpu_family, metric, gpus)
            if family is not None and family.samples:
                yield family
        for family in (
            self._guard(names.THROTTLE_METRIC, _throttle_family, gpus),
            self._guard(names.INFO_METRIC, _info_family, sample),
            *(self._guard(field, _host_family, field, sample) for field in names.HOST_METRICS),
        ):
            if family is not None and family.samples:
                yield family

    def _guard(self, what: str, build, *args):  # type: ignore[no-untyped-def]
        try:
            return build(*args)
        except Exception as exc:
            self._warn_once(what, "could not build %s: %s", what, exc)
            return None

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, *args)


def _value(raw: object) -> float | None:
    if raw is None:
        return None
    value = float(raw)  # type: ignore[arg-type]
    return None if math.isnan(value) else value


def _gpu_family(metric: names.GpuMetric, gpus: list[GpuSample]) -> Metric:
    cls = CounterMetricFamily if metric.kind == "counter" else GaugeMetricFamily
    family = cls(metric.name, metric.help, labels=names.GPU_LABELS)
    for gpu in gpus:
        value = _value(getattr(gpu, metric.field))
        if value is not None:
            family.add_metric((str(gpu.index), gpu.uuid), value)
    return family


def _throttle_family(gpus: list[GpuSample]) -> Metric:
    family = GaugeMetricFamily(
        names.THROTTLE_METRIC,
        "1 while this reason holds the GPU clocks down (NVML clocks-event reasons).",
        labels=(*names.GPU_LABELS, "reason"),
    )
    for gpu in gpus:
        for reason, active in (gpu.throttle_reasons or {}).items():
            family.add_metric((str(gpu.index), gpu.uuid, reason), 1.0 if active else 0.0)
    return family


def _info_family(sample: HostSample) -> Metric:
    family = GaugeMetricFamily(
        names.INFO_METRIC,
        "Always 1; labels name the GPU model, driver and CUDA version.",
        labels=(*names.GPU_LABELS, "name", "driver_version", "cuda_version"),
    )
    for gpu in sample.gpus:
        family.add_metric(
            (str(gpu.index), gpu.uuid, gpu.name, sample.driver_version, sample.cuda_version), 1.0
        )
    return family


def _host_family(field: str, sample: HostSample) -> Metric:
    name, help_text = names.HOST_METRICS[field]
    family = GaugeMetricFamily(name, help_text)
    value = _value(getattr(sample, field))
    if value is not None:
        family.add_metric((), value)
    return family
