"""Cluster benchmarks, measured in one run: client capacity with 1 vs 2 Locust workers, and
throughput with 1 vs 2 simulator instances.

``capacity``: one simulator with a cheap fixed-interval engine (``--zero-cost``: every engine
step takes ``--step-overhead-ms`` and nothing else, so the server keeps up with any load and the
Locust workers are the bottleneck); a master + 1 worker, then a master + 2 workers, each at the
same total concurrency for one duration stage. Throughput = completed requests (and output
tokens) per second over the stage after its warm-up, from requests.parquet. CPU seconds of each
process are sampled with psutil, to show who was busy.

``scaling``: the same master + 2 workers against 1 simulator, then against 2 simulators through
``--llm-hosts URL1,URL2``; each simulator admits at most 2 sequences per batch, so the server is
the bottleneck and a second instance should double throughput.

Configurations are interleaved (A B A B ...) and each figure is the median of ``--repeat`` runs.

    .venv/bin/python bench/bench_cluster.py --repeat 3
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from cluster_utils import Cluster, Proc, read_run

CAPACITY_SIM = ("--zero-cost", "--step-overhead-ms", "2", "--output-len", "fixed:16")
SCALING_SIM = ("--zero-cost", "--step-overhead-ms", "10", "--max-num-seqs", "2",
               "--output-len", "fixed:20")  # fmt: skip


class CpuSampler:
    """Samples the CPU seconds (user + system) of processes every 0.25 s until stopped."""

    def __init__(self, procs: dict[str, Proc]) -> None:
        self.handles = {name: psutil.Process(p.pid) for name, p in procs.items()}
        self.samples: dict[str, list[tuple[float, float]]] = {name: [] for name in procs}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            now = time.time()
            for name, handle in self.handles.items():
                try:
                    times = handle.cpu_times()
                    self.samples[name].append((now, times.user + times.system))
                except psutil.Error:
                    pass

    def cores(self, start: float, end: float) -> dict[str, float]:
        """CPU cores each process used on average between two wall-clock instants."""
        out = {}
        for name, series in self.samples.items():
            inside = [(t, s) for t, s in series if start <= t <= end]
            if len(inside) >= 2:
                (t0, s0), (t1, s1) = inside[0], inside[-1]
                out[name] = round((s1 - s0) / (t1 - t0), 2)
        return out

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def steady_rates(run_dir: Path, warmup_s: float) -> dict[str, float]:
    """Requests/s and output tokens/s over the stage window after its warm-up."""
    info, requests = read_run(run_dir)
    stage = info["stages"][0]
    start, end = stage["start_wall_s"] + warmup_s, stage["end_wall_s"]
    ok = requests[requests["ok"]]
    done_at = ok["start_wall_s"] + ok["e2e_s"]
    window = ok[(ok["start_wall_s"] >= start) & (done_at <= end)]
    span = end - start
    return {
        "rps": len(window) / span,
        "tps": float(window["output_tokens"].sum()) / span,
        "failed": int((~requests["ok"] & (requests["error_kind"] != "cancelled")).sum()),
        "window": (start, end),
    }


def one_run(tmp: Path, *, workers: int, sims: int, sim_args: tuple[str, ...], concurrency: int,
            duration_s: float, warmup_s: float, max_tokens: int) -> dict[str, Any]:  # fmt: skip
    """Start sims, a master and workers; run one stage; return its rates and CPU use."""
    with Cluster(tmp) as cluster:
        urls = [cluster.sim(*sim_args, name=f"sim{i}")[1] for i in range(sims)]
        run_dir = tmp / "run"
        master, port = cluster.master(urls[0], [
            "--llm-concurrency", str(concurrency), "--llm-stage-duration", str(duration_s),
            "--llm-max-tokens", str(max_tokens), "--llm-run-dir", str(run_dir),
            "--llm-server-metrics", "none", "--stop-timeout", "5", "--llm-hosts", ",".join(urls),
        ], workers=workers)  # fmt: skip
        procs = {f"worker{i}": cluster.worker(i, "127.0.0.1", port) for i in range(1, workers + 1)}
        watched = {**procs, "master": master, **{p.name: p for p in cluster.procs[:sims]}}
        with CpuSampler(watched) as cpu:
            master.wait(duration_s + 90)
        rates = steady_rates(run_dir, warmup_s)
    rates["cpu_cores"] = cpu.cores(*rates.pop("window"))
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--duration", type=float, default=12.0, help="seconds per stage")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds left out per stage")
    parser.add_argument("--capacity-concurrency", type=int, default=128)
    parser.add_argument("--scaling-concurrency", type=int, default=8)
    parser.add_argument("--only", choices=("capacity", "scaling"), help="run one half only")
    args = parser.parse_args()

    configs = {
        "capacity, 1 worker": dict(workers=1, sims=1, sim_args=CAPACITY_SIM,
                                   concurrency=args.capacity_concurrency, max_tokens=16),
        "capacity, 2 workers": dict(workers=2, sims=1, sim_args=CAPACITY_SIM,
                                    concurrency=args.capacity_concurrency, max_tokens=16),
        "scaling, 1 simulator": dict(workers=2, sims=1, sim_args=SCALING_SIM,
                                     concurrency=args.scaling_concurrency, max_tokens=20),
        "scaling, 2 simulators": dict(workers=2, sims=2, sim_args=SCALING_SIM,
                                      concurrency=args.scaling_concurrency, max_tokens=20),
    }  # fmt: skip
    if args.only:
        configs = {k: v for k, v in configs.items() if k.startswith(args.only)}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
    for rep in range(args.repeat):
        for name, config in configs.items():
            with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
                row = one_run(Path(tmp), duration_s=args.duration, warmup_s=args.warmup,
                              **config)  # fmt: skip
            results[name].append(row)
            print(f"# run {rep + 1} {name}: {row['rps']:.1f} req/s, {row['tps']:.0f} tok/s, "
                  f"failed {row['failed']}, CPU cores {row['cpu_cores']}", flush=True)  # fmt: skip

    cpu_model = next((line.split(":", 1)[1].strip() for line in subprocess.run(
        ["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines()
        if line.startswith("Model name")), platform.processor())  # fmt: skip
    print(f"\nnproc={os.cpu_count()} cpu={cpu_model!r} python={platform.python_version()} "
          f"date={datetime.date.today()} repeat={args.repeat} duration={args.duration}s "
          f"warmup={args.warmup}s")  # fmt: skip
    print(
        "\n| configuration | req/s (median) | output tok/s (median) | runs (req/s) "
        "| CPU cores: workers / sims / master (median) | req/s per worker core |"
    )
    print("|---|---:|---:|---|---|---:|")
    medians = {}
    for name, rows in results.items():
        rps = statistics.median(r["rps"] for r in rows)
        tps = statistics.median(r["tps"] for r in rows)
        medians[name] = rps

        def cores(row: dict[str, Any], prefix: str) -> float:
            return sum(v for k, v in row["cpu_cores"].items() if k.startswith(prefix))

        worker_cores = statistics.median(cores(r, "worker") for r in rows)
        sim_cores = statistics.median(cores(r, "sim") for r in rows)
        master_cores = statistics.median(cores(r, "master") for r in rows)
        per_core = statistics.median(r["rps"] / max(cores(r, "worker"), 1e-9) for r in rows)
        runs = ", ".join(f"{r['rps']:.1f}" for r in rows)
        print(f"| {name} | {rps:.1f} | {tps:.0f} | {runs} | {worker_cores:.2f} / {sim_cores:.2f}"
              f" / {master_cores:.2f} | {per_core:.0f} |")  # fmt: skip
    if "capacity, 1 worker" in medians:
        capacity = medians["capacity, 2 workers"] / medians["capacity, 1 worker"]
        print(f"\nclient capacity, 2 workers / 1 worker: x{capacity:.2f} (target >= 1.8)")
    if "scaling, 1 simulator" in medians:
        scaling = medians["scaling, 2 simulators"] / medians["scaling, 1 simulator"]
        print(f"throughput, 2 simulators / 1 simulator: x{scaling:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
