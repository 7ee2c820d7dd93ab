"""Kernel receive stamps vs geventhttpclient: timing error against the simulator's truth.

The shipped user (``bench/client_variants/ours_counted.py``: ``locustfiles/sweep.py``'s classes
plus a count of the reads) run ``--reps`` times per load and ``--llm-transport``, interleaved (A
B A B ...): ``ghc`` (each line timed when Python reads it), ``kernel`` (each line timed by the
kernel's receive stamp of the read that completed it) and, with ``--baseline REV``, the kernel
transport with revision REV's reader. Same set-up as ``bench/client_choice.py`` (its
``measure`` is reused): a fresh simulator pinned to core 1 (zero-cost engine, one token per
stream every 20 ms, 200 tokens), one Locust process pinned to core 0, closed loop, every request
matched to the simulator's trace by its id.

    .venv/bin/python bench/kernel_timestamps.py --baseline REV --json /tmp/kt.json

Per load: the medians over the repetitions and their ratios; CPU per token and per read, tokens
per read; over all loads, each transport's CPU fitted as a cost per read and per token (and the
per-token ratio at 1 and 2 tokens per read, with bootstrap intervals); where the worker's CPU
demand (CPU + run-queue wait) reaches 0.9 of a core.

Columns per transport and load (streams on the one worker core): first-token lag p99 (client
first-token time - simulator send time, wall clock), last-token lag p99, TTFT error p99
(|client TTFT - trace TTFT|), ITL error p99 (|client TPOT - trace TPOT|: the trace has each
request's first and last token, so the per-request mean ITL is what can be checked), CPU us per
token (process tree, user + system, first arrival .. last token), the client delay the kernel
transport measured itself: p99 of (user-space read - kernel stamp) of the first token, the
first tokens it flagged as merged with the next one (their stamp is an upper bound) and the
first-token lag p99 of the unflagged and the flagged ones apart, and how
long the client process waited for its core (run-queue wait from ``/proc/PID/schedstat``,
over its whole life; on a shared host other jobs on that core delay every read).

``--results bench/results/kernel_timestamps.md`` writes the run there as a new section (command,
machine, load average, the table) above the earlier runs, which stay as history. ``--pool
A.json B.json`` runs nothing: the summary of earlier runs' ``--json`` rows, pooled (the runs of
``bench/results/kernel_timestamps_runs/``).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import math
import os
import platform
import shlex
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import client_choice

TRANSPORTS = ("ghc", "kernel")
#: a first token stamped this long after the simulator sent it is "a token gap late" (half the
#: 20 ms step: a stamp that is its own segment's is within 0.1 ms)
LATE_FIRST_S = 0.010


def _p99_ms(values: np.ndarray) -> float | None:
    return float(np.percentile(values, 99) * 1e3) if len(values) else None


def extra_columns(work: Path) -> dict[str, Any]:
    """Last-token lag and the client delay from the run's records and the trace."""
    df = pd.read_parquet(work / "run" / "requests.parquet")
    df = df[df.ok]
    trace = client_choice.read_trace(work / "trace.jsonl")
    df = df[df.request_id.isin(list(trace))]
    last_true = np.array([trace[i]["last_token"] for i in df.request_id])
    last_lag = df.start_wall_s.to_numpy() + df.last_token_s.to_numpy() - last_true
    delay = (df.first_token_user_s - df.first_token_kernel_s).dropna().to_numpy()
    stamped = df.first_token_kernel_s.notna()
    first_true = np.array([trace[i]["first_token"] for i in df.request_id])
    first_lag = df.start_wall_s.to_numpy() + df.first_token_kernel_s.to_numpy() - first_true
    merged = df.first_token_merged.to_numpy(bool) & stamped.to_numpy()
    clean = ~merged & stamped.to_numpy()
    # the record's bound on a merged first token: it arrived in [stamp - bound, stamp]; the
    # simulator's send (1 ms slack for loopback and the two processes' clocks) must not be
    # before that
    bound = (df.ttft_error_bound_s.to_numpy(float) if "ttft_error_bound_s" in df
             else np.full(len(df), np.nan))  # fmt: skip
    bounded = merged & np.isfinite(bound)
    outside = bounded & (first_lag - bound > 0.001)
    return {
        "first_lag_unmerged_p99_ms": _p99_ms(first_lag[clean]),
        "first_lag_merged_p99_ms": _p99_ms(first_lag[merged]),
        "last_lag_p99_ms": float(np.percentile(last_lag, 99) * 1e3) if len(last_lag) else None,
        "client_delay_p50_ms": float(np.percentile(delay, 50) * 1e3) if len(delay) else None,
        "client_delay_p99_ms": float(np.percentile(delay, 99) * 1e3) if len(delay) else None,
        "first_merged": int(df.first_token_merged[stamped].sum()) if stamped.any() else None,
        "bound_p99_ms": _p99_ms(bound[bounded]),
        "bound_max_ms": float(bound[bounded].max() * 1e3) if bounded.any() else None,
        "bounded": int(bounded.sum()),
        # stamped a token gap late: more than half the simulator's 20 ms step after its send
        "first_gap_late": int((first_lag[stamped.to_numpy()] > LATE_FIRST_S).sum()),
        "bound_missed": int(outside.sum()),
    }


class RunQueueWait:
    """Samples ``/proc/PID/schedstat`` of the processes whose command line holds ``marker``
    (the client's run dir) every 0.1 s; :meth:`stop` returns their run-queue wait in seconds
    (the latest sample of each: a process's total while it lived)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker.encode()
        self.wait_s: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> RunQueueWait:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            for proc in Path("/proc").iterdir():
                if not proc.name.isdigit():
                    continue
                try:
                    if self.marker not in (proc / "cmdline").read_bytes():
                        continue
                    wait_ns = int((proc / "schedstat").read_text().split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                self.wait_s[int(proc.name)] = wait_ns * 1e-9

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return sum(self.wait_s.values())


def baseline_file(revision: str, work: Path) -> Path:
    """``kernel_transport.py`` as it was at git ``revision``, for the ``kernel@REV`` transport."""
    text = subprocess.run(
        ["git", "show", f"{revision}:locust_llm/client/kernel_transport.py"],
        cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"kernel_transport_{revision}.py"
    path.write_text(text)
    return path


def measure(transport: str, streams: int, rounds: int, work: Path) -> dict[str, Any]:
    """One run of ``transport`` (``ghc``, ``kernel`` or ``kernel@REV``: the kernel transport
    with revision REV's reader, from :func:`baseline_file` in the work dir's parent)."""
    name, _, revision = transport.partition("@")
    os.environ["LOCUST_LLM_TRANSPORT"] = name  # the Locust child reads --llm-transport
    if revision:
        os.environ["KTS_STAMPED_FROM"] = str(work.parent / f"kernel_transport_{revision}.py")
    waits = RunQueueWait(str(work / "run")).start()
    try:
        row = client_choice.measure("ours-counted", streams, rounds, work)
    finally:
        os.environ.pop("LOCUST_LLM_TRANSPORT", None)
        os.environ.pop("KTS_STAMPED_FROM", None)
        row_wait_s = waits.stop()
    row["transport"] = transport
    row["client_runq_wait_s"] = row_wait_s
    if row.get("matched"):
        row.update(extra_columns(work))
        row.update(read_columns(work / "results.jsonl.reads.json", row))
    return row


def read_columns(counts_path: Path, row: dict[str, Any]) -> dict[str, Any]:
    """Reads the client made (``bench/client_variants/ours_counted.py``), and the run's CPU per
    read and tokens per read beside its CPU per token."""
    if not counts_path.exists():
        return {}
    counts = json.loads(counts_path.read_text())
    reads = int(counts["reads"])
    return {
        "reads": reads,
        "late_sweeps": counts["late_sweeps"],
        "tokens_per_read": row["tokens"] / reads if reads else math.nan,
        "cpu_us_per_read": row["cpu_s"] / reads * 1e6 if reads else math.nan,
    }


def _median(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if r.get(key) is not None and r[key] == r[key]]
    return float(np.median(values)) if values else math.nan


#: the per-transport medians of the summary: (row key, column title, format)
SUMMARY_COLUMNS = (
    ("cpu_us_per_token", "CPU us/token", ".2f"),
    ("cpu_us_per_read", "CPU us/read", ".2f"),
    ("tokens_per_read", "tokens/read", ".2f"),
    ("cpu_util", "CPU cores", ".2f"),
    ("demand_cores", "CPU demand cores", ".2f"),
    ("first_lag_unmerged_p99_ms", "first-token lag p99 ms, unflagged", ".2f"),
    ("first_lag_p99_ms", "first-token lag p99 ms, all", ".2f"),
    ("last_lag_p99_ms", "last-token lag p99 ms", ".2f"),
    ("merged_share", "first tokens merged", ".0%"),
    ("client_runq_wait_s", "waited for its core s", ".1f"),
)


def summary(rows: list[dict[str, Any]], transports: tuple[str, ...]) -> str:
    """Per load and transport the medians over the repetitions, and per load the ratio of the
    medians (the last transport over the first) of CPU per token and per read."""
    done = [r for r in rows if "events_s" in r]
    for r in done:
        merged = r.get("first_merged")
        r["merged_share"] = merged / r["matched"] if merged is not None else math.nan
        r["demand_cores"] = demand_cores(r)
    head = ("| streams | transport | runs | " + " | ".join(c[1] for c in SUMMARY_COLUMNS)
            + " | first tokens merged, all runs | first tokens a token gap late, all runs "
            "| TTFT error p99 ms |")  # fmt: skip
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    ratios = []
    pairs = [(other, transports[0]) for other in transports[1:]]
    pairs += [
        ("kernel", t) for t in transports if t.startswith("kernel@") and "kernel" in transports
    ]
    for streams in sorted({r["streams"] for r in done}):
        medians = {}
        for transport in transports:
            group = [r for r in done if r["streams"] == streams and r["transport"] == transport]
            medians[transport] = {key: _median(group, key) for key, _, _ in SUMMARY_COLUMNS}
            cells = " | ".join(_f(medians[transport][k], fmt) for k, _, fmt in SUMMARY_COLUMNS)
            merged = [r["first_merged"] for r in group if r.get("first_merged") is not None]
            total = sum(r["matched"] for r in group if r.get("first_merged") is not None)
            merged_cell = f"{sum(merged):,} / {total:,}" if merged else "n/a"
            late = [r for r in group if r.get("first_gap_late") is not None]
            late_cell = (f"{sum(r['first_gap_late'] for r in late):,} / "
                         f"{sum(r['matched'] for r in late):,}") if late else "n/a"  # fmt: skip
            ttft = _f(_median(group, "ttft_err_p99_ms"), ".2f")
            out.append(f"| {streams} | {transport} | {len(group)} | {cells} | {merged_cell} "
                       f"| {late_cell} | {ttft} |")  # fmt: skip
        for other, base in pairs:
            per_token = medians[other]["cpu_us_per_token"] / medians[base]["cpu_us_per_token"]
            per_read = medians[other]["cpu_us_per_read"] / medians[base]["cpu_us_per_read"]
            ratios.append(f"| {streams} | {other} / {base} | {per_token:.2f} | {per_read:.2f} |")
    text = "\n".join(out)
    if ratios:
        text += ("\n\nCPU, ratio of the medians:\n\n| streams | transports | per token | per read |"
                 "\n|---|---|---|---|\n" + "\n".join(ratios))  # fmt: skip
    text += "\n\n" + cost_model(done, transports)
    saturation = saturation_streams(done, transports)
    if saturation:
        text += ("\n\nOne worker core saturated (its CPU demand, CPU + run-queue wait, at 0.9 "
                 "of a core): " + "; ".join(saturation) + ".")  # fmt: skip
    return text


def cost_model(rows: list[dict[str, Any]], transports: tuple[str, ...]) -> str:
    """Per transport, its CPU split into a cost per read and a cost per token: least squares of
    ``cpu_s = per_read * reads + per_token * tokens`` over all its runs. A starved reader takes
    several tokens per read; the split compares the transports at equal tokens per read."""
    out = ["CPU = a x reads + b x tokens, fitted over each transport's runs (all loads):", "",
           "| transport | runs | a: us per read | b: us per token | R^2 "
           "| us per token at 1 token/read | at 2 tokens/read |",
           "|---|---|---|---|---|---|---|"]  # fmt: skip
    at: dict[str, np.ndarray] = {}
    data: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for transport in transports:
        runs = [r for r in rows if r["transport"] == transport and r.get("reads")]
        if len(runs) < 2:
            continue
        x = np.array([[r["reads"], r["tokens"]] for r in runs], dtype=float)
        y = np.array([r["cpu_s"] for r in runs])
        data[transport] = (x, y)
        (per_read, per_token), *_ = np.linalg.lstsq(x, y, rcond=None)
        r2 = 1 - float(((y - x @ np.array([per_read, per_token])) ** 2).sum()) / max(
            float(((y - y.mean()) ** 2).sum()), 1e-18
        )
        at[transport] = _per_token_at(x, y)
        one, two = at[transport]
        out.append(f"| {transport} | {len(runs)} | {per_read * 1e6:.1f} | {per_token * 1e6:.1f} "
                   f"| {r2:.2f} | {one * 1e6:.1f} | {two * 1e6:.1f} |")  # fmt: skip
    base = transports[0]
    ratios = []
    for t in at:
        if t == base or base not in at:
            continue
        low, high = _ratio_interval(data[t], data[base])
        ratio = at[t] / at[base]
        ratios.append(f"{t} / {base}: {ratio[0]:.2f} at 1 token/read (90% interval "
                      f"{low[0]:.2f}-{high[0]:.2f}), {ratio[1]:.2f} at 2 ({low[1]:.2f}-"
                      f"{high[1]:.2f})")  # fmt: skip
    note = " (intervals: 2,000 bootstrap resamples of each transport's runs)" if ratios else ""
    return "\n".join(out) + ("\n\n" + "; ".join(ratios) + "." + note if ratios else "")


def _per_token_at(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The fitted CPU seconds per token at 1 and at 2 tokens per read."""
    (per_read, per_token), *_ = np.linalg.lstsq(x, y, rcond=None)
    return np.array([per_read + per_token, per_read / 2 + per_token])


def _ratio_interval(other: tuple[np.ndarray, np.ndarray], base: tuple[np.ndarray, np.ndarray],
                    resamples: int = 2000) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """5th and 95th percentiles of the fitted per-token ratio (at 1 and 2 tokens per read) over
    bootstrap resamples of each transport's runs (seeded: the same rows give the same text)."""
    rng = np.random.default_rng(0)
    ratios = []
    for _ in range(resamples):
        pick_o = rng.integers(0, len(other[1]), len(other[1]))
        pick_b = rng.integers(0, len(base[1]), len(base[1]))
        ratios.append(_per_token_at(other[0][pick_o], other[1][pick_o])
                      / _per_token_at(base[0][pick_b], base[1][pick_b]))  # fmt: skip
    return np.percentile(ratios, 5, axis=0), np.percentile(ratios, 95, axis=0)


def demand_cores(row: dict[str, Any]) -> float:
    """The worker's CPU demand in cores: its CPU in the window plus its run-queue wait over its
    life (a starved worker on a shared host waits for the core instead of using it)."""
    return float(row["cpu_util"] + row["client_runq_wait_s"] / row["wall_s"])


def saturation_streams(rows: list[dict[str, Any]], transports: tuple[str, ...],
                       level: float = 0.9) -> list[str]:  # fmt: skip
    """Per transport, the streams at which the worker's CPU demand (median per load,
    :func:`demand_cores`) reaches ``level`` cores: interpolated between the two loads around it,
    else extrapolated from the highest load with its demand per stream (CPU per token falls as
    the load grows, so that estimate is low)."""
    out = []
    for transport in transports:
        points = sorted(
            (streams, _median([r for r in rows if r["streams"] == streams
                               and r["transport"] == transport], "demand_cores"))
            for streams in {r["streams"] for r in rows if r["transport"] == transport}
        )  # fmt: skip
        points = [(s, u) for s, u in points if u == u]
        if not points:
            continue
        crossing = next(
            ((s0, u0, s1, u1) for (s0, u0), (s1, u1) in itertools.pairwise(points)
             if u0 < level <= u1), None)  # fmt: skip
        if points[0][1] >= level:
            out.append(f"{transport} at or below {points[0][0]} streams ({points[0][1]:.2f})")
        elif crossing:
            s0, u0, s1, u1 = crossing
            at = s0 + (level - u0) * (s1 - s0) / (u1 - u0)
            out.append(f"{transport} at about {at:.0f} streams (interpolated, {s0}: {u0:.2f}, "
                       f"{s1}: {u1:.2f} cores)")  # fmt: skip
        else:
            top, util = points[-1]
            out.append(f"{transport} at about {top * level / util:.0f} streams (extrapolated from "
                       f"{top} streams at {util:.2f} cores)")  # fmt: skip
    return out


def _f(v: Any, fmt: str) -> str:
    return "n/a" if v is None or v != v else format(v, fmt)


def table(rows: list[dict[str, Any]]) -> str:
    """Every run, in the order it ran."""
    head = ("| rep | transport | streams | ok/sent | client CPU | CPU us/token | CPU us/read "
            "| tokens/read | late reads yielded | first-token lag p99 ms "
            "| last-token lag p99 ms | TTFT err p99 ms | ITL err p99 ms "
            "| client delay p50 / p99 ms | first tokens merged "
            "| first-token lag p99 ms unmerged / merged "
            "| TTFT error bound p99 / max ms, merged (truth outside) "
            "| client waited for its core s |"
            )  # fmt: skip
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if "events_s" not in r:
            why = f"failed (rc={r.get('rc')}; {r.get('first_error', '')[:60]})"
            cells = f"| {r.get('rep', 1)} | {r['transport']} | {r['streams']} | 0/{r['records']} "
            out.append(cells + f"| {why} |" + " |" * 13)
            continue
        merged = r.get("first_merged")
        merged_cell = "n/a" if merged is None else f"{merged}/{r['matched']}"
        yields = r.get("late_sweeps")
        out.append(
            f"| {r.get('rep', 1)} | {r['transport']} | {r['streams']} "
            f"| {r['matched']}/{r['records']} "
            f"| {r['cpu_util']:.0%} | {_f(r['cpu_us_per_token'], '.1f')} "
            f"| {_f(r.get('cpu_us_per_read'), '.1f')} | {_f(r.get('tokens_per_read'), '.2f')} "
            f"| {_f(yields, 'd')} "
            f"| {r['first_lag_p99_ms']:.2f} | {_f(r.get('last_lag_p99_ms'), '.2f')} "
            f"| {r['ttft_err_p99_ms']:.2f} | {r['tpot_err_p99_ms']:.3f} "
            f"| {_f(r.get('client_delay_p50_ms'), '.2f')} / "
            f"{_f(r.get('client_delay_p99_ms'), '.2f')} | {merged_cell} "
            f"| {_f(r.get('first_lag_unmerged_p99_ms'), '.2f')} / "
            f"{_f(r.get('first_lag_merged_p99_ms'), '.2f')} "
            f"| {_bound_cell(r)} "
            f"| {_f(r.get('client_runq_wait_s'), '.1f')} of {r['wall_s']:.0f} |"
        )  # fmt: skip
    return "\n".join(out)


def _bound_cell(r: dict[str, Any]) -> str:
    """The merged first tokens' error bound: p99 / max ms (how many the truth fell outside
    of, of those with a bound); n/a where none was merged or the reader gives none."""
    if not r.get("bounded"):
        return "n/a"
    return (f"{_f(r.get('bound_p99_ms'), '.2f')} / {_f(r.get('bound_max_ms'), '.2f')} "
            f"({r['bound_missed']} of {r['bounded']})")  # fmt: skip


def machine_line() -> str:
    """The machine, as the results file names it."""
    import gevent
    import geventhttpclient
    import locust

    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    models = [
        ln.split(":", 1)[1].strip() for ln in cpuinfo.splitlines() if ln.startswith("model name")
    ]
    return (f"`nproc` = {os.cpu_count()} ({models[0] if models else platform.machine()}, kernel "
            f"{platform.release()}); Python {platform.python_version()}, locust "
            f"{locust.__version__}, gevent {gevent.__version__}, geventhttpclient "
            f"{geventhttpclient.__version__}")  # fmt: skip


TITLE = "# Kernel receive stamps vs geventhttpclient: timing error against the simulator's trace"


def write_results(path: Path, command: str, started: str, load_start: tuple[float, ...],
                  text: str, *, title: str = TITLE) -> None:  # fmt: skip
    """This run as a new section of ``path``, above the earlier runs (kept as history); a new
    file starts with ``title``."""
    load_end = os.getloadavg()
    section = (
        f"## Run of {started}\n\n"
        f"Machine: {machine_line()}. Load average (1/5/15 min) {load_start[0]:.2f} / "
        f"{load_start[1]:.2f} / {load_start[2]:.2f} at the start, {load_end[0]:.2f} / "
        f"{load_end[1]:.2f} / {load_end[2]:.2f} at the end. Command:\n\n    {command}\n\n"
        f"{text}\n"
    )
    old = path.read_text() if path.exists() else f"{title}\n"
    head, sep, rest = old.partition("\n## ")
    path.write_text(f"{head.rstrip()}\n\n{section}\n{sep.lstrip()}{rest}" if sep else
                    f"{head.rstrip()}\n\n{section}")  # fmt: skip


class ScriptedSocket:
    """A socket double whose reads return the given pieces in turn (the parse-only bench):
    ``recv`` for geventhttpclient and our plain reader, ``recvmsg`` for the stamped one, with
    the ancillary data a real read brings (a receive stamp taken when the double is made, an
    empty receive queue)."""

    def __init__(self, pieces: list[bytes], ancdata: list[tuple[int, int, bytes]]) -> None:
        self.pieces = iter(pieces)
        self.ancdata = ancdata

    def recv(self, _size: int) -> bytes:
        return next(self.pieces, b"")

    def recvmsg(
        self, _size: int, _anc: int
    ) -> tuple[bytes, list[tuple[int, int, bytes]], int, None]:
        return next(self.pieces, b""), self.ancdata, 0, None

    def setsockopt(self, *_args: Any) -> None:
        pass

    def close(self) -> None:
        pass


def sse_pieces(tokens: int) -> list[bytes]:
    """What the simulator writes for one streamed answer, one write per piece: the head with
    the role and first token, one chunk per token, the last with ``[DONE]`` and the end."""

    def event(content: str, finish: str | None = None) -> bytes:
        delta = json.dumps({"id": "chatcmpl-sim00000001", "object": "chat.completion.chunk",
                            "created": 1796134356, "model": "bench-model", "choices": [
                                {"index": 0, "delta": {"content": content}, "logprobs": None,
                                 "finish_reason": finish}]}, separators=(",", ":"))  # fmt: skip
        return b"data: " + delta.encode() + b"\n\n"

    def chunk(data: bytes) -> bytes:
        return b"%x\r\n%b\r\n" % (len(data), data)

    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")  # fmt: skip
    pieces = [head + chunk(event("") + event(" the"))]
    pieces += [chunk(event(f" w{i}")) for i in range(tokens - 2)]
    pieces.append(chunk(event(" end", "length") + b"data: [DONE]\n\n") + b"0\r\n\r\n")
    return pieces


def parse_cost_us(reader: str, answers: int, tokens: int, *, per_read: int = 1,
                  stamped_class: Any = None) -> float:  # fmt: skip
    """CPU us per token to read ``answers`` scripted answers line by line, as the user does,
    ``per_read`` tokens' writes arriving in each read (a reader behind the stream: more)."""
    from geventhttpclient.response import HTTPSocketResponse

    from locust_llm.client.http11 import Http11Connection, read_head
    from locust_llm.client.kernel_transport import SO_TIMESTAMPNS, TCP_INQ, StampedConnection
    from locust_llm.client.sse import data_payload

    written = sse_pieces(tokens)
    pieces = written[:1] + [b"".join(written[i : i + per_read])
                            for i in range(1, len(written), per_read)]  # fmt: skip
    started = time.process_time()
    for _ in range(answers):
        # the stamp of every read: a second ahead, so no read counts as late (a reader in time,
        # the steady state: the late reads' yield to the hub is the runs' business, not parsing)
        now_ns = time.time_ns() + 1_000_000_000
        stamp = struct.pack("@qq", now_ns // 1_000_000_000, now_ns % 1_000_000_000)
        ancdata = [
            (socket.SOL_SOCKET, SO_TIMESTAMPNS, stamp),
            (socket.IPPROTO_TCP, TCP_INQ, bytes(4)),
        ]
        sock: Any = ScriptedSocket(pieces, ancdata)
        if reader == "ghc":
            resp: Any = HTTPSocketResponse(sock, block_size=65536, method="POST")
        else:
            kernel_class = stamped_class or StampedConnection
            conn = (kernel_class if reader == "kernel" else Http11Connection)(sock)
            resp = read_head(conn)
        stamped = reader == "kernel"
        readline = resp.readline
        times: list[float] = []
        while line := readline(b"\n"):
            times.append(resp.arrival_s if stamped else time.perf_counter())
            data_payload(line)
    return (time.process_time() - started) / (answers * tokens) * 1e6


#: tokens per read in the parse-only bench: a reader in time, and one a few tokens behind
PARSE_TOKENS_PER_READ = (1, 4)


def parse_table(answers: int, tokens: int, reps: int, baseline: tuple[str, Any] | None = None
                ) -> str:  # fmt: skip
    """Median over ``reps`` interleaved repetitions of each reader's parse cost, at each of
    :data:`PARSE_TOKENS_PER_READ`; ``baseline`` (name, ``StampedConnection`` class) adds the
    stamped reader of another revision."""
    names = {"ghc": "geventhttpclient (C parser)", "ours": "http11.py, plain recv",
             "kernel": "http11.py + kernel stamps (recvmsg)"}  # fmt: skip
    classes: dict[str, Any] = {"ghc": None, "ours": None, "kernel": None}
    if baseline:
        names[baseline[0]] = f"http11.py + kernel stamps, {baseline[0]}"
        classes[baseline[0]] = baseline[1]
    out = ["| reader | tokens per read | parse CPU us/token (median) | / geventhttpclient "
           "| all repetitions |", "|---|---|---|---|---|"]  # fmt: skip
    for per_read in PARSE_TOKENS_PER_READ:
        costs: dict[str, list[float]] = {r: [] for r in classes}
        for _ in range(reps):
            for reader, cls in classes.items():
                kind = "kernel" if reader.startswith("kernel") else reader
                costs[reader].append(parse_cost_us(kind, answers, tokens, per_read=per_read,
                                                   stamped_class=cls))  # fmt: skip
        ghc = float(np.median(costs["ghc"]))
        for reader in classes:
            med = float(np.median(costs[reader]))
            reps_s = ", ".join(f"{c:.2f}" for c in costs[reader])
            out.append(f"| {names[reader]} | {per_read} | {med:.2f} | {med / ghc:.2f} "
                       f"| {reps_s} |")  # fmt: skip
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--transports", default=",".join(TRANSPORTS))
    p.add_argument("--streams", default="64,256,512,1024")
    p.add_argument("--rounds", type=int, default=2, help="requests per stream")
    p.add_argument(
        "--baseline",
        metavar="REV",
        help="also run the kernel transport with git revision REV's reader (kernel@REV)",
    )
    p.add_argument("--reps", type=int, default=3, help="runs per transport and load (interleaved)")
    p.add_argument("--work", type=Path)
    p.add_argument("--json", type=Path)
    p.add_argument("--results", type=Path, help="add this run to a results file (markdown)")
    p.add_argument(
        "--pool",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="no run: the summary of earlier runs' --json rows, pooled",
    )
    p.add_argument(
        "--parse-only",
        action="store_true",
        help="only the readers' parse cost on scripted bytes (no sockets, no Locust)",
    )
    args = p.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="kernel-ts-"))
    load_start = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"work dir {work}; {platform.node()} nproc={os.cpu_count()} "
          f"load average {load_start} {started}", flush=True)  # fmt: skip
    text = run_text(args, work)
    print(text)
    if args.results:
        write_results(args.results, _command(argv), started, load_start, text)
    return 0


def run_text(args: argparse.Namespace, work: Path) -> str:
    """Run what the arguments ask for (a pooled summary, the parse-only bench or the runs);
    the markdown it gives."""
    if args.pool:
        rows = [row for path in args.pool for row in json.loads(path.read_text())]
        pooled = tuple(dict.fromkeys(r["transport"] for r in rows))
        return (f"Pooled: the {len(rows)} runs of {', '.join(f'`{p}`' for p in args.pool)}; "
                f"medians over all their repetitions:\n\n{summary(rows, pooled)}")  # fmt: skip
    if args.parse_only:
        baseline = None
        if args.baseline:
            path = baseline_file(args.baseline, work)
            spec = importlib.util.spec_from_file_location("stamped_baseline", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            baseline = (f"kernel@{args.baseline}", module.StampedConnection)
        return parse_table(answers=200, tokens=200, reps=7, baseline=baseline)
    transports = tuple(args.transports.split(","))
    if args.baseline:
        baseline_file(args.baseline, work)
        transports = (transports[0], f"kernel@{args.baseline}", *transports[1:])
    rows = []
    for streams in (int(s) for s in args.streams.split(",")):
        for rep in range(1, args.reps + 1):
            for transport in transports:  # interleaved: A B A B ..., one load at a time
                run_dir = work / f"{transport}-{streams}-{rep}"
                row = measure(transport, streams, args.rounds, run_dir)
                row["rep"] = rep
                row["load_average_1m"] = os.getloadavg()[0]
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.json:
                    args.json.write_text(json.dumps(rows, indent=1))
    return (f"Medians over the repetitions:\n\n{summary(rows, transports)}\n\n"
            f"Every run, in the order it ran:\n\n{table(rows)}")  # fmt: skip


def _command(argv: list[str] | None) -> str:
    shown = argv if argv is not None else sys.argv[1:]
    return shlex.join([".venv/bin/python", "bench/kernel_timestamps.py", *shown])


if __name__ == "__main__":
    raise SystemExit(main())
