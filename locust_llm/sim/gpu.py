"""The simulated GPUs as a :class:`~locust_llm.gpu.source.GpuSource`, read from the engine's state.

One sample per GPU (tp x pp of them, index 0..tp*pp-1, label ``gpu``); the GPUs of one engine
work on equal shards (a pipeline's stages on the same stage time, one after another), so their
figures are equal. Each :meth:`SimGpuSource.read` covers
the interval since the previous read (the first read covers the time since the source was
made):

- utilization = simulated busy seconds (sum of step times) / interval, at most 1;
- DRAM bandwidth utilization = bytes the steps moved on one GPU / (device bandwidth x
  interval), at most 1;
- memory used = weight shard + the fixed reserve + the whole KV pool, preallocated at start as
  vLLM does (flat from the first second: KV usage is ``vllm:kv_cache_usage_perc``); total = the
  device's memory;
- power = idle + (TDP - idle) x utilization (a linear model; NaN-free only when the preset
  gives both figures, otherwise left out).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable

from locust_llm.gpu.source import GpuSample, HostSample
from locust_llm.sim.engine import Engine


class SimGpuSource:
    """Samples the engine as one GPU. ``clock`` must be on the engine's time base."""

    def __init__(self, engine: Engine, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self._clock = clock
        self.uuids = [
            "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"locust-llm-sim/{engine.gpu.name}/{i}"))
            for i in range(engine.gpu_count)
        ]
        self.uuid = self.uuids[0]
        self._last_t = clock()
        self._last_busy, self._last_bytes = self._elapsed_totals(self._last_t)

    def _elapsed_totals(self, now: float) -> tuple[float, float]:
        """Busy seconds and bytes moved up to ``now`` (the latest step prorated)."""
        stats = self.engine.stats
        ahead = min(max(stats.last_step_end_s - now, 0.0), stats.last_step_duration_s)
        share = ahead / stats.last_step_duration_s if stats.last_step_duration_s > 0 else 0.0
        return stats.busy_s_total - ahead, stats.bytes_total - stats.last_step_bytes * share

    def read(self) -> HostSample:
        """One sample over the interval since the previous read.

        The engine books a step's whole duration when the step starts; the part of the latest
        step that lies after ``now`` has not happened yet and is left for the next sample.
        """
        eng, gpu = self.engine, self.engine.gpu
        now = self._clock()
        busy_total, bytes_total = self._elapsed_totals(now)
        interval = now - self._last_t
        busy = busy_total - self._last_busy
        moved = bytes_total - self._last_bytes
        self._last_t, self._last_busy, self._last_bytes = now, busy_total, bytes_total
        if interval > 0:
            util: float | None = min(1.0, busy / interval)
            bw: float | None = min(1.0, moved / (gpu.memory_bandwidth_bytes_s * interval))
        else:
            util = bw = None
        power = None
        if util is not None and math.isfinite(gpu.idle_watts) and math.isfinite(gpu.tdp_watts):
            power = gpu.idle_watts + (gpu.tdp_watts - gpu.idle_watts) * util
        used = eng.memory_used_bytes_per_gpu
        total = gpu.memory_bytes if math.isfinite(gpu.memory_bytes) else None
        samples = [
            GpuSample(
                index=i,
                uuid=self.uuids[i],
                name=f"simulated {gpu.name}",
                utilization_ratio=util,
                memory_used_bytes=used,
                memory_total_bytes=total,
                power_watts=power,
                dram_bandwidth_utilization_ratio=bw,
            )
            for i in range(eng.gpu_count)
        ]
        return HostSample(gpus=samples, driver_version="sim", cuda_version="sim")
