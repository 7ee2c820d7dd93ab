"""Client scale-out: output tokens per second with 1, 2, 4, 8 Locust workers, each pinned to a
core of its own, against simulators pinned to cores of their own; the ratio to one worker.

Issue 20's target: >= 0.9 x N with N workers, up to the cores there are, the server on its own
cores. Layout (from the cores this process may use, ``os.sched_getaffinity``): the workers take
the first N cores, one each (``taskset -c``); the cores after the largest N are the server's,
one simulator per core (``--zero-cost --step-overhead-ms 2 --output-len fixed:32``: every
engine step costs 2 ms of wall time and nothing else), reached round robin through
``--llm-hosts``; the master (light) shares the last server core. Where the cores run out (a
2-core host asked for 2 workers) the simulator shares the last worker's core, and the summary
says the ratio cannot be read as the client's. The simulators start once; each run is a fresh
master + N workers, one duration stage of ``--streams-per-worker`` x N streams (closed loop),
the warm-up left out; throughput counts the output tokens of the requests that started and
finished in the rest of the stage (``bench/bench_cluster.py``'s ``steady_rates``), CPU per
process from psutil over the same window. Runs are interleaved (1 2 4 8 1 2 4 8 ...) and each
figure is the median over ``--repeat``. ``--netns`` puts each worker in a network namespace of
its own (a veth link to the root namespace, as ``tests/test_cluster_netns.py`` does), where
``ip netns`` is allowed.

    .venv/bin/python bench/scale_out.py --results bench/results/scale_out.md

prints one summary line last (``scale-out: ...``), and with ``--results`` adds the run (command,
machine, date, layout, table) above the earlier runs in that file. Each run is one stage of
``--duration`` plus the start and drain of its master and workers (15 s a run on the 2-core
development VM), so N = 1, 2, 4, 8 at the defaults is 8 runs.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from cluster_utils import LOCUST, LOCUST_LLM, Cluster, Proc, free_port, http_get, wait_until

from bench.bench_cluster import CpuSampler, steady_rates
from bench.kernel_timestamps import write_results

SIM_ARGS = ("--zero-cost", "--step-overhead-ms", "2", "--output-len", "fixed:32")
MAX_TOKENS = 32
TITLE = "# Client scale-out: 1 -> N Locust workers, each on its own core"


@dataclass(frozen=True)
class Layout:
    """Which cores the workers and the server get."""

    worker_cores: tuple[int, ...]  # worker i on worker_cores[i]
    server_cores: tuple[int, ...]  # one simulator per core; the master on the last
    shared: bool  # the largest N leaves no core to the server: it shares the last worker's

    def describe(self) -> str:
        shared = " (shared with the last worker: too few cores)" if self.shared else ""
        return (f"workers on cores {','.join(map(str, self.worker_cores))} (one each), "
                f"{len(self.server_cores)} simulator(s) on cores "
                f"{','.join(map(str, self.server_cores))}{shared}, the master on core "
                f"{self.server_cores[-1]}")  # fmt: skip


def plan(cores: list[int], largest: int) -> Layout:
    """The layout for up to ``largest`` workers on ``cores`` (sorted, as the affinity gives)."""
    if largest < 1:
        raise SystemExit("--workers: each count must be >= 1")
    if largest > len(cores):
        raise SystemExit(f"--workers {largest}: only {len(cores)} core(s) may be used here "
                         f"({','.join(map(str, cores))}); one worker per core")  # fmt: skip
    server = cores[largest:]
    return Layout(tuple(cores[:largest]), tuple(server or cores[-1:]), shared=not server)


def pinned(core: int, cmd: list[str]) -> list[str]:
    return ["taskset", "-c", str(core), *cmd]


def start_sims(cluster: Cluster, layout: Layout, bind: str) -> tuple[list[Proc], list[str]]:
    procs, urls = [], []
    for i, core in enumerate(layout.server_cores):
        cmd = pinned(core, [LOCUST_LLM, "sim", "--bind", bind, "--port", "0", *SIM_ARGS])
        procs.append(cluster.start(f"sim{i}", cmd, split_stdout=True))
    for proc in procs:
        url = proc.first_line(timeout_s=60)
        wait_until(lambda url=url: http_get(url + "/v1/models", 2), 20, f"{proc.name} up")
        urls.append(url)
    return procs, urls


def one_run(cluster: Cluster, tmp: Path, *, workers: int, layout: Layout, urls: list[str],
            sims: list[Proc], bind: str, namespaces: list[Any], streams_per_worker: int,
            duration_s: float, warmup_s: float, name: str) -> dict[str, Any]:  # fmt: skip
    """A master and ``workers`` pinned workers, one stage; its rates and CPU per process."""
    run_dir = tmp / name / "run"
    run_dir.parent.mkdir(parents=True)
    port = free_port(bind)
    master = cluster.start(f"{name}-master", pinned(layout.server_cores[-1], [
        LOCUST, "-f", "locustfiles/sweep.py", "--master", "--headless", "--expect-workers",
        str(workers), "--master-bind-host", bind, "--master-bind-port", str(port),
        "--host", urls[0], "--llm-hosts", ",".join(urls),
        "--llm-concurrency", str(streams_per_worker * workers),
        "--llm-stage-duration", f"{duration_s:g}", "--llm-max-tokens", str(MAX_TOKENS),
        "--llm-run-dir", str(run_dir), "--llm-server-metrics", "none", "--stop-timeout", "5",
    ]))  # fmt: skip
    procs = {}
    for i in range(workers):
        home = tmp / name / f"worker{i}"
        home.mkdir()
        cmd = pinned(layout.worker_cores[i], [LOCUST, "-f", "-", "--worker", "--master-host",
                                               bind, "--master-port", str(port)])  # fmt: skip
        procs[f"worker{i}"] = cluster.start(
            f"{name}-worker{i}", cmd, cwd=home, env={"TMPDIR": str(home), "HOME": str(home)},
            netns=namespaces[i] if namespaces else None,
        )  # fmt: skip
    watched = {**procs, "master": master, **{p.name: p for p in sims}}
    with CpuSampler(watched) as cpu:
        code = master.wait(duration_s + 120)
    for proc in procs.values():
        proc.wait(30)
    if code != 0:
        raise SystemExit(f"{name}: the master exited {code}:\n{master.text()[-2000:]}")
    rates = steady_rates(run_dir, warmup_s)
    cores = cpu.cores(*rates.pop("window"))
    rates["worker_cpu"] = sum(v for k, v in cores.items() if k.startswith("worker"))
    rates["sim_cpu"] = sum(v for k, v in cores.items() if k.startswith("sim"))
    rates["master_cpu"] = cores.get("master", 0.0)
    return rates


def table(results: dict[int, list[dict[str, Any]]], layout: Layout) -> tuple[str, str]:
    """The markdown table and the one-line summary."""
    one = statistics.median(r["tps"] for r in results[min(results)])
    out = ["| workers | cores | output tok/s (median) | runs (tok/s) | per worker | x of 1 worker "
           "| x / N | CPU cores: workers / simulators / master (median) | failed |",
           "|---|---|---:|---|---:|---:|---:|---|---:|"]  # fmt: skip
    ratio_n = 0.0
    for n, rows in sorted(results.items()):
        tps = statistics.median(r["tps"] for r in rows)
        ratio_n = tps / one / (n / min(results))
        cpu = "/".join(f"{statistics.median(r[k] for r in rows):.2f}"
                       for k in ("worker_cpu", "sim_cpu", "master_cpu"))  # fmt: skip
        runs = ", ".join(f"{r['tps']:.0f}" for r in rows)
        cores = ",".join(map(str, layout.worker_cores[:n]))
        out.append(f"| {n} | {cores} | {tps:.0f} | {runs} | {tps / n:.0f} | {tps / one:.2f} "
                   f"| {ratio_n:.2f} | {cpu.replace('/', ' / ')} "
                   f"| {sum(r['failed'] for r in rows)} |")  # fmt: skip
    largest = max(results)
    sim_per_core = statistics.median(r["sim_cpu"] for r in results[largest]) / len(
        layout.server_cores
    )
    ratio = statistics.median(r["tps"] for r in results[largest]) / one
    summary = (f"scale-out: {min(results)} -> {largest} workers x{ratio:.2f} ({ratio_n:.2f} x N; "
               f"target >= 0.90 x N); simulators at {sim_per_core:.2f} of a core each")  # fmt: skip
    if layout.shared:
        summary += "; the simulator shared a worker's core, so this is no measure of the client"
    elif sim_per_core > 0.85:
        summary += "; the simulators were near a full core: server-bound, add server cores"
    return "\n".join(out), summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--workers", default="", help="worker counts (default 1,2,4,8 up to the "
                   "cores, one core left to the server)")  # fmt: skip
    p.add_argument("--streams-per-worker", type=int, default=128)
    p.add_argument("--duration", type=float, default=10.0, help="seconds per run")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds left out of each run")
    p.add_argument("--repeat", type=int, default=2, help="runs per worker count (interleaved)")
    p.add_argument("--netns", action="store_true", help="each worker in its own network namespace")
    p.add_argument("--results", type=Path, help="add this run to a results file (markdown)")
    args = p.parse_args(argv)
    cores = sorted(os.sched_getaffinity(0))
    counts = ([int(c) for c in args.workers.split(",")] if args.workers else
              [n for n in (1, 2, 4, 8) if n < len(cores)] or [1])  # fmt: skip
    layout = plan(cores, max(counts))
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load_start = os.getloadavg()
    print(f"{len(cores)} usable core(s) of {os.cpu_count()}; {layout.describe()}", flush=True)
    results: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
    with tempfile.TemporaryDirectory(prefix="scale-out-") as tmp_name:
        tmp = Path(tmp_name)
        with Cluster(tmp) as cluster:
            namespaces = [cluster.netns(i + 1) for i in range(max(counts))] if args.netns else []
            bind = namespaces[0].host_addr if namespaces else "127.0.0.1"
            sims, urls = start_sims(cluster, layout, bind)
            for rep in range(1, args.repeat + 1):
                for n in counts:
                    row = one_run(cluster, tmp, workers=n, layout=layout, urls=urls, sims=sims,
                                  bind=bind, namespaces=namespaces,
                                  streams_per_worker=args.streams_per_worker,
                                  duration_s=args.duration, warmup_s=args.warmup,
                                  name=f"n{n}-r{rep}")  # fmt: skip
                    results[n].append(row)
                    print(f"# run {rep} {n} worker(s): {row['tps']:.0f} tok/s, CPU workers "
                          f"{row['worker_cpu']:.2f} sims {row['sim_cpu']:.2f}, failed "
                          f"{row['failed']}", flush=True)  # fmt: skip
    text, summary = table(results, layout)
    print(text)
    print(summary)
    if args.results:
        shown = argv if argv is not None else sys.argv[1:]
        command = shlex.join([".venv/bin/python", "bench/scale_out.py", *shown])
        body = (f"Layout: {len(cores)} usable core(s) of {os.cpu_count()}; {layout.describe()}. "
                f"{args.streams_per_worker} streams per worker, closed loop, {args.duration:g} s "
                f"per run ({args.warmup:g} s warm-up left out), {args.repeat} run(s) per count, "
                f"interleaved; network namespaces: {'yes' if args.netns else 'no'}; simulator "
                f"`{' '.join(SIM_ARGS)}`, {MAX_TOKENS} output tokens a request.\n\n"
                f"{text}\n\n{summary}")  # fmt: skip
        write_results(args.results, command, started, load_start, body, title=TITLE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
