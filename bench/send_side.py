"""The send side at a burst: how long after a client's start stamp its requests reach the server.

Every user starts together and sends one request (closed loop, ``--streams`` users, as many
requests), against a fresh simulator per run (``bench.peers.simproc.FIDELITY_ENGINE``). Each
record is matched to the simulator's trace (``bench.peers.truth``) and its *upload* taken:
the trace's arrival stamp (``time.time()`` once the request is parsed) - the client's start
stamp, which every TTFT the client reports carries. Clients, alternated ``--runs`` times per
load: ``raw`` (``bench/peers/rawsocket.py``, the floor: a thread per stream whose blocking
socket connects before its start stamp; every thread connects, then all start together at a
barrier, so its burst is as dense as the machine allows; before 2026-12-03 each thread
started as soon as it had connected, and the threads' start-up spread its burst over ~136 ms
at 256 streams against ours' ~62 ms, which let the simulator keep up with it), ``ours`` (the
shipped user: the start stamp before the connect) and ``ours-preconnect``
(``--llm-preconnect``: each user's connection opened before its first request). Reported per
client and load: the median over runs of the mean and p50 upload, the ratio of the mean to
the floor's, and for ours the send delay (``sent_s``: start stamp to the final send's return)
beside it.

    .venv/bin/python bench/send_side.py --streams 64,256 --runs 3
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pandas as pd

from bench.peers import ours, rawsocket, truth
from bench.peers.common import ClientRun, Load
from bench.peers.simproc import FIDELITY_ENGINE, simulator

CLIENTS = {
    "raw": functools.partial(rawsocket.run, together=True),
    "ours": ours.run,
    "ours-preconnect": functools.partial(ours.run, extra=["--llm-preconnect"]),
}


def one_run(client: str, streams: int, work: Path) -> dict[str, float]:
    """One client at one burst: upload mean/p50 (ms), matched and sent counts, send delay."""
    work.mkdir(parents=True, exist_ok=True)
    trace_path = work / "trace.jsonl"
    load = Load(concurrency=streams, requests=streams)
    with simulator(trace_path, *FIDELITY_ENGINE, log=work / "sim.log") as url:
        run: ClientRun = CLIENTS[client](url, load, work)
    pairs = truth.match(run.records, truth.read_ok_trace(trace_path)).pairs
    upload = np.array([line.arrival - rec.start_wall_s for rec, line in pairs]) * 1e3
    out = {"requests": streams, "matched": len(pairs), "failed": run.failed,
           "upload_mean_ms": float(upload.mean()) if len(upload) else float("nan"),
           "upload_p50_ms": float(np.median(upload)) if len(upload) else float("nan")}  # fmt: skip
    parquet = work / "run" / "requests.parquet"
    if parquet.exists():
        sent = pd.read_parquet(parquet, columns=["sent_s"]).sent_s.to_numpy(float) * 1e3
        out["send_mean_ms"] = float(np.nanmean(sent))
    return out


def summarize(runs: dict[tuple[str, int], list[dict[str, float]]]) -> list[dict[str, object]]:
    """Per client and load: medians over runs, and the mean upload's ratio to the floor's."""
    rows = []
    for (client, streams), got in runs.items():
        row: dict[str, object] = {"client": client, "streams": streams, "runs": len(got),
                                  "matched": sum(int(g["matched"]) for g in got),
                                  "requests": sum(int(g["requests"]) for g in got)}  # fmt: skip
        for key in ("upload_mean_ms", "upload_p50_ms", "send_mean_ms"):
            values = [g[key] for g in got if key in g and g[key] == g[key]]
            row[key] = statistics.median(values) if values else float("nan")
        rows.append(row)
    for row in rows:
        floor = next((r for r in rows if r["client"] == "raw" and r["streams"] == row["streams"]),
                     None)  # fmt: skip
        base = float(floor["upload_mean_ms"]) if floor else float("nan")  # type: ignore[arg-type]
        row["ratio_to_raw"] = float(row["upload_mean_ms"]) / base if base else float("nan")  # type: ignore[arg-type]
    return rows


def table(rows: list[dict[str, object]]) -> str:
    head = ("| streams | client | matched / sent | upload mean ms | upload p50 ms | "
            "x raw (mean) | send delay mean ms |")  # fmt: skip
    out = [head, "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['streams']} | {r['client']} | {r['matched']} / {r['requests']} "
                   f"| {r['upload_mean_ms']:.2f} | {r['upload_p50_ms']:.2f} "
                   f"| {r['ratio_to_raw']:.2f} | {r['send_mean_ms']:.2f} |")  # fmt: skip
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", default="64,256")
    p.add_argument("--runs", type=int, default=3, help="runs per client and load (alternated)")
    p.add_argument("--clients", default=",".join(CLIENTS))
    p.add_argument("--work", type=Path)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    clients = [c for c in args.clients.split(",") if c]
    work = args.work or Path(tempfile.mkdtemp(prefix="send-side-"))
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    for streams in (int(s) for s in args.streams.split(",")):
        for rep in range(args.runs):
            for client in clients:
                got = one_run(client, streams, work / f"{streams}-{rep}-{client}")
                runs.setdefault((client, streams), []).append(got)
                print(json.dumps({"client": client, "streams": streams, "run": rep, **got}),
                      flush=True)  # fmt: skip
    rows = summarize(runs)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
          f"{platform.processor() or platform.machine()}")  # fmt: skip
    print(table(rows))
    if args.json:
        every = {f"{client}@{streams}": got for (client, streams), got in runs.items()}
        args.json.write_text(json.dumps({"rows": rows, "runs": every}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
