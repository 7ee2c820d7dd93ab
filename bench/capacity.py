"""Client capacity: token events/s one worker core sustains, its timing error, CPU per token.

The simulator runs pinned to core 1 with the zero-cost engine (every step takes exactly the
token interval, one token per stream per step, fixed output length); the client under test is
pinned to core 0 (``taskset``; every process of a multi-process peer shares that core). Streams
step up at a fixed 20 ms token interval, so the offered rate is streams / interval; the
achieved rate, the delivery lag (client receive - simulator send, first and last token of each
request, wall clock) and the per-request TPOT error come from the simulator's ``--trace``.

    .venv/bin/python bench/capacity.py                          # ours, evalscope, aiperf
    .venv/bin/python bench/capacity.py --clients ours --streams 256,1024
    .venv/bin/python bench/capacity.py --clients ours,evalscope --streams 64 --rounds 4 \
        --split-lengths 16,200

Each row: offered and achieved token events/s, client CPU utilization of its core, CPU us per
token, lag p50/p99 (all, and last tokens only = steady state), TPOT error p99.
``--split-lengths A,B`` runs every point at both fixed output lengths and splits each client's
CPU per token u(L) = per token + per request / L between the two: per request = (u(A) - u(B))
/ (1/A - 1/B), per token = u(B) - per request / B.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.peers import aiperf, evalscope, loops, ours, truth
from bench.peers.common import Load, add_peers_option, cpu_between, use_peers
from bench.peers.simproc import simulator
from bench.peers.tokensource import token_source

CLIENTS = {
    "ours": ours.run,
    "evalscope": evalscope.run,
    "aiperf": aiperf.run,
    "ours-core": loops.core,
    "loop-readline": loops.runner("readline"),
    "loop-drain": loops.runner("drain"),
}
INTERVAL_MS = 20.0
OUTPUT_TOKENS = 200
CLIENT_CPU, SIM_CPU = 0, 1


def engine_flags(interval_ms: float, output_tokens: int = OUTPUT_TOKENS) -> tuple[str, ...]:
    return ("--zero-cost", "--step-overhead-ms", f"{interval_ms:g}", "--output-len",
            f"fixed:{output_tokens}", "--max-num-seqs", "4096", "--num-gpu-blocks-override",
            "400000", "--max-num-batched-tokens", "65536")  # fmt: skip


def serving(source: str, trace: Path, interval_ms: float, output_tokens: int,
            log: Path) -> AbstractContextManager[str]:  # fmt: skip
    """The server under the client: the simulator's zero-cost engine, or the lean token
    source (``lean``: enough token events/s to saturate a client's core)."""
    if source == "lean":
        return token_source(trace, interval_ms=interval_ms, tokens=output_tokens, cpu=SIM_CPU,
                            log=log)  # fmt: skip
    return simulator(trace, *engine_flags(interval_ms, output_tokens), cpu=SIM_CPU, log=log)


def measure(client: str, streams: int, work: Path, *, interval_ms: float, rounds: int,
            output_tokens: int = OUTPUT_TOKENS, source: str = "sim"
            ) -> dict[str, object]:  # fmt: skip
    work.mkdir(parents=True, exist_ok=True)
    trace_path = work / "trace.jsonl"
    load = Load(concurrency=streams, requests=streams * rounds)
    with serving(source, trace_path, interval_ms, output_tokens, work / "sim.log") as url:
        run = CLIENTS[client](url, load, work, cpu=CLIENT_CPU, timeout_s=240)
    trace = truth.read_ok_trace(trace_path)
    pairs = truth.match(run.records, trace).pairs
    out: dict[str, object] = {"client": client, "streams": streams, "source": source,
                              "output_tokens": output_tokens,
                              "offered_events_s": streams / (interval_ms / 1e3),
                              "records": len(run.records), "matched": len(pairs),
                              "failed": run.failed, "note": run.note}  # fmt: skip
    if not pairs:
        return out
    t0 = min(line.arrival for _, line in pairs)
    # to the last token sent or read, whichever is later: a client that fell behind spends CPU
    # on tokens it reads after the server sent its last one, and those tokens are counted
    reads = np.array([r.start_wall_s + r.last_token_s for r, _ in pairs])  # NaN: not known
    t1 = max(line.last_token for _, line in pairs)
    if np.isfinite(reads).any():
        t1 = max(t1, float(np.nanmax(reads)))
    tokens = sum(line.tokens for _, line in pairs)
    cpu = cpu_between(run.cpu_samples, t0, t1)
    first = np.array([r.start_wall_s + r.ttft_s - ln.first_token for r, ln in pairs]) * 1e3
    last = np.array([r.start_wall_s + r.last_token_s - ln.last_token for r, ln in pairs]) * 1e3
    both = np.concatenate([first, last])
    tpot_err = np.array([r.tpot_s - ln.tpot_s for r, ln in pairs]) * 1e3
    sim_tpot = np.array([ln.tpot_s for _, ln in pairs]) * 1e3
    out.update(
        achieved_events_s=tokens / (t1 - t0), cpu_util=cpu / (t1 - t0),
        cpu_us_per_token=cpu / tokens * 1e6 if not math.isnan(cpu) else math.nan,
        lag_p50_ms=float(np.percentile(both, 50)), lag_p99_ms=float(np.percentile(both, 99)),
        last_lag_p99_ms=float(np.percentile(last, 99)),
        tpot_err_p99_ms=float(np.percentile(np.abs(tpot_err), 99)),
        sim_tpot_p50_ms=float(np.median(sim_tpot)),
    )  # fmt: skip
    return out


def table(rows: list[dict[str, object]]) -> str:
    head = ("| client | streams | offered ev/s | achieved ev/s | server TPOT p50 ms | client CPU "
            "| CPU us/token | lag p50 ms | lag p99 ms | last-token lag p99 ms | "
            "TPOT err p99 ms |")  # fmt: skip
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if "achieved_events_s" not in r:
            out.append(f"| {r['client']} | {r['streams']} | {r['offered_events_s']:.0f} "
                       f"| failed: {r['note']} |" + " |" * 7)  # fmt: skip
            continue
        out.append(
            f"| {r['client']} | {r['streams']} | {r['offered_events_s']:.0f} "
            f"| {r['achieved_events_s']:.0f} | {r['sim_tpot_p50_ms']:.2f} "
            f"| {r['cpu_util']:.0%} | {r['cpu_us_per_token']:.1f} | {r['lag_p50_ms']:.2f} "
            f"| {r['lag_p99_ms']:.2f} | {r['last_lag_p99_ms']:.2f} | {r['tpot_err_p99_ms']:.3f} |"
        )  # fmt: skip
    return "\n".join(out)


def split_costs(rows: list[dict[str, object]], lengths: tuple[int, int]) -> list[str]:
    """Each client's CPU per request and per token from its points at the two output lengths
    (same streams): u(L) = per token + per request / L."""
    a, b = lengths
    lines = []
    for client in dict.fromkeys(str(r["client"]) for r in rows):
        by_len = {r["output_tokens"]: r.get("cpu_us_per_token", math.nan)
                  for r in rows if r["client"] == client}  # fmt: skip
        ua, ub = float(by_len.get(a, math.nan)), float(by_len.get(b, math.nan))  # type: ignore[arg-type]
        per_request = (ua - ub) / (1 / a - 1 / b)
        per_token = ub - per_request / b
        lines.append(f"{client}: {per_request:.0f} us per request, {per_token:.2f} us per token "
                     f"(u({a}) = {ua:.2f}, u({b}) = {ub:.2f} us per token)")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", default="ours,evalscope,aiperf")
    p.add_argument("--streams", default="64,256,512,768,1024")
    p.add_argument("--interval-ms", type=float, default=INTERVAL_MS)
    p.add_argument("--rounds", type=int, default=2, help="requests per stream")
    p.add_argument("--json", type=Path)
    p.add_argument("--work", type=Path)
    p.add_argument(
        "--split-lengths",
        default="",
        help="A,B: every point at both output lengths; CPU per request and per token",
    )
    p.add_argument("--source", choices=("sim", "lean"), default="sim",
                   help="the server: the simulator's zero-cost engine (its trace is the truth), "
                   "or the lean token source (bench/peers/tokensource.py), which offers enough "
                   "token events/s to saturate a client's core")  # fmt: skip
    add_peers_option(p)
    args = p.parse_args(argv)
    use_peers(args.peers)
    work = args.work or Path(tempfile.mkdtemp(prefix="capacity-"))
    lengths = tuple(int(n) for n in args.split_lengths.split(",") if n) or (OUTPUT_TOKENS,)
    if len(lengths) not in (1, 2):
        p.error("--split-lengths: two output lengths, e.g. 16,200")
    rows = []
    for length in lengths:
        for client in args.clients.split(","):
            for streams in (int(s) for s in args.streams.split(",")):
                row = measure(client, streams, work / f"{client}-{streams}-{length}",
                              interval_ms=args.interval_ms, rounds=args.rounds,
                              output_tokens=length, source=args.source)  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(table(rows))
    if len(lengths) == 2:
        print("\n".join(split_costs(rows, (lengths[0], lengths[1]))))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
