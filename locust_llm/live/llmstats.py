"""Live LLM statistics: TTFT / TPOT / ITL / E2E histograms and token counters across workers.

Each process keeps one :class:`EndpointStats` per request name. Workers send their stats as a
delta with every Locust report (``report_to_master``) and start afresh; the master merges the
deltas (``worker_report``), so its totals are exact sums of everything every worker measured.
Percentiles come from log-bucketed histograms (``locust_llm.live.histogram``: <= 1% relative error
from 0.05 ms to 10 min). Token rates are kept per wall-clock second, so the master can give the
current rate over the last seconds as well as the average.

At the end of a run the master (or single process) prints :func:`format_table` and writes
``llm_stats.csv`` (+ ``llm_stats_history.csv``, one row per endpoint per interval).
"""

from __future__ import annotations

import csv
import math
import time
from collections import deque
from pathlib import Path
from typing import Any

from locust_llm.error_messages import MessageTally
from locust_llm.live.histogram import LatencyHistogram
from locust_llm.metrics import CLIENT_SIDE_KINDS, RequestRecord

METRICS = ("ttft", "tpot", "itl", "e2e")
TOTAL = "Aggregated"
RATE_WINDOW_S = 10
#: Seconds of the recent window the live charts' percentiles cover (Locust's own charts use 10 s:
#: ``locust.stats.CURRENT_RESPONSE_TIME_PERCENTILE_WINDOW``); the table stays cumulative.
RECENT_WINDOW_S = 10
#: (history key, metric, quantile) of the recent-window percentiles in ``Aggregated`` history rows
RECENT_QUANTILES = (
    ("ttft_recent_p50_s", "ttft", 0.5),
    ("ttft_recent_p90_s", "ttft", 0.9),
    ("ttft_recent_p99_s", "ttft", 0.99),
    ("tpot_recent_p50_s", "tpot", 0.5),
    ("tpot_recent_p99_s", "tpot", 0.99),
)

CSV_COLUMNS = (
    "Name",
    "Requests",
    "Failures",
    "Output tokens",
    "Input tokens",
    "TTFT p50 (ms)",
    "TTFT p90 (ms)",
    "TTFT p99 (ms)",
    "TPOT p50 (ms)",
    "TPOT p99 (ms)",
    "ITL p50 (ms)",
    "ITL p99 (ms)",
    "E2E p50 (ms)",
    "E2E p99 (ms)",
    "Output tokens/s",
    "Input tokens/s",
    "Requests/s",
)


class EndpointStats:
    """Histograms and counters of one request name (or of all: ``Aggregated``)."""

    __slots__ = (
        "errors",
        "failures",
        "first_s",
        "hist",
        "input_tokens",
        "last_s",
        "messages",
        "output_tokens",
        "per_second",
        "requests",
    )

    def __init__(self) -> None:
        self.hist = {m: LatencyHistogram() for m in METRICS}
        self.requests = 0  # completed + failed
        self.failures = 0
        self.output_tokens = 0
        self.input_tokens = 0
        self.errors: dict[str, int] = {}
        #: each error kind's messages, numbers and ids folded (locust_llm.error_messages)
        self.messages = MessageTally()
        # wall second -> [output tokens, input tokens, requests] ended in that second
        self.per_second: dict[int, list[int]] = {}
        self.first_s = math.nan
        self.last_s = math.nan

    def add(self, record: RequestRecord, itl_values: list[float], itl_weights: list[float]) -> None:
        if record.error_kind in CLIENT_SIDE_KINDS:  # the load test's doing: not an outcome
            self.errors[record.error_kind] = self.errors.get(record.error_kind, 0) + 1
            self.messages.add(record.error_kind, record.error_message)  # not cancelled ones
            return
        self.requests += 1
        now = time.time()
        self.first_s = now if math.isnan(self.first_s) else self.first_s
        self.last_s = now
        sec = self.per_second.setdefault(int(now), [0, 0, 0])
        sec[2] += 1
        if not record.ok:
            self.failures += 1
            self.errors[record.error_kind] = self.errors.get(record.error_kind, 0) + 1
            self.messages.add(record.error_kind, record.error_message)
            return
        self.output_tokens += record.output_tokens
        sec[0] += record.output_tokens
        if record.input_tokens > 0:
            self.input_tokens += record.input_tokens
            sec[1] += record.input_tokens
        h = self.hist
        h["ttft"].add(record.ttft_s)
        h["tpot"].add(record.tpot_s)
        h["e2e"].add(record.e2e_s)
        if itl_values:
            h["itl"].add_many(itl_values, itl_weights)

    def merge(self, other: EndpointStats) -> None:
        for m in METRICS:
            self.hist[m].merge(other.hist[m])
        self.requests += other.requests
        self.failures += other.failures
        self.output_tokens += other.output_tokens
        self.input_tokens += other.input_tokens
        for kind, n in other.errors.items():
            self.errors[kind] = self.errors.get(kind, 0) + n
        self.messages.merge(other.messages)
        for sec, values in other.per_second.items():
            mine = self.per_second.setdefault(sec, [0, 0, 0])
            for i, v in enumerate(values):
                mine[i] += v
        self.first_s = _nanmin(self.first_s, other.first_s)
        self.last_s = _nanmax(self.last_s, other.last_s)

    def to_dict(self) -> dict[str, Any]:
        return {
            "hist": {m: h.to_dict() for m, h in self.hist.items()},
            "requests": self.requests,
            "failures": self.failures,
            "output_tokens": self.output_tokens,
            "input_tokens": self.input_tokens,
            "errors": dict(self.errors),
            "messages": self.messages.to_dict(),
            "per_second": {str(k): v for k, v in self.per_second.items()},
            "first_s": None if math.isnan(self.first_s) else self.first_s,
            "last_s": None if math.isnan(self.last_s) else self.last_s,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EndpointStats:
        stats = cls()
        stats.hist = {m: LatencyHistogram.from_dict(data["hist"][m]) for m in METRICS}
        stats.requests = int(data["requests"])
        stats.failures = int(data["failures"])
        stats.output_tokens = int(data["output_tokens"])
        stats.input_tokens = int(data["input_tokens"])
        stats.errors = {str(k): int(v) for k, v in data["errors"].items()}
        stats.messages = MessageTally.from_dict(data.get("messages") or {})
        stats.per_second = {int(k): list(v) for k, v in data["per_second"].items()}
        stats.first_s = math.nan if data.get("first_s") is None else float(data["first_s"])
        stats.last_s = math.nan if data.get("last_s") is None else float(data["last_s"])
        return stats

    # ---- views ------------------------------------------------------------------------------
    def current_rates(self, now: float | None = None, window_s: int = RATE_WINDOW_S) -> list[float]:
        """[output tokens/s, input tokens/s, requests/s] over the last complete seconds."""
        end = int(time.time() if now is None else now)  # the current second is still filling
        totals = [0, 0, 0]
        for sec in range(end - window_s, end):
            values = self.per_second.get(sec)
            if values:
                for i in range(3):
                    totals[i] += values[i]
        return [t / window_s for t in totals]

    def summary(self, now: float | None = None) -> dict[str, Any]:
        """Percentiles in seconds and rates; NaN where nothing was measured."""
        h = self.hist
        out_rate, in_rate, req_rate = self.current_rates(now)
        return {
            "requests": self.requests,
            "failures": self.failures,
            "output_tokens": self.output_tokens,
            "input_tokens": self.input_tokens,
            "errors": dict(self.errors),
            "ttft_p50_s": h["ttft"].quantile(0.5),
            "ttft_p90_s": h["ttft"].quantile(0.9),
            "ttft_p99_s": h["ttft"].quantile(0.99),
            "tpot_p50_s": h["tpot"].quantile(0.5),
            "tpot_p99_s": h["tpot"].quantile(0.99),
            "itl_p50_s": h["itl"].quantile(0.5),
            "itl_p99_s": h["itl"].quantile(0.99),
            "e2e_p50_s": h["e2e"].quantile(0.5),
            "e2e_p99_s": h["e2e"].quantile(0.99),
            "output_tokens_per_s": out_rate,
            "input_tokens_per_s": in_rate,
            "requests_per_s": req_rate,
        }


class LiveStats:
    """All endpoints of one process (or, on the master, of the whole run)."""

    def __init__(self) -> None:
        self.entries: dict[str, EndpointStats] = {}
        self.history: list[dict[str, Any]] = []
        #: (time, copies of the cumulative TTFT/TPOT histograms) at each history snapshot, kept
        #: back to the newest one at least RECENT_WINDOW_S old
        self._marks: deque[tuple[float, dict[str, LatencyHistogram]]] = deque()

    def add(self, record: RequestRecord, itl_values: list[float], itl_weights: list[float]) -> None:
        """Count one finished request (``itl_*``: its per-token ITL samples, see metrics.py)."""
        entry = self.entries.get(record.endpoint)
        if entry is None:
            entry = self.entries[record.endpoint] = EndpointStats()
        if record.ok:
            entry.add(record, itl_values, itl_weights)
        else:
            entry.add(record, [], [])

    def total(self) -> EndpointStats:
        total = EndpointStats()
        for entry in self.entries.values():
            total.merge(entry)
        return total

    def reset(self) -> None:
        self.entries.clear()
        self.history.clear()
        self._marks.clear()

    def take_delta(self) -> dict[str, Any]:
        """Serialize and clear (a worker's report to the master)."""
        data = {name: e.to_dict() for name, e in self.entries.items()}
        self.entries.clear()
        return data

    def merge_delta(self, data: dict[str, Any]) -> None:
        for name, raw in data.items():
            incoming = EndpointStats.from_dict(raw)
            entry = self.entries.get(name)
            if entry is None:
                self.entries[name] = incoming
            else:
                entry.merge(incoming)

    def rows(self, now: float | None = None) -> list[tuple[str, dict[str, Any]]]:
        rows = [(name, e.summary(now)) for name, e in sorted(self.entries.items())]
        if rows:
            rows.append((TOTAL, self.total().summary(now)))
        return rows

    def recent_quantiles(self, now: float) -> dict[str, float]:
        """The :data:`RECENT_QUANTILES` of requests ended in the last :data:`RECENT_WINDOW_S`
        seconds (all of them while the run is younger), from the cumulative histograms less
        their copy of a window ago; records ``now`` as a mark. NaN where the window is empty."""
        total = self.total().hist
        self._marks.append((now, {m: total[m].copy() for m in ("ttft", "tpot")}))
        while len(self._marks) > 1 and self._marks[1][0] <= now - RECENT_WINDOW_S:
            self._marks.popleft()
        started, base = self._marks[0]
        old_enough = started <= now - RECENT_WINDOW_S
        window = {m: total[m].since(base[m]) if old_enough else total[m] for m in base}
        return {key: window[m].quantile(q) for key, m, q in RECENT_QUANTILES}

    def snapshot_history(self, now: float | None = None) -> None:
        """Append one history row per endpoint (cumulative percentiles, current rates); the
        ``Aggregated`` row adds the recent-window percentiles of the live charts."""
        stamp = time.time() if now is None else now
        rows = self.rows(stamp)
        recent = self.recent_quantiles(stamp) if rows else {}
        for name, summary in rows:
            extra = recent if name == TOTAL else {}
            self.history.append({"Timestamp": int(stamp), "Name": name, **summary, **extra})


def _ms(x: float) -> float:
    return x * 1e3


def _csv_row(name: str, s: dict[str, Any]) -> list[Any]:
    return [
        name,
        s["requests"],
        s["failures"],
        s["output_tokens"],
        s["input_tokens"],
        *(
            round(_ms(s[k]), 3)
            for k in (
                "ttft_p50_s",
                "ttft_p90_s",
                "ttft_p99_s",
                "tpot_p50_s",
                "tpot_p99_s",
                "itl_p50_s",
                "itl_p99_s",
                "e2e_p50_s",
                "e2e_p99_s",
            )
        ),
        round(s["output_tokens_per_s"], 2),
        round(s["input_tokens_per_s"], 2),
        round(s["requests_per_s"], 3),
    ]


def write_csv(stats: LiveStats, path: Path) -> None:
    """``llm_stats.csv``: one row per endpoint plus ``Aggregated``."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for name, summary in stats.rows():
            writer.writerow(_csv_row(name, summary))


def write_history_csv(stats: LiveStats, path: Path) -> None:
    """``llm_stats_history.csv``: the rows of :meth:`LiveStats.snapshot_history`."""
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(("Timestamp", *CSV_COLUMNS))
        for row in stats.history:
            writer.writerow([row["Timestamp"], *_csv_row(row["Name"], row)])


def format_table(stats: LiveStats) -> str:
    """The end-of-run table printed by a headless run (milliseconds, like Locust's own); one
    line when no request completed (no table of empty percentiles)."""
    total = stats.total()
    if total.requests - total.failures <= 0:
        failed = ", ".join(f"{kind} {n}" for kind, n in sorted(total.errors.items()))
        return "LLM stats: no request completed" + (f" ({failed})" if failed else "")
    header = (
        f"{'Name':<24} {'reqs':>7} {'fails':>6} {'TTFT p50':>9} {'p99':>8} "
        f"{'TPOT p50':>9} {'p99':>7} {'ITL p99':>8} {'E2E p50':>9} {'p99':>9} "
        f"{'out tok':>9}"
    )
    lines = ["LLM stats (ms)", header, "-" * len(header)]
    for name, s in stats.rows():
        lines.append(
            f"{name[:24]:<24} {s['requests']:>7} {s['failures']:>6} "
            f"{_cell(s['ttft_p50_s'], 9, 1)} {_cell(s['ttft_p99_s'], 8, 1)} "
            f"{_cell(s['tpot_p50_s'], 9, 2)} {_cell(s['tpot_p99_s'], 7, 2)} "
            f"{_cell(s['itl_p99_s'], 8, 2)} {_cell(s['e2e_p50_s'], 9, 1)} "
            f"{_cell(s['e2e_p99_s'], 9, 1)} {s['output_tokens']:>9}"
        )
    return "\n".join(lines)


def unreachable_line(stats: LiveStats, hosts: list[str]) -> str:
    """``server unreachable at URL: N requests failed as connect errors, none completed`` when
    every request failed as a connection error ('' otherwise)."""
    total = stats.total()
    connect = total.errors.get("connect", 0)
    if not connect or total.requests - total.failures > 0 or connect != total.failures:
        return ""
    where = ", ".join(hosts) or "--host"
    return (
        f"server unreachable at {where}: {connect} request{'s' if connect != 1 else ''} failed "
        "as connect errors, none completed (is the server up and --host right?)"
    )


def _cell(seconds: float, width: int, digits: int) -> str:
    """Milliseconds in a column, ``n/a`` where nothing was measured."""
    if math.isnan(seconds):
        return "n/a".rjust(width)
    return f"{_ms(seconds):>{width}.{digits}f}"


def _nanmin(a: float, b: float) -> float:
    return b if math.isnan(a) else a if math.isnan(b) else min(a, b)


def _nanmax(a: float, b: float) -> float:
    return b if math.isnan(a) else a if math.isnan(b) else max(a, b)
