"""Scrape cost of the GPU exporter: fake source, 8 GPUs, timed through ``generate_latest``.

Run: ``.venv/bin/python bench/bench_exporter.py [--gpus 8] [--scrapes 2000]``. Prints the median,
p90 and max milliseconds per scrape, with and without the host (psutil) readings; the target is
a median under 5 ms. The fake source costs almost nothing, so this measures the Collector and
text exposition; an NVML scrape adds the driver calls on top (see docs/gpu-exporter.md).
"""

from __future__ import annotations

import argparse
import statistics
import time

from prometheus_client import CollectorRegistry, generate_latest

from locust_llm.gpu.collector import GpuCollector
from locust_llm.gpu.fake_source import FakeSource
from locust_llm.gpu.host import WithHost

TARGET_MS = 5.0


def time_scrapes(registry: CollectorRegistry, scrapes: int) -> list[float]:
    """Milliseconds per ``generate_latest`` call, ``scrapes`` times after a short warm-up."""
    for _ in range(20):
        generate_latest(registry)
    out = []
    for _ in range(scrapes):
        start = time.perf_counter()
        generate_latest(registry)
        out.append((time.perf_counter() - start) * 1e3)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--scrapes", type=int, default=2000)
    args = parser.parse_args()
    worst = 0.0
    for label, with_host in (("fake", False), ("fake+host", True)):
        source = FakeSource(args.gpus)
        registry = CollectorRegistry()
        registry.register(GpuCollector(WithHost(source) if with_host else source))
        size = len(generate_latest(registry))
        ms = sorted(time_scrapes(registry, args.scrapes))
        median = statistics.median(ms)
        worst = max(worst, median)
        print(
            f"{label:10s} gpus={args.gpus} scrapes={args.scrapes} bytes={size} "
            f"median={median:.3f}ms p90={ms[int(0.9 * len(ms))]:.3f}ms max={ms[-1]:.3f}ms"
        )
    print(f"target median < {TARGET_MS} ms: {'met' if worst < TARGET_MS else 'MISSED'}")
    return 0 if worst < TARGET_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
