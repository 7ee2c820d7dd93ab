"""Who reads the tokens: the share of a stream's reads the ready reader records in the hub
(``StampedConnection.hub_reads``) against all its reads, for our client's core
(``bench.peers.coreclient``) on the zero-cost simulator of ``bench/capacity.py``.

    .venv/bin/python bench/hub_share.py --streams 256,2048

A read the hub records costs no switch to the stream's greenlet and no framing or parse in
the stream loop (docs/timing.md, "The hub records a steady stream's ordinary tokens itself");
the reads it leaves to the greenlet are a response's first bytes, its end, and anything else
that is not whole plain token events. One process per point (the client runs in it, the
simulator in its own).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def count(streams: int, rounds: int, interval_ms: float) -> dict[str, int]:
    """Run ``streams`` streams of ``rounds`` requests each in this process; the reads counted
    over every connection the client opened."""
    from bench.peers import coreclient  # noqa: I001  (patches the standard library first)
    from bench.capacity import engine_flags
    from bench.peers.simproc import simulator
    from locust_llm.client import kernel_transport

    totals = {"reads": 0, "hub_reads": 0}
    opened: list[kernel_transport.StampedConnection] = []
    init = kernel_transport.StampedConnection.__init__

    def counted_init(self: kernel_transport.StampedConnection, *args: object, **kw: object) -> None:
        init(self, *args, **kw)
        opened.append(self)

    kernel_transport.StampedConnection.__init__ = counted_init  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with simulator(work / "trace.jsonl", *engine_flags(interval_ms), cpu=1,
                       log=work / "sim.log") as url:  # fmt: skip
            coreclient.main(url, streams, streams * rounds, str(work / "out.json"))
    for conn in opened:
        totals["reads"] += conn.reads
        totals["hub_reads"] += conn.hub_reads
    return totals


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", default="256,2048")
    p.add_argument("--rounds", type=int, default=2, help="requests per stream")
    p.add_argument("--interval-ms", type=float, default=20.0)
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a point, in this process
    args = p.parse_args()
    if args.one:
        print(json.dumps(count(args.one, args.rounds, args.interval_ms)))
        return
    print("| streams | reads | recorded in the hub | share |")
    print("|---|---|---|---|")
    for streams in (int(s) for s in args.streams.split(",")):
        out = subprocess.run(
            [sys.executable, __file__, "--one", str(streams), "--rounds", str(args.rounds),
             "--interval-ms", f"{args.interval_ms:g}"],
            check=True, capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip
        got = json.loads(out.stdout.strip().splitlines()[-1])
        share = got["hub_reads"] / got["reads"] if got["reads"] else float("nan")
        print(f"| {streams:,} | {got['reads']:,} | {got['hub_reads']:,} | {share:.1%} |")


if __name__ == "__main__":
    main()
