"""Adapter: the bare read-loop client (``bench.peers.loopclient``) as a benchmark client."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from bench.peers.common import ClientRun, Load, Timed, run_measured

ROOT = Path(__file__).resolve().parents[2]


def runner(variant: str) -> Callable[..., ClientRun]:
    """An adapter running the bare client with read loop ``variant``."""

    def run(url: str, load: Load, work: Path, *, cpu: int | None = None,
            timeout_s: float = 300) -> ClientRun:  # fmt: skip
        if load.open_loop:
            return ClientRun(f"loop-{variant}", load, [], note="closed loop only")
        work.mkdir(parents=True, exist_ok=True)
        out = work / "records.json"
        cmd = [sys.executable, "-m", "bench.peers.loopclient", url, variant,
               str(load.concurrency), str(load.requests), str(out)]  # fmt: skip
        rc, samples, wall = run_measured(cmd, timeout_s=timeout_s, cwd=ROOT,
                                         log=work / "client.log", cpu=cpu)  # fmt: skip
        if not out.exists():
            return ClientRun(f"loop-{variant}", load, [], note=f"rc={rc}")
        recs = [Timed(**r) for r in json.loads(out.read_text())]
        return ClientRun(f"loop-{variant}", load, recs, wall_s=wall, cpu_samples=samples)

    return run
