"""Host CPU and memory of the machine the exporter runs on (psutil), added to any GPU source.

CPU utilization is psutil's ``cpu_percent(interval=None)``: busy time since the previous call,
so a scrape never sleeps; the reader primes it when built, so the first scrape measures from
start-up. ``psutil`` is injectable (tests pass a fake).
"""

from __future__ import annotations

import contextlib
from typing import Any

from locust_llm.gpu.source import GpuSource, HostSample


class HostReader:
    """Read host CPU utilization (0..1, all cores) and memory used/total (bytes)."""

    def __init__(self, psutil_module: Any = None) -> None:
        if psutil_module is None:
            import psutil

            psutil_module = psutil
        self._psutil = psutil_module
        self._psutil.cpu_percent(interval=None)  # prime: the next call measures from here

    def fill(self, sample: HostSample) -> HostSample:
        """Set the host fields the source left ``None``; each reading guarded on its own."""
        if sample.host_cpu_utilization_ratio is None:
            with contextlib.suppress(Exception):  # on failure left None: missing, not 0
                sample.host_cpu_utilization_ratio = self._psutil.cpu_percent(interval=None) / 100.0
        if sample.host_memory_used_bytes is None or sample.host_memory_total_bytes is None:
            try:
                memory = self._psutil.virtual_memory()
            except Exception:
                return sample
            if sample.host_memory_total_bytes is None:
                sample.host_memory_total_bytes = float(memory.total)
            if sample.host_memory_used_bytes is None:
                sample.host_memory_used_bytes = float(memory.total - memory.available)
        return sample


class WithHost:
    """A source that reads ``source`` and fills in the host fields it left empty."""

    def __init__(self, source: GpuSource, host: HostReader | None = None) -> None:
        self.source = source
        self.host = host if host is not None else HostReader()

    def read(self) -> HostSample:
        """The wrapped source's sample plus host CPU and memory."""
        return self.host.fill(self.source.read())
