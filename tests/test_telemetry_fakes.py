"""Fakes shared by the telemetry tests: exporter-like registries and a switchable /metrics server.

No tests here. The fake exporters speak our vocabulary (``nvml_*``) or dcgm-exporter's, with the
same underlying state, so both must map to the same canonical signals. Values change every
``PHASE_S`` seconds of wall clock, so two scrapers that look at nearly the same time agree.
:class:`FakeClock` drives the scraper's timer without real sleeps.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest

GIB = 1024**3
MIB = 1024**2
PHASE_S = 2.0


@dataclass
class GpuState:
    """What a fake GPU shows: canonical units (ratios, bytes, watts)."""

    util: float
    used_bytes: float
    total_bytes: float
    power_w: float
    dram: float


def state_at(gpu: int, phase: int) -> GpuState:
    """Deterministic, phase-dependent state of GPU ``gpu``; MiB-exact memory, integer %."""
    step = phase % 9
    return GpuState(
        util=(10 * step + gpu) / 100.0,
        used_bytes=(step + 1 + gpu) * GIB,
        total_bytes=80 * GIB,
        power_w=100.0 + 10 * step + gpu,
        dram=step / 10.0,
    )


def current_phase() -> int:
    return int(time.time() // PHASE_S)


class FakeExporter:
    """A prometheus_client Collector; ``vocabulary`` is "ours" or "dcgm"; ``phase`` pins time."""

    def __init__(self, vocabulary: str, gpus: int = 2, phase: int | None = None) -> None:
        self.vocabulary = vocabulary
        self.gpus = gpus
        self.phase = phase

    def states(self) -> list[GpuState]:
        phase = current_phase() if self.phase is None else self.phase
        return [state_at(i, phase) for i in range(self.gpus)]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        states = self.states()
        labels = ["gpu", "uuid"] if self.vocabulary == "ours" else ["gpu", "UUID", "modelName"]
        ours = self.vocabulary == "ours"
        fields = (
            [
                ("nvml_gpu_utilization_ratio", lambda s: s.util),
                ("nvml_memory_used_bytes", lambda s: s.used_bytes),
                ("nvml_memory_total_bytes", lambda s: s.total_bytes),
                ("nvml_power_usage_watts", lambda s: s.power_w),
                ("nvml_dram_bandwidth_utilization_ratio", lambda s: s.dram),
            ]
            if ours
            else [
                ("DCGM_FI_DEV_GPU_UTIL", lambda s: round(s.util * 100)),
                ("DCGM_FI_DEV_FB_USED", lambda s: s.used_bytes / MIB),
                ("DCGM_FI_DEV_FB_FREE", lambda s: (s.total_bytes - s.used_bytes) / MIB),
                ("DCGM_FI_DEV_POWER_USAGE", lambda s: s.power_w),
                ("DCGM_FI_PROF_DRAM_ACTIVE", lambda s: s.dram),
            ]
        )
        for name, get in fields:
            family = GaugeMetricFamily(name, f"fake {name}", labels=labels)
            for i, state in enumerate(states):
                values = [str(i), f"GPU-fake-{i}"] + ([] if ours else ["Fake H100"])
                family.add_metric(values, float(get(state)))
            yield family
        if ours:
            host = GaugeMetricFamily("nvml_host_cpu_utilization_ratio", "fake host cpu")
            host.add_metric([], 0.25)
            yield host


def exporter_text(exporter: FakeExporter) -> str:
    registry = CollectorRegistry()
    registry.register(exporter)
    return generate_latest(registry).decode()


class ExporterServer:
    """``start_http_server`` on 127.0.0.1 port 0 serving one FakeExporter."""

    def __init__(self, exporter: FakeExporter) -> None:
        registry = CollectorRegistry()
        registry.register(exporter)
        self.server, self.thread = start_http_server(0, addr="127.0.0.1", registry=registry)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/metrics"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


class SwitchableServer:
    """A /metrics server whose answer a test switches: "ok", "404", "500", "garbage", "slow"."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.mode = "ok"
        self.slow_s = 1.0  # how long a "slow" answer takes
        self.hits = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits += 1
                mode = outer.mode
                if mode == "slow":
                    time.sleep(outer.slow_s)
                if mode in ("404", "500"):
                    self.send_error(int(mode))
                    return
                body = (outer.text if mode in ("ok", "slow") else "<html>hi</html>\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


class FakeClock:
    """A :class:`locust_llm.telemetry.scraper.ScrapeClock` with its own time per timer thread.

    Each thread starts at ``start_s``; ``wait`` returns at once, moving that thread's time on by
    the timeout, and says stop after ``ticks`` waits (so every timer takes exactly ``ticks``
    steps, whatever the machine's load). ``on_wait(thread_name, waits)`` runs before each wait
    returns (to switch a server off mid-run); ``advance(s)`` moves the calling thread's time (a
    step that takes ``s`` seconds).
    """

    def __init__(self, ticks: int, start_s: float = 1_000.0, on_wait=None) -> None:
        self.ticks = ticks
        self.start_s = start_s
        self.on_wait = on_wait
        self._local = threading.local()

    def _now(self) -> float:
        if not hasattr(self._local, "now"):
            self._local.now, self._local.waits = self.start_s, 0
        return self._local.now

    def advance(self, seconds: float) -> None:
        self._local.now = self._now() + seconds

    def wall(self) -> float:
        return self._now()

    def monotonic(self) -> float:
        return self._now()

    def wait(self, stop: threading.Event, timeout_s: float) -> bool:
        self._local.now = self._now() + max(0.0, timeout_s)
        self._local.waits += 1
        if self.on_wait is not None:
            self.on_wait(threading.current_thread().name, self._local.waits)
        return stop.is_set() or self._local.waits >= self.ticks
