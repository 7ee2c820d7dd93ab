"""Timing fidelity against ground truth: ours and peer clients on the simulator's ``--trace``.

For every load (closed loop at concurrency 1, 16, 64, 256; Poisson arrivals at two rates) and
every client, a fresh simulator (real step-time physics, ``bench.peers.simproc.FIDELITY_ENGINE``)
writes its per-request trace; the client's records, converted to our definitions, are matched to
it and the TTFT / TPOT / ITL / E2E errors summarized (mean and p99 of |error|, ms and %), with the
client's delivery lag and its CPU seconds per output token in the same window.

    .venv/bin/python bench/fidelity.py                      # ours + evalscope + aiperf, full
    .venv/bin/python bench/fidelity.py --quick --clients ours --json out.json

Peers run from their own virtualenvs (docs/metrics.md says how to install them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.peers import aiperf, evalscope, loops, ours, rawsocket, truth
from bench.peers.common import ClientRun, Load, Timed, add_peers_option, cpu_between, use_peers
from bench.peers.simproc import FIDELITY_ENGINE, simulator

CLIENTS = {"raw": rawsocket.run, "ours": ours.run, "evalscope": evalscope.run,
           "aiperf": aiperf.run, "ours-core": loops.core, "loop-readline": loops.runner("readline"),
           "loop-drain": loops.runner("drain")}  # fmt: skip
FULL = (Load(concurrency=1, requests=24), Load(concurrency=16, requests=96),
        Load(concurrency=64, requests=256), Load(concurrency=256, requests=512),
        Load(rate=8, duration_s=15), Load(rate=32, duration_s=15))  # fmt: skip
QUICK = (Load(concurrency=1, requests=8), Load(concurrency=16, requests=48),
         Load(rate=16, duration_s=3))  # fmt: skip


def measure(client: str, load: Load, work: Path) -> dict[str, object]:
    """One client at one load against a fresh simulator; the summary as a dict."""
    work.mkdir(parents=True, exist_ok=True)
    trace_path = work / "trace.jsonl"
    with simulator(trace_path, *FIDELITY_ENGINE, log=work / "sim.log") as url:
        run: ClientRun = CLIENTS[client](url, load, work)
    save_run(run, work / "client_run.json")
    return analyze(work)


def save_run(run: ClientRun, path: Path) -> None:
    """Keep a client's converted records and CPU samples beside its trace (for --analyze)."""
    data = {"client": run.client, "load": dataclasses.asdict(run.load), "failed": run.failed,
            "note": run.note, "cpu_samples": run.cpu_samples,
            "records": [dataclasses.asdict(r) for r in run.records]}  # fmt: skip
    path.write_text(json.dumps(data))


def analyze(work: Path) -> dict[str, object]:
    """Match a saved client run to its trace and summarize (see ``bench.peers.truth``)."""
    data = json.loads((work / "client_run.json").read_text())
    load = Load(**data["load"])
    run = ClientRun(data["client"], load, [Timed(**r) for r in data["records"]],
                    failed=data["failed"], note=data["note"],
                    cpu_samples=[tuple(s) for s in data["cpu_samples"]])  # fmt: skip
    client = run.client
    trace = truth.read_ok_trace(work / "trace.jsonl")
    matched = truth.match(run.records, trace)
    pairs = matched.pairs
    out: dict[str, object] = {
        "client": client, "load": load.label, "records": len(run.records), "failed": run.failed,
        "trace_ok": len(trace), "matched": len(pairs), "ambiguous": matched.ambiguous,
        "note": run.note,
    }  # fmt: skip
    if not pairs:
        return out
    out["errors"] = truth.error_summary(pairs, origin="client")
    out["errors_server"] = truth.error_summary(pairs, origin="server")
    out["lag"] = truth.delivery_lags(pairs)
    out["within_target"] = truth.within_target(out["errors"])  # type: ignore[arg-type]
    t0 = min(line.arrival for _, line in pairs)
    t1 = max(line.last_token for _, line in pairs)
    tokens = sum(line.tokens for _, line in pairs)
    cpu = cpu_between(run.cpu_samples, t0, t1)
    out["cpu_s"] = cpu
    out["tokens"] = tokens
    out["cpu_us_per_token"] = cpu / tokens * 1e6 if tokens and not math.isnan(cpu) else math.nan
    return out


def table(results: list[dict[str, object]]) -> str:
    """Markdown: errors vs the client-origin truth (delivery), then the server-origin TTFT/E2E."""
    head = ("| load | client | n | TTFT err mean ms (%) | TTFT p99 ms | TPOT err mean ms (%) | "
            "TPOT p99 ms | ITL err mean ms | E2E err mean ms (%) | E2E p99 ms | lag p99 ms | "
            "upload p50 ms | TTFT err vs server ms (%) | E2E err vs server ms (%) | "
            "CPU us/token | within 1%/0.2ms |")  # fmt: skip
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        e, es = r.get("errors"), r.get("errors_server")
        if not e or not es:
            rows.append(f"| {r['load']} | {r['client']} | 0 | {r.get('note', '')} |" + " |" * 12)
            continue
        ok = r["within_target"]
        bad = ",".join(k for k, v in ok.items() if not v)
        verdict = f"NO: {bad}" if bad else "yes"
        rows.append(
            f"| {r['load']} | {r['client']} | {r['matched']} "
            f"| {e['ttft']['mean_err_ms']:+.3f} ({e['ttft']['mean_err_pct']:+.2f}) "
            f"| {e['ttft']['p99_abs_err_ms']:.2f} "
            f"| {e['tpot']['mean_err_ms']:+.4f} ({e['tpot']['mean_err_pct']:+.2f}) "
            f"| {e['tpot']['p99_abs_err_ms']:.3f} | {e['itl']['mean_err_ms']:+.4f} "
            f"| {e['e2e']['mean_err_ms']:+.3f} ({e['e2e']['mean_err_pct']:+.2f}) "
            f"| {e['e2e']['p99_abs_err_ms']:.2f} | {r['lag'].get('lag_p99_ms', math.nan):.2f} "
            f"| {r['lag'].get('upload_p50_ms', math.nan):.2f} "
            f"| {es['ttft']['mean_err_ms']:+.3f} ({es['ttft']['mean_err_pct']:+.1f}) "
            f"| {es['e2e']['mean_err_ms']:+.3f} ({es['e2e']['mean_err_pct']:+.2f}) "
            f"| {r['cpu_us_per_token']:.1f} | {verdict} |"
        )  # fmt: skip
    return "\n".join(rows)


def _order(path: Path) -> tuple[int, int]:
    index, _, client = path.name.partition("-")
    return int(index), list(CLIENTS).index(client) if client in CLIENTS else 99


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clients", default="raw,ours,evalscope,aiperf")
    p.add_argument("--quick", action="store_true", help="the reduced CI form (a few s a point)")
    p.add_argument("--loads", default="", help="subset of load indexes, e.g. 0,2")
    p.add_argument("--json", type=Path, help="write all results as JSON")
    p.add_argument("--work", type=Path, help="keep client/sim outputs here")
    p.add_argument("--analyze", type=Path, metavar="WORK", help="re-analyze a kept --work dir")
    add_peers_option(p)
    args = p.parse_args(argv)
    use_peers(args.peers)
    if args.analyze:
        done = [analyze(d) for d in sorted(args.analyze.iterdir(), key=_order)
                if (d / "client_run.json").exists()]  # fmt: skip
        print(table(done))
        if args.json:
            args.json.write_text(json.dumps(done, indent=1))
        return 0
    loads = QUICK if args.quick else FULL
    if args.loads:
        loads = tuple(loads[int(i)] for i in args.loads.split(","))
    clients = [c for c in args.clients.split(",") if c]
    unknown = [c for c in clients if c not in CLIENTS]
    if unknown:
        p.error(f"unknown clients {unknown}; known: {', '.join(CLIENTS)}")
    work = args.work or Path(tempfile.mkdtemp(prefix="fidelity-"))
    results = []
    for i, load in enumerate(loads):
        for client in clients:
            started = time.time()
            res = measure(client, load, work / f"{i}-{client}")
            res["bench_wall_s"] = round(time.time() - started, 1)
            results.append(res)
            brief = {k: v for k, v in res.items() if k not in ("errors", "errors_server")}
            print(json.dumps(brief), flush=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
