"""Adapters: the bare read-loop client (``bench.peers.loopclient``) and our client's core
without Locust (``bench.peers.coreclient``) as benchmark clients."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from bench.peers.common import ClientRun, Load, Timed, run_measured

ROOT = Path(__file__).resolve().parents[2]


def _adapter(name: str, module_args: tuple[str, ...]) -> Callable[..., ClientRun]:
    """An adapter running ``python -m`` ``module_args`` (``{url}`` filled in) + STREAMS
    REQUESTS OUT.json, closed loop, its records read back from OUT.json."""

    def run(url: str, load: Load, work: Path, *, cpu: int | None = None,
            timeout_s: float = 300) -> ClientRun:  # fmt: skip
        if load.open_loop:
            return ClientRun(name, load, [], note="closed loop only")
        work.mkdir(parents=True, exist_ok=True)
        out = work / "records.json"
        cmd = [sys.executable, "-m", *(a.format(url=url) for a in module_args),
               str(load.concurrency), str(load.requests), str(out)]  # fmt: skip
        rc, samples, wall = run_measured(cmd, timeout_s=timeout_s, cwd=ROOT,
                                         log=work / "client.log", cpu=cpu)  # fmt: skip
        if not out.exists():
            return ClientRun(name, load, [], note=f"rc={rc}")
        recs = [Timed(**r) for r in json.loads(out.read_text())]
        return ClientRun(name, load, recs, wall_s=wall, cpu_samples=samples)

    return run


def runner(variant: str) -> Callable[..., ClientRun]:
    """An adapter running the bare client with read loop ``variant``."""
    return _adapter(f"loop-{variant}", ("bench.peers.loopclient", "{url}", variant))


#: our client's core (transport, stream reader, record) without Locust
core = _adapter("ours-core", ("bench.peers.coreclient", "{url}"))
