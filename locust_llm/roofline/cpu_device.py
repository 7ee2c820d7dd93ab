"""The ``cpu`` device: this host's memory bandwidth and compute, measured, as a roofline device.

A CPU-served model (llama.cpp, vLLM's CPU backend) has no GPU preset. ``--gpu cpu`` (report)
describes this machine by a short probe (about a second): memory bandwidth = bytes read +
written per second by numpy copies of a 256 MiB buffer (the best of a few repeats: a stream
that does not fit any cache), compute = FLOP/s of a float32 matrix product (the best of a few),
memory = the host's RAM (psutil). The numbers are this host's, taken when the report runs: run
the report on the machine that served, or describe it by hand (``--bandwidth/--flops/--memory``).
"""

from __future__ import annotations

import time

import numpy as np

from locust_llm.roofline.floors import GpuSpec

COPY_BYTES = 256 * 1024 * 1024
MATMUL_N = 1024
REPEATS = 3


def memory_bandwidth_bytes_s(size_bytes: int = COPY_BYTES, repeats: int = REPEATS) -> float:
    """Best read + write bandwidth of a numpy copy of ``size_bytes`` (bytes/s)."""
    src = np.ones(size_bytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * src.nbytes / best  # each byte read once and written once


def matmul_flops(n: int = MATMUL_N, repeats: int = REPEATS) -> float:
    """Best FLOP/s of an n x n float32 matrix product (2 n^3 FLOPs)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n**3 / best


def cpu_device() -> GpuSpec:
    """This host as a roofline device (measured now; see the module docstring)."""
    import psutil

    bandwidth, flops = memory_bandwidth_bytes_s(), matmul_flops()
    return GpuSpec(
        name="cpu",
        memory_bandwidth_bytes_s=bandwidth,
        flops={"fp16": flops, "fp32": flops},
        memory_bytes=float(psutil.virtual_memory().total),
        source=(
            f"measured on this host: numpy copy {bandwidth / 1e9:.1f} GB/s, float32 matmul "
            f"{flops / 1e9:.0f} GFLOP/s"
        ),
    )
