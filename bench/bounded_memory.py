"""Bounded reads: how much a reading process's peak RSS grows on answers that never end.

    .venv/bin/python bench/bounded_memory.py [--repeat 3]

The real ``locust`` command (one process, 2 users, 8 requests) against the test suite's
misbehaving server (``tests/test_bounded_memory.py``: standard library, 127.0.0.1, port 0),
which answers two of the requests with a 128 MiB answer generated as it is sent: one SSE line
without a newline, or one non-streamed JSON body. Each case runs on both transports
(``kernel``: our HTTP/1.1 reader; ``ghc``: geventhttpclient), ``--repeat`` times, alternated.
The figure is the growth of the process's peak RSS (``VmHWM``, reset when the load starts, read
at each request event) over its RSS at the load's start; the control rows raise a limit to
64 MiB, where the client must hold what it read. Also counted: the records (every request one
record, the huge answers ``bad_payload``) and the bytes the server wrote before the client hung
up. Writes ``bench/results/bounded_memory.md``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_bounded_memory import HUGE_AT, HUGE_BYTES, REQUESTS, _run  # noqa: E402

#: (name, what the server sends, the extra options)
CASES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("normal answers only", "none", ()),
    ("SSE lines, 1 MiB limit (default)", "line", ()),
    ("JSON bodies, 8 MiB limit", "body", ("--llm-no-stream", "--llm-max-body-bytes", "8MiB")),
    ("JSON bodies, 64 MiB limit (default)", "body", ("--llm-no-stream",)),
    ("control: SSE lines, 64 MiB limit", "line", ("--llm-max-event-bytes", "64MiB")),
)
TRANSPORTS = ("kernel", "ghc")


def _one(transport: str, sends: str, extra: tuple[str, ...]) -> tuple[float, str, float]:
    """One run: (peak RSS growth in MiB, the records' outcome, the most bytes the server wrote
    of one huge answer, in MiB)."""
    huge_at = frozenset() if sends == "none" else HUGE_AT
    with tempfile.TemporaryDirectory() as tmp:
        records, growth, plan = _run(Path(tmp), transport, huge_at, *extra)
    bad = int((~records["ok"]).sum())
    kinds = sorted(set(records.loc[~records["ok"], "error_kind"]))
    outcome = f"{len(records)}/{plan.posts} records, {bad} {'/'.join(kinds) or 'failed'}"
    return growth / 2**20, outcome, max(plan.sent, default=0) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "bounded_memory.md")
    args = ap.parse_args()
    growth: dict[tuple[str, str], list[float]] = {}
    notes: dict[tuple[str, str], tuple[str, float]] = {}
    for _ in range(args.repeat):
        for name, sends, extra in CASES:
            for transport in TRANSPORTS:
                mib, outcome, sent = _one(transport, sends, extra)
                growth.setdefault((name, transport), []).append(mib)
                notes[(name, transport)] = (outcome, sent)
                print(f"{name} [{transport}]: +{mib:.1f} MiB ({outcome})", flush=True)
    rows = []
    for name, _sends, _extra in CASES:
        for transport in TRANSPORTS:
            runs = growth[(name, transport)]
            outcome, sent = notes[(name, transport)]
            rows.append(
                f"| {name} | {transport} | {statistics.median(runs):.1f} | "
                f"{', '.join(f'{x:.1f}' for x in runs)} | {outcome} | {sent:.0f} |"
            )
    python = platform.python_version()
    machine = f"{platform.node() or 'vm'}, {os.cpu_count()} cores, Python {python}"
    text = "\n".join([
        "# Bounded reads: peak RSS on answers that never end",
        "",
        f"Command: `.venv/bin/python bench/bounded_memory.py --repeat {args.repeat}`  ",
        f"Machine: {machine}, shared with other jobs  ",
        f"Date: {datetime.date.today().isoformat()}",
        "",
        f"The real `locust` (one process, 2 users, {REQUESTS} requests, `locustfiles/sweep.py`) "
        f"against a server that answers requests {sorted(HUGE_AT)} with a "
        f"{HUGE_BYTES >> 20} MiB answer generated as it is sent. Growth: the process's peak RSS "
        "(VmHWM, reset when the load starts) over its RSS then, MiB; median of the runs, "
        "alternated between the cases and transports. Records: the last run's. Server wrote: "
        "the most bytes of one huge answer the server sent before the client hung up (MiB, "
        "last run).",
        "",
        "| answers | transport | growth, median | runs | records | server wrote |",
        "|---|---|---:|---|---|---:|",
        *rows,
        "",
        "Every request is one record in every run; the huge answers are `bad_payload` and the "
        "others succeed. The control rows show that the measure sees a client that holds what "
        "it read: at a 64 MiB line limit the growth is over 64 MiB.",
        "",
    ])  # fmt: skip
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
