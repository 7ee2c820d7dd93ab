"""Start and stop the simulator as a subprocess (optionally pinned to one core) with a trace.

``with simulator(trace, *flags, cpu=1) as url:`` runs ``locust-llm sim --port 0 --trace FILE``
from this checkout's virtualenv, reads the URL it prints first and stops it with SIGTERM (by
its own pid) when the block ends, so the trace file is complete when the block returns.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.peers.common import MODEL

ROOT = Path(__file__).resolve().parents[2]
#: the engine the fidelity points run on: real step-time physics, a fast GPU, short answers
FIDELITY_ENGINE = ("--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--output-len",
                   "lognormal:64:0.5")  # fmt: skip


def sim_command(trace: Path, flags: tuple[str, ...]) -> list[str]:
    exe = Path(sys.executable).parent / "locust-llm"
    return [str(exe), "sim", "--port", "0", "--served-model-name", MODEL, "--trace", str(trace),
            *flags]  # fmt: skip


@contextmanager
def simulator(trace: Path, *flags: str, cpu: int | None = None,
              log: Path | None = None) -> Iterator[str]:  # fmt: skip
    """A running simulator writing ``trace``; yields its base URL."""
    with serving_process(sim_command(trace, flags), cpu=cpu, log=log, what="simulator") as url:
        yield url


@contextmanager
def serving_process(cmd: list[str], *, cpu: int | None = None, log: Path | None = None,
                    what: str = "server") -> Iterator[str]:  # fmt: skip
    """Run ``cmd`` (from the checkout's root, pinned to core ``cpu`` if given), read the base URL
    it prints on its first line and yield it; SIGTERM (then SIGKILL after 10 s) when the block
    ends, so a trace it writes on the way out is complete."""
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    err = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"{what} did not start (printed {url!r}); see {log}")
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        if log:
            err.close()  # type: ignore[union-attr]
