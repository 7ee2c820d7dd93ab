"""The ``cpu`` device: this host's memory bandwidth and compute, measured, as a roofline device.

A CPU-served model (llama.cpp, vLLM's CPU backend) has no GPU preset. ``--gpu cpu`` (report)
describes this machine by a short probe (about a second): memory bandwidth = bytes read +
written per second by numpy copies of a 256 MiB buffer (the best of five repeats: a stream
that does not fit any cache), compute = FLOP/s of a float32 matrix product (the best of five),
memory = the host's RAM (psutil). Each figure's spread (how much slower the slowest repeat
was than the best) goes into the device's ``source``: on a host other processes share, the
same probe's figures move between runs, and a verdict that rests on them says so at a lower
confidence (``locust_llm/report/diagnosis/confidence.py``). The numbers are this host's,
taken when the report runs: run the report on the machine that served, or describe it by hand
(``--bandwidth/--flops/--memory``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from locust_llm.roofline.floors import GpuSpec

COPY_BYTES = 256 * 1024 * 1024
MATMUL_N = 1024
REPEATS = 5
#: run.json/report text that marks a device whose figures a probe on this host measured
PROBED = "measured on this host"


def _timed(work: Callable[[], object], repeats: int) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``work``, after one untimed call (the first
    touches fresh pages: a copy into them took 30x longer here)."""
    work()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        work()
        out.append(time.perf_counter() - t0)
    return out


def copy_times_s(size_bytes: int = COPY_BYTES, repeats: int = REPEATS) -> tuple[float, list[float]]:
    """(bytes read + written per copy, each repeat's seconds) of a numpy copy of ``size_bytes``."""
    src = np.ones(size_bytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    return 2.0 * src.nbytes, _timed(lambda: np.copyto(dst, src), repeats)


def matmul_times_s(n: int = MATMUL_N, repeats: int = REPEATS) -> tuple[float, list[float]]:
    """(FLOPs per product, each repeat's seconds) of an n x n float32 matrix product."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    return 2.0 * n**3, _timed(lambda: a @ b, repeats)


def memory_bandwidth_bytes_s(size_bytes: int = COPY_BYTES, repeats: int = REPEATS) -> float:
    """Best read + write bandwidth of a numpy copy of ``size_bytes`` (bytes/s)."""
    moved, times = copy_times_s(size_bytes, repeats)
    return moved / min(times)  # each byte read once and written once


def spread(times: list[float]) -> float:
    """How much slower the slowest repeat was than the best (0.25: 25% slower)."""
    return max(times) / min(times) - 1.0


def cpu_device() -> GpuSpec:
    """This host as a roofline device (measured now; see the module docstring)."""
    import psutil

    moved, copies = copy_times_s()
    work, products = matmul_times_s()
    bandwidth, flops = moved / min(copies), work / min(products)
    return GpuSpec(
        name="cpu",
        memory_bandwidth_bytes_s=bandwidth,
        flops={"fp16": flops, "fp32": flops},
        memory_bytes=float(psutil.virtual_memory().total),
        source=(
            f"{PROBED}: numpy copy {bandwidth / 1e9:.1f} GB/s, float32 matmul "
            f"{flops / 1e9:.0f} GFLOP/s (best of {len(copies)}; the slowest repeat "
            f"{spread(copies):.0%} and {spread(products):.0%} slower)"
        ),
    )
