"""Which HTTP client for the LLM user: token events/s and CPU per core, timing error vs truth.

The same Locust user logic (per-line ``perf_counter``, ``locust_llm.client.sse.parse_chunk``,
``locust_llm.metrics.summarize_stream``) over different transports, each a locustfile in
``bench/client_variants/``:

- ``ours``: ``locust_llm.client.user.ChatUser`` as shipped (geventhttpclient, ``readline(b"\\n")``);
- ``ghc-readline``: the same transport in the bench's minimal user (no locust_llm plugin);
- ``fast-iterlines``: FastHttpUser ``client.iter_lines(..., method="POST")`` (1024-byte reads);
- ``fast-readline``: FastHttpUser ``post(stream=True)`` + ``resp.stream.readline(b"\\n")``;
- ``requests-iterlines``: HttpUser (requests) ``post(stream=True)`` + ``resp.iter_lines()``;
- ``fast-sseclient``: sseclient-py ``SSEClient(resp)`` over FastHttpUser's streamed response.

Each point: a fresh simulator pinned to core 1 (zero-cost engine, one token per stream per
20 ms, 200 tokens), the client pinned to core 0, closed loop at 1/64/256/512 streams with a few
requests per stream. Every request carries its id in ``X-Request-Id``; the simulator's trace
(``client_request_id``) gives its true arrival, first and last token send times and token count.

    .venv/bin/python bench/client_choice.py --json /tmp/choice.json
    .venv/bin/python bench/client_choice.py --variants ours,fast-readline --streams 256

Columns: achieved token events/s (trace tokens / first arrival .. last token), the client's
CPU (process tree, user + system, in that window) as % of its core and us per token, token
events per CPU-second (= per fully used worker core), TTFT error (client TTFT - (trace
first_token - arrival)) and TPOT error (client - trace) mean and p99 of |error|, the largest
first-token delivery lag (client receive - simulator send, wall clock), the
largest garbage-collector pause in the client inside the window.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.capacity import engine_flags
from bench.peers import ours
from bench.peers.common import Load, cpu_between, run_measured
from bench.peers.simproc import simulator

ROOT = Path(__file__).resolve().parents[1]
VARIANT_DIR = ROOT / "bench" / "client_variants"
VARIANTS = {
    "ours": "ours.py",
    "ours-counted": "ours_counted.py",  # ours + read counters (bench/kernel_timestamps.py)
    "ghc-readline": "ghc_readline.py",
    "fast-readline": "fast_readline.py",
    "fast-iterlines": "fast_iterlines.py",
    "requests-iterlines": "requests_iterlines.py",
    "fast-sseclient": "fast_sseclient.py",
}
#: the variants that are locust_llm's own user (run with --llm-* flags, records in the run dir)
OURS = ("ours", "ours-counted")
INTERVAL_MS = 20.0
CLIENT_CPU, SIM_CPU = 0, 1


def _locust() -> str:
    return str(Path(sys.executable).parent / "locust")


def command(variant: str, url: str, streams: int, rounds: int, work: Path,
            run_time_s: int) -> list[str]:  # fmt: skip
    """The client's command line for one point."""
    locustfile = str(VARIANT_DIR / VARIANTS[variant])
    if variant in OURS:
        load = Load(concurrency=streams, requests=streams * rounds)
        return ours.command(url, load, work, locustfile=locustfile)
    return [_locust(), "-f", locustfile, "--host", url, "--headless", "--only-summary",
            "-u", str(streams), "-r", str(streams), "--run-time", f"{run_time_s}s",
            "--stop-timeout", "5", "--loglevel", "WARNING"]  # fmt: skip


def read_trace(path: Path) -> dict[str, dict[str, Any]]:
    """The trace's successful streamed requests by client request id."""
    out: dict[str, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as f:
        for raw in f:
            if not raw.strip():
                continue
            d = json.loads(raw)
            if d.get("outcome") == "ok" and d.get("first_token") is not None:
                out[d["client_request_id"]] = d
    return out


def read_client(variant: str, work: Path) -> list[dict[str, Any]]:
    """The client's per-request results (id, ok, start_wall_s, ttft_s, tpot_s, last_token_s)."""
    if variant in OURS:
        path = work / "run" / "requests.parquet"
        if not path.exists():
            return []
        df = pd.read_parquet(path)
        df = df[df.error_kind != "cancelled"]
        return [{"id": r.request_id, "ok": bool(r.ok), "start_wall_s": r.start_wall_s,
                 "ttft_s": r.ttft_s, "tpot_s": r.tpot_s, "last_token_s": r.last_token_s,
                 "error": r.error_message} for r in df.itertuples()]  # fmt: skip
    path = work / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _p99_abs(a: np.ndarray) -> float:
    return float(np.percentile(np.abs(a), 99)) if len(a) else math.nan


def summarize(variant: str, streams: int, records: list[dict[str, Any]],
              trace: dict[str, dict[str, Any]], samples: list[tuple[float, float]],
              gc_events: list[list[float]]) -> dict[str, Any]:  # fmt: skip
    """One table row from the client's records, the trace and the CPU samples."""
    row: dict[str, Any] = {"variant": variant, "streams": streams, "records": len(records),
                           "failed": sum(not r["ok"] for r in records)}  # fmt: skip
    pairs = [(r, trace[r["id"]]) for r in records if r["ok"] and r["id"] in trace]
    row["matched"] = len(pairs)
    errors = [r["error"] for r in records if not r["ok"]]
    row["first_error"] = errors[0] if errors else ""
    if not pairs:
        return row
    t0 = min(t["arrival"] for _, t in pairs)
    t1 = max(t["last_token"] for _, t in pairs)
    tokens = sum(int(t["tokens_sent"]) for _, t in pairs)
    cpu = cpu_between(samples, t0, t1)
    pauses = [(ms, gen) for wall, ms, gen in gc_events if t0 <= wall <= t1]
    ttft_err = np.array([r["ttft_s"] - (t["first_token"] - t["arrival"]) for r, t in pairs])
    tpot_err = np.array([r["tpot_s"] - (t["last_token"] - t["first_token"])
                         / (int(t["tokens_sent"]) - 1) for r, t in pairs])  # fmt: skip
    lag = np.array([r["start_wall_s"] + r["ttft_s"] - t["first_token"] for r, t in pairs])
    row.update(
        window_s=t1 - t0, tokens=tokens, events_s=tokens / (t1 - t0), cpu_s=cpu,
        cpu_util=cpu / (t1 - t0), cpu_us_per_token=cpu / tokens * 1e6,
        events_per_core_s=tokens / cpu if cpu > 0 else math.nan,
        ttft_err_mean_ms=float(ttft_err.mean() * 1e3), ttft_err_p99_ms=_p99_abs(ttft_err) * 1e3,
        tpot_err_mean_ms=float(np.nanmean(tpot_err) * 1e3),
        tpot_err_p99_ms=_p99_abs(tpot_err[~np.isnan(tpot_err)]) * 1e3,
        first_lag_p99_ms=float(np.percentile(lag, 99) * 1e3),
        gc_max_ms=max((ms for ms, _ in pauses), default=0.0), gc_count=len(pauses),
        gc_total_ms=sum(ms for ms, _ in pauses), gc_gen2=sum(gen == 2 for _, gen in pauses),
    )  # fmt: skip
    return row


def measure(variant: str, streams: int, rounds: int, work: Path) -> dict[str, Any]:
    """Run one variant at one concurrency against a fresh pinned simulator."""
    work.mkdir(parents=True, exist_ok=True)
    trace_path = work / "trace.jsonl"
    out = work / "results.jsonl"
    per_request_s = 200 * INTERVAL_MS / 1e3
    run_time_s = int(rounds * per_request_s * 4 + 30)
    env = {"PYTHONPATH": str(ROOT), "CHOICE_OUT": str(out), "CHOICE_REQUESTS": str(rounds)}
    with simulator(trace_path, *engine_flags(INTERVAL_MS), cpu=SIM_CPU,
                   log=work / "sim.log") as url:  # fmt: skip
        cmd = command(variant, url, streams, rounds, work, run_time_s)
        rc, samples, wall = run_measured(cmd, timeout_s=run_time_s + 30, cwd=ROOT, env=env,
                                         log=work / "client.log", cpu=CLIENT_CPU)  # fmt: skip
    gc_path = Path(str(out) + ".gc.json")
    gc_events = json.loads(gc_path.read_text()) if gc_path.exists() else []
    row = summarize(variant, streams, read_client(variant, work), read_trace(trace_path),
                    samples, gc_events)  # fmt: skip
    row.update(rc=rc, wall_s=wall, rounds=rounds)
    return row


def _f(v: Any, fmt: str) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of the rows."""
    head = ("| variant | streams | ok/sent | achieved ev/s | client CPU | CPU us/token "
            "| ev per CPU-s | TTFT err mean ms | TTFT err p99 ms | TPOT err mean ms "
            "| TPOT err p99 ms | first-token lag p99 ms | GC max ms |")  # fmt: skip
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if "events_s" not in r:
            out.append(f"| {r['variant']} | {r['streams']} | {r.get('matched', 0)}/"
                       f"{r['records']} | no matched records (rc={r.get('rc')}; "
                       f"{r.get('first_error', '')[:60]}) |" + " |" * 9)  # fmt: skip
            continue
        out.append(
            f"| {r['variant']} | {r['streams']} | {r['matched']}/{r['records']} "
            f"| {r['events_s']:.0f} | {r['cpu_util']:.0%} | {_f(r['cpu_us_per_token'], '.1f')} "
            f"| {_f(r['events_per_core_s'], '.0f')} | {r['ttft_err_mean_ms']:.2f} "
            f"| {r['ttft_err_p99_ms']:.2f} | {r['tpot_err_mean_ms']:.3f} "
            f"| {r['tpot_err_p99_ms']:.3f} | {r['first_lag_p99_ms']:.2f} "
            f"| {r['gc_max_ms']:.1f} |"
        )  # fmt: skip
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--streams", default="1,64,256,512")
    p.add_argument("--rounds", type=int, default=2, help="requests per stream")
    p.add_argument("--rounds-single", type=int, default=4, help="requests at 1 stream")
    p.add_argument("--work", type=Path)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="client-choice-"))
    print(f"work dir {work}; {platform.node()} nproc={os.cpu_count()} "
          f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}", flush=True)  # fmt: skip
    rows = []
    for streams in (int(s) for s in args.streams.split(",")):
        for variant in args.variants.split(","):
            rounds = args.rounds_single if streams == 1 else args.rounds
            row = measure(variant, streams, rounds, work / f"{variant}-{streams}")
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.json:
                args.json.write_text(json.dumps(rows, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
