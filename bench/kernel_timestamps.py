"""Kernel receive stamps vs geventhttpclient: timing error against the simulator's truth.

The shipped user (``bench/client_variants/ours.py``, the same as ``locustfiles/sweep.py``) run
twice per load, once per ``--llm-transport``: ``ghc`` (each line timed when Python reads it) and
``kernel`` (each line timed by the kernel's receive stamp of the read that completed it). Same
set-up as ``bench/client_choice.py`` (its ``measure`` is reused): a fresh simulator pinned to
core 1 (zero-cost engine, one token per stream every 20 ms, 200 tokens), one Locust process
pinned to core 0, closed loop, every request matched to the simulator's trace by its id.

    .venv/bin/python bench/kernel_timestamps.py --json /tmp/kt.json

Columns per transport and load (streams on the one worker core): first-token lag p99 (client
first-token time - simulator send time, wall clock), last-token lag p99, TTFT error p99
(|client TTFT - trace TTFT|), ITL error p99 (|client TPOT - trace TPOT|: the trace has each
request's first and last token, so the per-request mean ITL is what can be checked), CPU us per
token (process tree, user + system, first arrival .. last token), and the client delay the
kernel transport measured itself: p99 of (user-space read - kernel stamp) of the first token.
"""

from __future__ import annotations

import argparse
import json
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

from bench import client_choice

TRANSPORTS = ("ghc", "kernel")


def extra_columns(work: Path) -> dict[str, Any]:
    """Last-token lag and the client delay from the run's records and the trace."""
    df = pd.read_parquet(work / "run" / "requests.parquet")
    df = df[df.ok]
    trace = client_choice.read_trace(work / "trace.jsonl")
    df = df[df.request_id.isin(list(trace))]
    last_true = np.array([trace[i]["last_token"] for i in df.request_id])
    last_lag = df.start_wall_s.to_numpy() + df.last_token_s.to_numpy() - last_true
    delay = (df.first_token_user_s - df.first_token_kernel_s).dropna().to_numpy()
    return {
        "last_lag_p99_ms": float(np.percentile(last_lag, 99) * 1e3) if len(last_lag) else None,
        "client_delay_p50_ms": float(np.percentile(delay, 50) * 1e3) if len(delay) else None,
        "client_delay_p99_ms": float(np.percentile(delay, 99) * 1e3) if len(delay) else None,
    }


def measure(transport: str, streams: int, rounds: int, work: Path) -> dict[str, Any]:
    os.environ["LOCUST_LLM_TRANSPORT"] = transport  # the Locust child reads --llm-transport
    try:
        row = client_choice.measure("ours", streams, rounds, work)
    finally:
        os.environ.pop("LOCUST_LLM_TRANSPORT", None)
    row["transport"] = transport
    if row.get("matched"):
        row.update(extra_columns(work))
    return row


def _f(v: Any, fmt: str) -> str:
    return "n/a" if v is None or v != v else format(v, fmt)


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| transport | streams | ok/sent | client CPU | CPU us/token | first-token lag p99 ms "
            "| last-token lag p99 ms | TTFT err p99 ms | ITL err p99 ms "
            "| client delay p50 / p99 ms |")  # fmt: skip
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if "events_s" not in r:
            why = f"failed (rc={r.get('rc')}; {r.get('first_error', '')[:60]})"
            cells = f"| {r['transport']} | {r['streams']} | 0/{r['records']} | {why} |"
            out.append(cells + " |" * 6)
            continue
        out.append(
            f"| {r['transport']} | {r['streams']} | {r['matched']}/{r['records']} "
            f"| {r['cpu_util']:.0%} | {_f(r['cpu_us_per_token'], '.1f')} "
            f"| {r['first_lag_p99_ms']:.2f} | {_f(r.get('last_lag_p99_ms'), '.2f')} "
            f"| {r['ttft_err_p99_ms']:.2f} | {r['tpot_err_p99_ms']:.3f} "
            f"| {_f(r.get('client_delay_p50_ms'), '.2f')} / "
            f"{_f(r.get('client_delay_p99_ms'), '.2f')} |"
        )  # fmt: skip
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--transports", default=",".join(TRANSPORTS))
    p.add_argument("--streams", default="64,256,512,1024")
    p.add_argument("--rounds", type=int, default=2, help="requests per stream")
    p.add_argument("--work", type=Path)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="kernel-ts-"))
    print(f"work dir {work}; {platform.node()} nproc={os.cpu_count()} "
          f"load average {os.getloadavg()} {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
          flush=True)  # fmt: skip
    rows = []
    for streams in (int(s) for s in args.streams.split(",")):
        for transport in args.transports.split(","):
            row = measure(transport, streams, args.rounds, work / f"{transport}-{streams}")
            row["load_average_1m"] = os.getloadavg()[0]
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.json:
                args.json.write_text(json.dumps(rows, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
