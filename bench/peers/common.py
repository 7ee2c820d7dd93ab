"""The shared vocabulary of the peer adapters: a load, a timed request, a client run.

A :class:`Load` is one benchmark point (closed loop at a concurrency for a number of requests,
or open loop at a Poisson rate for a duration). Every adapter turns its client's own output into
:class:`Timed` records in our definitions (seconds; TTFT, E2E, TPOT = (last - first token) /
(output tokens - 1), per-token mean ITL) and reports the client process tree's CPU time.
"""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

NAN = float("nan")
#: the directory holding one virtualenv per peer (``evalscope/``, ``aiperf/``, ``guidellm/``)
#: and the offline ``tokenizer/``; the benches' ``--peers DIR`` sets it
PEERS_ENV = "LOCUST_LLM_PEERS"
#: per-peer virtualenvs (each peer pins its own dependencies), each overriding ``$PEERS_ENV``
VENV_ENV = {name: f"LOCUST_LLM_{name.upper()}_VENV" for name in ("guidellm", "evalscope", "aiperf")}
#: the small word-level tokenizer EvalScope and AIPerf need offline (bench/peers/tokenizer.py)
TOKENIZER_ENV = "LOCUST_LLM_PEER_TOKENIZER"


class PeerMissing(Exception):
    """A peer's path is not configured: no machine-specific default stands in for it."""


def _peer_path(env: str, name: str) -> Path:
    if os.environ.get(env):
        return Path(os.environ[env]).expanduser()
    if os.environ.get(PEERS_ENV):
        return Path(os.environ[PEERS_ENV]).expanduser() / name
    raise PeerMissing(f"{name}: set {env}, or {PEERS_ENV} (or the bench's --peers DIR) to a "
                      f"directory holding {name}/ (docs/metrics.md)")  # fmt: skip


def peer_venv(name: str) -> Path:
    """The virtualenv of peer ``name`` (``$LOCUST_LLM_<NAME>_VENV``, else
    ``$LOCUST_LLM_PEERS/<name>``); :class:`PeerMissing` when neither is set."""
    return _peer_path(VENV_ENV[name], name)


def add_peers_option(parser: Any) -> None:
    """The benches' ``--peers DIR`` (an argparse parser); :func:`use_peers` applies it."""
    parser.add_argument(
        "--peers", type=Path, metavar="DIR", help=f"the peers' venvs and tokenizer (${PEERS_ENV})"
    )


def use_peers(path: Path | None) -> None:
    """``--peers DIR``: the peers (and their child processes' adapters) look there."""
    if path is not None:
        os.environ[PEERS_ENV] = str(path.expanduser().resolve())


def peer_tokenizer() -> Path:
    """The peers' offline tokenizer (``$LOCUST_LLM_PEER_TOKENIZER``, else
    ``$LOCUST_LLM_PEERS/tokenizer``); :class:`PeerMissing` when neither is set."""
    return _peer_path(TOKENIZER_ENV, "tokenizer")


MODEL = "bench-model"
PROMPT_WORDS = (48, 240)  # words per prompt, varied by index (the trace's prompt_tokens key)
MAX_TOKENS = 256  # output cap each client asks; the simulator's EOS draw ends most answers first


@dataclass(frozen=True, kw_only=True)
class Load:
    """One benchmark point: closed loop (``concurrency``, ``requests``) or open (``rate``)."""

    concurrency: int = 0
    requests: int = 0
    rate: float = 0.0  # requests/s, Poisson arrivals; 0 = closed loop
    duration_s: float = 0.0  # open loop: how long requests are sent

    @property
    def label(self) -> str:
        if self.rate:
            return f"poisson {self.rate:g}/s x {self.duration_s:g}s"
        return f"c={self.concurrency} x {self.requests}"

    @property
    def open_loop(self) -> bool:
        return self.rate > 0


@dataclass(slots=True)
class Timed:
    """One successful request as a client measured it, converted to our definitions."""

    start_wall_s: float  # when the client says it sent the request (time.time())
    ttft_s: float
    e2e_s: float
    tpot_s: float  # (t_last_token - t_first_token) / (output_tokens - 1); nan if <= 1 token
    itl_mean_s: float  # per-token mean inter-token latency (nan if the client gives none)
    output_tokens: int
    last_token_s: float = NAN  # offset of the last token from the start (nan if unknown)
    input_tokens: int = -1  # the server's usage.prompt_tokens (-1 unknown): a matching key


@dataclass(slots=True)
class ClientRun:
    """What one client produced for one load."""

    client: str
    load: Load
    records: list[Timed]
    failed: int = 0
    cpu_s: float = NAN  # CPU seconds of the client process tree inside the load window
    wall_s: float = NAN
    note: str = ""
    cpu_samples: list[tuple[float, float]] = field(default_factory=list)  # (wall, cumulative cpu)


def tpot_from(first_s: float, last_s: float, tokens: int) -> float:
    """Our TPOT from a first and last token time and the output token count."""
    if tokens <= 1 or math.isnan(first_s) or math.isnan(last_s):
        return NAN
    return (last_s - first_s) / (tokens - 1)


def prompt_text(index: int) -> str:
    """A deterministic prompt whose length (48..240 words) varies with ``index``.

    Distinct lengths give distinct ``prompt_tokens`` in the simulator's usage and trace, which
    is what matches a client's record to its trace line.
    """
    lo, hi = PROMPT_WORDS
    count = lo + (index * 37) % (hi - lo + 1)
    words = ("load", "test", "token", "stream", "latency", "server", "model", "batch", "cache")
    return " ".join(words[(index * 7 + i * 3) % len(words)] for i in range(count))


class CpuMeter:
    """Samples the CPU time (user + system) of a process and its children every ``period_s``."""

    def __init__(self, pid: int, period_s: float = 0.05) -> None:
        self.pid = pid
        self.period_s = period_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> CpuMeter:
        self._thread.start()
        return self

    def stop(self) -> list[tuple[float, float]]:
        self._stop.set()
        self._thread.join(5)
        return self.samples

    def _run(self) -> None:
        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        seen: dict[int, float] = {}
        procs: dict[int, psutil.Process] = {self.pid: root}
        while not self._stop.is_set():
            try:
                for child in root.children(recursive=True):
                    procs.setdefault(child.pid, child)
            except psutil.Error:
                pass
            for pid, proc in list(procs.items()):
                try:
                    t = proc.cpu_times()
                    seen[pid] = t.user + t.system
                except psutil.Error:
                    procs.pop(pid, None)  # gone: keep its last reading in ``seen``
            self.samples.append((time.time(), sum(seen.values())))
            self._stop.wait(self.period_s)


def cpu_between(samples: Sequence[tuple[float, float]], t0: float, t1: float) -> float:
    """CPU seconds used between wall times ``t0`` and ``t1`` (linear between samples)."""
    if len(samples) < 2 or t1 <= t0:
        return NAN

    def at(t: float) -> float:
        if t <= samples[0][0]:
            return samples[0][1]
        for (ta, ca), (tb, cb) in itertools.pairwise(samples):
            if ta <= t <= tb:
                return ca + (cb - ca) * ((t - ta) / (tb - ta) if tb > ta else 0.0)
        return samples[-1][1]

    return at(t1) - at(t0)


def run_measured(
    cmd: Sequence[str], *, timeout_s: float, cwd: Path | None = None,
    env: dict[str, str] | None = None, log: Path | None = None, cpu: int | None = None,
) -> tuple[int, list[tuple[float, float]], float]:  # fmt: skip
    """Run ``cmd`` (pinned to core ``cpu`` when given); returns (rc, cpu samples, wall seconds).

    Output goes to ``log``. A run past ``timeout_s`` is killed (its process group).
    """
    full = ["taskset", "-c", str(cpu), *cmd] if cpu is not None else list(cmd)
    out = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115
    started = time.time()
    proc = subprocess.Popen(
        full, cwd=cwd, env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    meter = CpuMeter(proc.pid).start()
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        rc = proc.wait()
    finally:
        samples = meter.stop()
        if log:
            out.close()  # type: ignore[union-attr]
    return rc, samples, time.time() - started
