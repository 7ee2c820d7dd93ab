"""Ground truth from the simulator's trace: match client records to it, summarize the errors.

Truth per request (wall clock, from ``--trace``): TTFT = first_token - origin, E2E = last_token
- origin, TPOT = (last_token - first_token) / (tokens_sent - 1); the per-token mean ITL equals
that TPOT. The origin is either the server's arrival stamp (the error then includes the upload
of the request: client send -> server arrival, which no client can avoid) or the client's own
send stamp (the error is then the tokens' delivery lag alone).
Delivery lag itself is measured where both sides have a wall time: client first/last token time
minus the trace's send time of that token.

Matching: the trace names its own ids only, so a client record is matched to the unmatched
successful trace line with the same output and prompt token counts (prompts of distinct
lengths make the pair nearly unique) whose arrival is nearest to the client's start, from
``before_s`` before it to ``window_s`` after it (a client may hold a request long after stamping
its start, e.g. while its event loop is busy with other streams); a record with more than one
candidate counts as ambiguous.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.peers.common import Timed

METRICS = ("ttft", "tpot", "itl", "e2e")


@dataclass(slots=True)
class TraceLine:
    arrival: float
    first_token: float
    last_token: float
    tokens: int
    prompt_tokens: int

    @property
    def ttft_s(self) -> float:
        return self.first_token - self.arrival

    @property
    def e2e_s(self) -> float:
        return self.last_token - self.arrival

    @property
    def tpot_s(self) -> float:
        if self.tokens <= 1:
            return math.nan
        return (self.last_token - self.first_token) / (self.tokens - 1)


def read_ok_trace(path: Path) -> list[TraceLine]:
    """The successful streamed requests of a trace file, by arrival."""
    lines: list[TraceLine] = []
    with open(path, encoding="utf-8") as f:
        for raw in f:
            if not raw.strip():
                continue
            d = json.loads(raw)
            if d.get("outcome") != "ok" or d.get("first_token") is None:
                continue
            lines.append(TraceLine(d["arrival"], d["first_token"], d["last_token"],
                                   int(d["tokens_sent"]), int(d["prompt_tokens"])))  # fmt: skip
    lines.sort(key=lambda t: t.arrival)
    return lines


@dataclass(slots=True)
class Matched:
    pairs: list[tuple[Timed, TraceLine]]
    unmatched_client: int
    unmatched_trace: int
    ambiguous: int


def match(records: Sequence[Timed], trace: Sequence[TraceLine], *, before_s: float = 0.05,
          window_s: float = 30.0) -> Matched:  # fmt: skip
    """Pair each record with a trace line (same tokens, arrival nearest after its start)."""
    arrivals = [t.arrival for t in trace]
    used = [False] * len(trace)
    pairs: list[tuple[Timed, TraceLine]] = []
    ambiguous = 0
    for rec in sorted(records, key=lambda r: r.start_wall_s):
        lo = bisect.bisect_left(arrivals, rec.start_wall_s - before_s)
        hi = bisect.bisect_right(arrivals, rec.start_wall_s + window_s)
        cands = [
            i for i in range(lo, hi)
            if not used[i] and trace[i].tokens == rec.output_tokens
            and (rec.input_tokens < 0 or trace[i].prompt_tokens == rec.input_tokens)
        ]  # fmt: skip
        if not cands:
            continue
        ambiguous += len(cands) > 1
        best = min(cands, key=lambda i: abs(arrivals[i] - rec.start_wall_s))
        used[best] = True
        pairs.append((rec, trace[best]))
    return Matched(pairs, len(records) - len(pairs), used.count(False), ambiguous)


def _client_value(rec: Timed, metric: str) -> float:
    return {"ttft": rec.ttft_s, "tpot": rec.tpot_s, "itl": rec.itl_mean_s, "e2e": rec.e2e_s}[metric]


def _truth_value(rec: Timed, line: TraceLine, metric: str, origin: str) -> float:
    if metric in ("tpot", "itl"):
        return line.tpot_s
    start = line.arrival if origin == "server" else rec.start_wall_s
    return (line.first_token if metric == "ttft" else line.last_token) - start


def error_summary(pairs: Sequence[tuple[Timed, TraceLine]], *,
                  origin: str = "server") -> dict[str, dict[str, float]]:  # fmt: skip
    """Per metric: truth mean, client mean, mean error (ms, %) and its spread (the standard
    deviation of the per-request errors, ms), p99 of |error| (ms, %), n.

    ``origin`` is where TTFT and E2E truth start: ``server`` (the trace's arrival: the error
    includes the request's upload) or ``client`` (the client's own send time: the error is the
    delivery lag alone, and a late or early send stamp goes unseen).
    """
    out: dict[str, dict[str, float]] = {}
    for metric in METRICS:
        c = np.array([_client_value(r, metric) for r, _ in pairs], dtype=float)
        t = np.array([_truth_value(r, line, metric, origin) for r, line in pairs], dtype=float)
        ok = ~(np.isnan(c) | np.isnan(t))
        c, t = c[ok], t[ok]
        if not len(c):
            out[metric] = {"n": 0}
            continue
        err = c - t
        rel = np.abs(err) / np.where(t > 0, t, np.nan)
        out[metric] = {
            "n": len(c),
            "truth_mean_ms": float(t.mean() * 1e3),
            "client_mean_ms": float(c.mean() * 1e3),
            "mean_err_ms": float(err.mean() * 1e3),
            "err_sd_ms": float(err.std(ddof=1) * 1e3) if len(err) > 1 else math.nan,
            "mean_err_pct": float(err.mean() / t.mean() * 100) if t.mean() else math.nan,
            "p99_abs_err_ms": float(np.percentile(np.abs(err), 99) * 1e3),
            "p99_abs_err_pct": float(np.nanpercentile(rel, 99) * 100),
        }
    return out


def delivery_lags(pairs: Sequence[tuple[Timed, TraceLine]]) -> dict[str, float]:
    """Client receive minus server send, at the first and last token (wall clock), in ms."""
    first, last, upload = [], [], []
    for rec, line in pairs:
        first.append(rec.start_wall_s + rec.ttft_s - line.first_token)
        upload.append(line.arrival - rec.start_wall_s)
        if not math.isnan(rec.last_token_s):
            last.append(rec.start_wall_s + rec.last_token_s - line.last_token)
    both = np.array(first + last) * 1e3
    out = {"upload_p50_ms": float(np.median(upload) * 1e3) if upload else math.nan}
    if len(both):
        out.update(lag_p50_ms=float(np.percentile(both, 50)),
                   lag_p99_ms=float(np.percentile(both, 99)),
                   lag_max_ms=float(both.max()))  # fmt: skip
    return out


def within_target(summary: dict[str, dict[str, float]], *, pct: float = 1.0,
                  ms: float = 0.2) -> dict[str, bool]:  # fmt: skip
    """TTFT/TPOT/E2E mean errors within ``pct`` % or ``ms`` of the truth."""
    res = {}
    for metric in ("ttft", "tpot", "e2e"):
        s = summary.get(metric, {})
        if not s.get("n"):
            res[metric] = False
            continue
        res[metric] = abs(s["mean_err_ms"]) <= ms or abs(s["mean_err_pct"]) <= pct
    return res
