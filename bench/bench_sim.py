"""Simulator benchmarks: the concurrency sweep (engine physics) and the HTTP front's chunk rate.

``sweep``: a closed loop of C clients on the engine's virtual clock (no sleeping, no sockets):
each client sends its next request the moment its previous one finishes. Prints the seed's
table (QPS, mean and P99 latency, TTFT, TPOT, GPU busy share, KV use, preemptions) per level.

``tp``: one stream's TPOT on the engine (efficiencies 1, no overhead) against the roofline's
decode floor at tensor-parallel degrees 1, 2, 4, 8 (target: within 1%).

``prefix``: a real server with ``--trace``; clients send prompts that share prefixes, and the
prefix-cache hits the server counts (``/metrics``, usage) are compared with a count made
independently from the trace and the prompts sent (target: equal).

``backlog``: a real ``locust-llm sim`` process per ``--listen-backlog`` value; 2,000 connects
fired at once, each timed from its own connect call until the kernel queued it (a full accept
queue drops the SYN; the client retries after ~1 s).

``front``: a real server with a zero-cost engine (steps take no simulated time) pinned to one
core, and a raw-socket client process on another core holding N concurrent streams; counts
SSE chunks per second the server delivers. ``--library aiohttp`` serves the same chunks
through ``aiohttp.web.StreamResponse`` instead, for the measurement that chose the front.

    .venv/bin/python bench/bench_sim.py sweep
    .venv/bin/python bench/bench_sim.py tp
    .venv/bin/python bench/bench_sim.py prefix
    .venv/bin/python bench/bench_sim.py backlog
    .venv/bin/python bench/bench_sim.py front --streams 100 500
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

import numpy as np

from locust_llm.sim.config import SimConfig
from locust_llm.sim.engine import Engine

# ---------------------------------------------------------------------------------------------
# sweep (virtual time)


def sweep_level(config: SimConfig, concurrency: int, number: int, prompt: int, output: int) -> dict:
    """Run ``number`` requests with ``concurrency`` closed-loop clients; return the row."""
    engine = Engine(config)
    live = [engine.add(prompt, output) for _ in range(min(concurrency, number))]
    sent = len(live)
    done = []
    busy_kv = []
    while engine.has_work:
        result = engine.step()
        busy_kv.append((result.duration_s, engine.kv_usage_ratio))
        for req in result.finished:
            done.append(req)
            if sent < number:
                engine.add(prompt, output, arrival_s=engine.clock_s)
                sent += 1
    e2e = np.array([r.finished_s - r.arrival_s for r in done])
    ttft = np.array([r.first_token_s - r.arrival_s for r in done])
    tpot = np.array([(r.finished_s - r.first_token_s) / (r.output_tokens - 1) for r in done])
    span = engine.clock_s
    weights = np.array([d for d, _ in busy_kv])
    kv = np.array([k for _, k in busy_kv])
    return {
        "concurrency": concurrency,
        "requests": len(done),
        "qps": len(done) / span,
        "tps": len(done) * output / span,
        "latency_mean_ms": e2e.mean() * 1e3,
        "latency_p99_ms": float(np.percentile(e2e, 99)) * 1e3,
        "ttft_mean_ms": ttft.mean() * 1e3,
        "tpot_mean_ms": tpot.mean() * 1e3,
        "gpu_busy": engine.stats.busy_s_total / span,
        "kv_use_mean": float((weights * kv).sum() / weights.sum()),
        "preemptions": engine.stats.preemptions_total,
    }


def cmd_sweep(args: argparse.Namespace) -> None:
    config = SimConfig(
        model=args.model,
        gpu=args.gpu,
        num_gpu_blocks_override=args.kv_blocks,
        step_overhead_s=args.step_overhead_ms / 1e3,
    )
    print(
        f"# {args.model} on {args.gpu}, {args.kv_blocks} KV blocks x 16 tokens, "
        f"prompt {args.prompt} / output {args.output} tokens, closed loop, virtual time"
    )
    print(
        "| concurrency | requests | QPS | TPS (tok/s) | avg latency (ms) | P99 (ms) | "
        "TTFT (ms) | TPOT (ms) | GPU busy | KV use | preemptions |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c, n in zip(args.concurrency, args.number, strict=True):
        r = sweep_level(config, c, n, args.prompt, args.output)
        print(
            f"| {c} | {r['requests']} | {r['qps']:.2f} | {r['tps']:.0f} | "
            f"{r['latency_mean_ms']:.0f} | {r['latency_p99_ms']:.0f} | {r['ttft_mean_ms']:.0f} | "
            f"{r['tpot_mean_ms']:.1f} | {r['gpu_busy']:.0%} | {r['kv_use_mean']:.0%} | "
            f"{r['preemptions']} |"
        )


# ---------------------------------------------------------------------------------------------
# tp (virtual time)


def cmd_tp(args: argparse.Namespace) -> None:
    from locust_llm.roofline.floors import Workload, compute, get_gpu, get_model

    print(
        f"# one stream, prompt 16 / output 65 tokens, efficiencies 1, no step overhead, "
        f"{args.interconnect}"
    )
    print(
        "| model | GPU | TP | floor (ms) | simulated TPOT (ms) | TPOT / floor | all-reduce (ms) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for model in args.model:
        for tp in args.tp:
            config = SimConfig(
                model=model,
                gpu=args.gpu,
                tp=tp,
                interconnect=args.interconnect,
                bandwidth_efficiency=1.0,
                compute_efficiency=1.0,
                step_overhead_s=0.0,
                step_overhead_per_seq_s=0.0,
            )
            try:
                engine = Engine(config)
            except Exception as exc:  # a model that does not fit: say so in the table
                print(f"| {model} | {args.gpu} | {tp} | - | - | - | {str(exc).split('; ')[-1]} |")
                continue
            req = engine.add(16, 65)
            engine.run_until_idle()
            tpot = (req.finished_s - req.first_token_s) / (req.generated - 1)
            r = compute(
                get_model(model),
                get_gpu(args.gpu),
                Workload(context_tokens=48, tp=tp, interconnect=args.interconnect),
            )
            print(
                f"| {model} | {args.gpu} | {tp} | {r.decode_step_floor_s * 1e3:.3f} | "
                f"{tpot * 1e3:.3f} | {tpot / r.decode_step_floor_s:.4f} | "
                f"{r.decode_comm_time_s * 1e3:.3f} |"
            )


# ---------------------------------------------------------------------------------------------
# prefix (real sockets, trace)


def _prefix_prompts(n: int, groups: int, seed: int) -> list[list[str]]:
    """``n`` prompts of one-token words: one of ``groups`` shared prefixes + a unique tail."""
    import random

    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"

    def word() -> str:
        return "".join(rng.choice(letters) for _ in range(4))

    prefixes = [[word() for _ in range(rng.randint(40, 600))] for _ in range(groups)]
    return [
        prefixes[rng.randrange(groups)][: rng.randint(20, 600)]
        + [word() for _ in range(rng.randint(1, 80))]
        for _ in range(n)
    ]


def _independent_hits(prompts: list[list[str]], trace: list[dict], block: int) -> int:
    """Hits from the trace alone: a request reuses the full blocks it shares with the prompt of
    any request whose prefill had finished when it was admitted (never its last token)."""
    by_id = {int(r["client_request_id"]): r for r in trace}
    total = 0
    for i, p in enumerate(prompts):
        me = by_id[i]
        best = 0
        for j, q in enumerate(prompts):
            other = by_id[j]
            if j == i or other["engine_first_token"] is None:
                continue
            if other["engine_first_token"] <= me["admission"] + 1e-6:
                n = 0
                for a, b in zip(p, q, strict=False):
                    if a != b:
                        break
                    n += 1
                best = max(best, n)
        total += min(best // block, (len(p) - 1) // block) * block
    return total


def cmd_prefix(args: argparse.Namespace) -> None:
    import tempfile
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from locust_llm.sim.testing import running_sim, stream_chat
    from locust_llm.sim.trace import read_trace

    prompts = _prefix_prompts(args.requests, args.groups, args.seed)
    usages: dict[int, dict] = {}

    def send(url: str, i: int) -> None:
        usages[i] = stream_chat(url, " ".join(prompts[i]), max_tokens=args.output,
                                request_id=str(i))  # fmt: skip

    with tempfile.TemporaryDirectory() as tmp:
        trace_path = Path(tmp) / "trace.jsonl"
        with running_sim(trace_path=str(trace_path), seed=args.seed) as url:
            with ThreadPoolExecutor(args.concurrency) as pool:
                list(pool.map(lambda i: send(url, i), range(len(prompts))))
            metrics = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
        trace = read_trace(trace_path)

    def metric(name: str) -> float:
        return float(next(x for x in metrics.splitlines() if x.startswith(name)).split()[-1])

    independent = _independent_hits(prompts, trace, 16)
    print(
        f"# {len(prompts)} requests, {args.groups} shared prefixes, concurrency "
        f"{args.concurrency}, {args.output} output tokens, seed {args.seed}"
    )
    print("| count | tokens |")
    print("|---|---:|")
    print(f"| prompt tokens sent | {sum(len(p) for p in prompts)} |")
    print(
        f"| `vllm:prefix_cache_queries_total` | {metric('vllm:prefix_cache_queries_total'):.0f} |"
    )
    print(f"| `vllm:prefix_cache_hits_total` | {metric('vllm:prefix_cache_hits_total'):.0f} |")
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages.values())
    print(f"| sum of `usage.prompt_tokens_details.cached_tokens` | {cached} |")
    print(f"| sum of the trace's `cached_tokens` | {sum(r['cached_tokens'] for r in trace)} |")
    print(f"| independent count from the trace and the prompts | {independent} |")


# ---------------------------------------------------------------------------------------------
# backlog (real sockets)


def cmd_backlog(args: argparse.Namespace) -> None:
    import subprocess

    from locust_llm.sim.testing import burst_connect_times

    print(f"# {args.connects} connects at once on loopback, somaxconn = {_somaxconn()}")
    print("| --listen-backlog | slowest connect (s) | connects > 0.5 s |")
    print("|---:|---:|---:|")
    for backlog in args.backlog:
        cmd = [sys.executable, "-m", "locust_llm.cli", "sim", "--port", "0",
               "--listen-backlog", str(backlog)]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert proc.stdout is not None
            port = int(proc.stdout.readline().strip().rsplit(":", 1)[1])
            times = burst_connect_times(port, args.connects)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        print(f"| {backlog} | {max(times):.3f} | {sum(t > 0.5 for t in times)} |")


def _somaxconn() -> str:
    try:
        with open("/proc/sys/net/core/somaxconn") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


# ---------------------------------------------------------------------------------------------
# front (real sockets)

_BODY = json.dumps(
    {
        "model": "sim",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 0,
        "ignore_eos": True,
        "stream": True,
    }
).encode()


def _request(tokens: int) -> bytes:
    body = _BODY.replace(b'"max_tokens": 0', b'"max_tokens": %d' % tokens)
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
    )


async def _client(port: int, streams: int, tokens: int, seconds: float) -> tuple[int, float]:
    """``streams`` keep-alive connections, each asking again when its stream ends."""
    count = 0
    stop_at = time.monotonic() + seconds
    start = time.monotonic()

    async def one() -> None:
        nonlocal count
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        req = _request(tokens)
        while time.monotonic() < stop_at:
            writer.write(req)
            tail = b""
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                count += data.count(b"data: ")
                tail = (tail + data)[-32:]
                if tail.endswith(b"0\r\n\r\n") and b"[DONE]" in tail + data[-64:]:
                    break
        writer.close()

    await asyncio.gather(*(one() for _ in range(streams)))
    return count, time.monotonic() - start


def _client_proc(port: int, streams: int, tokens: int, seconds: float, q: mp.Queue) -> None:
    if hasattr(os, "sched_setaffinity") and os.cpu_count() and os.cpu_count() > 1:
        os.sched_setaffinity(0, {1})
    q.put(asyncio.run(_client(port, streams, tokens, seconds)))


def _serve_proc(library: str, streams: int, q: mp.Queue, stop: mp.Event) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    asyncio.run(_serve(library, streams, q, stop))


async def _serve(library: str, streams: int, q: mp.Queue, stop: mp.Event) -> None:
    config = SimConfig(
        model="mistral-7b",
        served_model_name="sim",
        zero_cost=True,
        step_overhead_s=0.0,
        max_num_seqs=max(streams, 1) + 8,
        max_num_batched_tokens=65536,
        num_gpu_blocks_override=1_000_000,
    )
    if library == "raw":
        from locust_llm.sim.server import SimServer

        server = SimServer(config)
        await server.start()
        q.put(server.port)
        while not stop.is_set():
            await asyncio.sleep(0.1)
        await server.stop()
        return
    # aiohttp: the same per-step delivery, written through StreamResponse.write
    from aiohttp import web

    from locust_llm.sim.openai_format import ChunkFormatter

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        fmt = ChunkFormatter(chat=True, request_id="x", model="sim", prompt_tokens=1)
        for i in range(body["max_tokens"]):
            await resp.write(fmt.content(" the", i + 1))
            if i % 1 == 0:
                await asyncio.sleep(0)  # one token per "step" per stream, as the engine hands out
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    q.put(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    while not stop.is_set():
        await asyncio.sleep(0.1)
    await runner.cleanup()


def front_rate(library: str, streams: int, tokens: int, seconds: float) -> float:
    """Chunks per second delivered to ``streams`` concurrent streams."""
    ctx = mp.get_context("spawn")
    q, stop = ctx.Queue(), ctx.Event()
    server = ctx.Process(target=_serve_proc, args=(library, streams, q, stop))
    server.start()
    port = q.get(timeout=30)
    client = ctx.Process(target=_client_proc, args=(port, streams, tokens, seconds, q))
    client.start()
    count, elapsed = q.get(timeout=seconds + 60)
    client.join(10)
    stop.set()
    server.join(10)
    if server.is_alive():
        server.kill()
    return count / elapsed


def cmd_front(args: argparse.Namespace) -> None:
    print(
        f"# nproc={os.cpu_count()}, python {sys.version.split()[0]}, {args.tokens} tokens per "
        f"request, {args.seconds:g} s per run, median of {args.repeat}"
    )
    for library in args.library:
        for streams in args.streams:
            rates = [
                front_rate(library, streams, args.tokens, args.seconds) for _ in range(args.repeat)
            ]
            print(
                f"{library:8s} streams={streams:4d} chunks/s median={statistics.median(rates):,.0f}"
                f" runs={', '.join(f'{r:,.0f}' for r in rates)}",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sweep")
    s.add_argument("--model", default="mistral-7b")
    s.add_argument("--gpu", default="rtx4090")
    s.add_argument("--kv-blocks", type=int, default=4096)
    s.add_argument("--prompt", type=int, default=1024)
    s.add_argument("--output", type=int, default=256)
    s.add_argument("--step-overhead-ms", type=float, default=2.0)
    s.add_argument("--concurrency", type=int, nargs="+", default=[1, 10, 50, 100, 200])
    s.add_argument("--number", type=int, nargs="+", default=[10, 20, 100, 200, 400])
    t = sub.add_parser("tp")
    t.add_argument("--model", nargs="+", default=["llama-3.1-8b", "llama-3.1-70b"])
    t.add_argument("--gpu", default="h100-sxm")
    t.add_argument("--tp", type=int, nargs="+", default=[1, 2, 4, 8])
    t.add_argument("--interconnect", default="nvlink")
    p = sub.add_parser("prefix")
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--groups", type=int, default=6)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--output", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    b = sub.add_parser("backlog")
    b.add_argument("--backlog", type=int, nargs="+", default=[100, 4096])
    b.add_argument("--connects", type=int, default=2000)
    f = sub.add_parser("front")
    f.add_argument("--streams", type=int, nargs="+", default=[100, 500])
    f.add_argument("--library", nargs="+", default=["raw", "aiohttp"], choices=["raw", "aiohttp"])
    f.add_argument("--tokens", type=int, default=200)
    f.add_argument("--seconds", type=float, default=5.0)
    f.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    commands = {"sweep": cmd_sweep, "tp": cmd_tp, "prefix": cmd_prefix, "backlog": cmd_backlog}
    {**commands, "front": cmd_front}[args.cmd](args)


if __name__ == "__main__":
    main()
