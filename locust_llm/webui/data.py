"""The numbers behind the LLM web tab: the ``/llm/stats`` payload, the tab's table rows, and the
Prometheus collector of ``/llm/metrics``.

Pure apart from reading the objects it is given: a locust-llm ``Runtime``-like object (``stats``,
``stages``, ``current_stage``, ``telemetry``, ``run_dir``, ``run_ended``) and a Locust
runner-like object (``state``, ``user_count``; ``worker_count`` on a master), both duck-typed.
It imports neither Flask nor Locust, so tests call it directly; :mod:`locust_llm.webui.routes`
serves it.

Rates in a stopped run: tokens/s are "over the last 10 complete seconds"; once the runner is no
longer running they are taken over the 10 seconds that ended with the last request (not "now"),
so the numbers the tab froze at when the run stopped are the numbers ``/llm/stats`` keeps giving.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from locust_llm.live.histogram import LatencyHistogram
from locust_llm.live.llmstats import (
    CSV_COLUMNS,
    METRICS,
    RECENT_QUANTILES,
    RECENT_WINDOW_S,
    TOTAL,
    LiveStats,
    _csv_row,
)
from locust_llm.live.stage_tally import StageFigures
from locust_llm.telemetry.counters import summed_increase
from locust_llm.telemetry.signals import combine

#: Runner states in which the live rates are taken up to "now".
ACTIVE_STATES = frozenset({"spawning", "running", "cleanup", "stopping"})
#: Points kept in each time series of the payload (1 per second: five minutes).
HISTORY_POINTS = 300
#: Seconds of telemetry looked back for the GPU series.
SIGNAL_WINDOW_S = 300.0

#: Latency fields of an endpoint row (seconds in the JSON, milliseconds in the table).
LATENCY_FIELDS = (
    "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
    "itl_p50_s", "itl_p99_s", "e2e_p50_s", "e2e_p99_s",
)  # fmt: skip
RATE_FIELDS = ("output_tokens_per_s", "input_tokens_per_s", "requests_per_s")

#: GPU / server signals of the panel; several GPUs or servers combine as each signal's
#: definition says (:mod:`locust_llm.telemetry.signals`), the same way the report's stage table
#: does.
PANEL_SIGNALS = (
    "gpu_util", "mem_used_bytes", "mem_total_bytes", "dram_bw_util",
    "kv_cache_usage", "running", "waiting",
)  # fmt: skip
#: Signals kept as time series for the GPU chart.
SIGNAL_SERIES = ("gpu_util", "dram_bw_util", "kv_cache_usage")

#: The tab's table: (key, title, payload field, scale, decimals). Keys are lower-case letters and
#: digits only, because Locust's UI camel-cases both the structure keys and the row keys.
TABLE_COLUMNS: tuple[tuple[str, str, str, float, int], ...] = (
    ("name", "Name", "name", 1.0, -1),
    ("requests", "Requests", "counted_requests", 1.0, 0),
    ("failures", "Failures", "counted_failures", 1.0, 0),
    ("cancelled", "Cancelled", "cancelled", 1.0, 0),
    ("ttftp50", "TTFT p50 (ms)", "ttft_p50_s", 1e3, 1),
    ("ttftp90", "TTFT p90 (ms)", "ttft_p90_s", 1e3, 1),
    ("ttftp99", "TTFT p99 (ms)", "ttft_p99_s", 1e3, 1),
    ("tpotp50", "TPOT p50 (ms)", "tpot_p50_s", 1e3, 2),
    ("tpotp99", "TPOT p99 (ms)", "tpot_p99_s", 1e3, 2),
    ("itlp99", "ITL p99 (ms)", "itl_p99_s", 1e3, 2),
    ("e2ep50", "E2E p50 (ms)", "e2e_p50_s", 1e3, 1),
    ("e2ep99", "E2E p99 (ms)", "e2e_p99_s", 1e3, 1),
    ("outtps", "Output tokens/s", "output_tokens_per_s", 1.0, 1),
    ("intps", "Input tokens/s", "input_tokens_per_s", 1.0, 1),
)
#: Shown in a cell that has no measurement (never 0).
NO_DATA = "-"


def table_structure() -> list[dict[str, str]]:
    """The ``structure`` of Locust's extended table for the LLM tab."""
    return [{"key": key, "title": title} for key, title, *_ in TABLE_COLUMNS]


def format_cell(value: Any, scale: float, decimals: int) -> str:
    """A table cell: ``value * scale`` with ``decimals`` places; :data:`NO_DATA` when missing."""
    if decimals < 0:
        return str(value)
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return NO_DATA
    return f"{float(value) * scale:.{decimals}f}"


def table_rows(endpoints: Iterable[dict[str, Any]]) -> list[dict[str, str]]:
    """Rows of the tab's table from the payload's ``endpoints`` (same numbers, in ms).

    Requests and failures leave out requests the load test cancelled itself (as Locust's own
    table does, and as the live stats count them), so the two tables agree; those are counted
    in their own column.
    """
    out = []
    for row in endpoints:
        counted = {**row, "counted_requests": row["requests"], "counted_failures": row["failures"]}
        out.append({key: format_cell(counted.get(field), scale, dec)
                    for key, _, field, scale, dec in TABLE_COLUMNS})  # fmt: skip
    return out


def _json_number(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def rates_time(stats: LiveStats, state: str | None, now: float) -> float:
    """The time up to which rates are taken: ``now`` while running, else just after the last
    request (so a stopped run keeps the rates it ended with)."""
    if state in ACTIVE_STATES or not stats.entries:
        return now
    last = max((e.last_s for e in stats.entries.values() if not math.isnan(e.last_s)), default=now)
    return last + 1.0


def endpoint_rows(stats: LiveStats, at_s: float) -> list[dict[str, Any]]:
    """One dict per request name plus ``Aggregated``: counts, latencies in s, rates; NaN -> None.

    ``requests`` and ``failures`` leave out requests the load test cancelled when it stopped
    (as Locust does); those are in ``cancelled`` (and ``errors``).
    """
    out = []
    for name, summary in stats.rows(at_s):
        row: dict[str, Any] = {"name": name}
        for key in ("requests", "failures", "output_tokens", "input_tokens", "errors"):
            row[key] = summary[key]
        row["cancelled"] = summary["errors"].get("cancelled", 0)
        for key in (*LATENCY_FIELDS, *RATE_FIELDS):
            row[key] = _json_number(float(summary[key]))
        out.append(row)
    return out


def error_messages(stats: LiveStats) -> list[dict[str, Any]]:
    """Per error kind of the whole run (every endpoint, every worker's last report): its count,
    its share of the requests (cancelled ones left out), its most frequent message and that
    message's count (:mod:`locust_llm.error_messages`: numbers and ids folded, cut to 160
    characters); the most frequent kind first."""
    total = stats.total()
    requests = total.requests + total.errors.get("client_error", 0)
    return [
        {**k.as_dict(), "share": _json_number(k.share)} for k in total.messages.summary(requests)
    ]


def history_series(history: list[dict[str, Any]], points: int = HISTORY_POINTS) -> dict[str, list]:
    """The ``Aggregated`` rows of ``LiveStats.history`` (last ``points``) as columns."""
    rows: list[dict[str, Any]] = []
    for row in reversed(history):  # newest first; stop once enough are found
        if row.get("Name") == TOTAL:
            rows.append(row)
            if len(rows) >= points:
                break
    rows.reverse()
    fields = ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
              "itl_p99_s", *RATE_FIELDS, *(key for key, _, _ in RECENT_QUANTILES))  # fmt: skip
    series: dict[str, list] = {"time_s": [float(r["Timestamp"]) for r in rows]}
    for key in fields:
        series[key] = [_json_number(float(r.get(key, math.nan))) for r in rows]
    return series


def telemetry_rows(telemetry: Any) -> list[Sequence[Any]]:
    """Rows ``(time_s, source, signal, gpu, value)`` of the scraper (``[]`` when there is none).

    Read defensively through :meth:`locust_llm.telemetry.scraper.TelemetryScraper.samples`: the
    scraper
    may be absent or stopped, and a failure there must never fail the web tab.
    """
    samples = getattr(telemetry, "samples", None)
    if not callable(samples):
        return []
    try:
        rows = samples()
    except Exception:  # the web tab must never fail because telemetry did
        return []
    return [r for r in rows if isinstance(r, tuple | list) and len(r) == 5]


def _newest_combined(
    rows: Iterable[Sequence[Any]], signals: Sequence[str]
) -> tuple[dict[str, float | None], float | None]:
    """The newest value of each (source, signal, gpu) in ``rows``, combined per signal by its
    definition; a signal nobody reported, or whose newest values are all NaN, is ``None``."""
    wanted = set(signals)
    newest: dict[tuple[str, str, str], tuple[float, float]] = {}
    for time_s, source, signal, gpu, value in rows:
        if signal in wanted:
            key = (str(source), str(signal), str(gpu))
            seen = newest.get(key)
            if seen is None or float(time_s) >= seen[0]:
                newest[key] = (float(time_s), float(value))
    out: dict[str, float | None] = {}
    for name in signals:
        values = {(src, gpu): v for (src, sig, gpu), (_, v) in newest.items() if sig == name}
        value = combine(name, values)
        out[name] = value if math.isfinite(value) else None
    return out, max((t for t, _ in newest.values()), default=None)


def latest_signals(rows: Sequence[Sequence[Any]]) -> dict[str, Any]:
    """The newest value of each :data:`PANEL_SIGNALS` signal, combined over GPUs and servers.

    A signal nobody reported (or whose latest scrape failed: NaN) is ``None``. ``time_s`` is the
    newest scrape time used.
    """
    values, newest = _newest_combined(rows, PANEL_SIGNALS)
    return {**values, "time_s": newest, "prefix_cache_hit_rate": prefix_cache_hit_rate(rows)}


#: Seconds of the servers' prefix-cache counters the live hit rate covers.
HIT_RATE_WINDOW_S = 30.0
_CACHE_COUNTERS = ("prompt_tokens_cached_total", "prefix_cache_queries")


def prefix_cache_hit_rate(
    rows: Sequence[Sequence[Any]], window_s: float = HIT_RATE_WINDOW_S
) -> float | None:
    """Prompt tokens the servers' prefix caches served / looked up over the newest
    ``window_s`` of their counters (each server's increase over its scrapes in that span,
    summed: :mod:`locust_llm.telemetry.counters`); None without lookups or hits measured."""
    picked = [r for r in rows if r[2] in _CACHE_COUNTERS and r[4] == r[4]]
    if not picked:
        return None
    newest = max(float(r[0]) for r in picked)
    recent = [r for r in picked if float(r[0]) >= newest - window_s]
    increase = {}
    for signal in _CACHE_COUNTERS:
        mine = [r for r in recent if r[2] == signal]
        times = np.array([float(r[0]) for r in mine])
        values = np.array([float(r[4]) for r in mine])
        sources = np.array([str(r[1]) for r in mine])
        increase[signal] = summed_increase(times, values, sources)
    hits, queries = increase["prompt_tokens_cached_total"], increase["prefix_cache_queries"]
    return hits / queries if queries > 0 and not math.isnan(hits) else None


def signal_series(rows: Sequence[Sequence[Any]], since_s: float) -> dict[str, list]:
    """Per whole second since ``since_s``: each :data:`SIGNAL_SERIES` signal, the newest value
    of every (source, gpu) in that second combined as :func:`latest_signals` does."""
    buckets: dict[int, list[Sequence[Any]]] = {}
    for row in rows:
        if row[2] in SIGNAL_SERIES and float(row[0]) >= since_s:
            buckets.setdefault(int(row[0]), []).append(row)
    seconds = sorted(buckets)[-HISTORY_POINTS:]
    series: dict[str, list] = {"time_s": [float(s) for s in seconds]}
    combined = [_newest_combined(buckets[s], SIGNAL_SERIES)[0] for s in seconds]
    for signal in SIGNAL_SERIES:
        series[signal] = [point[signal] for point in combined]
    return series


def current_stage(runtime: Any) -> dict[str, Any] | None:
    """The stage being run (index, name, concurrency, rate, kind), or None outside a sweep."""
    stages = list(getattr(runtime, "stages", None) or [])
    index = getattr(runtime, "current_stage", -1)
    stage = None
    if isinstance(index, int) and 0 <= index < len(stages):
        stage = stages[index]
    elif stages:
        open_stages = [s for s in stages if math.isnan(getattr(s, "end_wall_s", math.nan))]
        stage = open_stages[-1] if open_stages else None
    if stage is None:
        return None
    return {
        "index": stage.index,
        "name": stage.name,
        "concurrency": stage.concurrency,
        "rate": _json_number(stage.rate),
        "kind": stage.kind,
        "target_requests": stage.target_requests,
        "count": len(stages),
    }


#: Seconds added to the workers' record batch interval for a batch on its way to the master.
RECORD_TRANSIT_S = 0.5


def record_delay_s(runtime: Any, runner: Any) -> float:
    """How long after its end a record may still be on its way to this process: a worker's
    batch interval plus transit on a master; 0 in a single process (records go straight in)."""
    if not hasattr(runner, "clients"):
        return 0.0
    batch_s = getattr(getattr(runtime, "options", None), "record_batch_s", 1.0)
    return float(batch_s) + RECORD_TRANSIT_S if isinstance(batch_s, int | float) else 1.5


def stages_begun(
    runtime: Any, now: float | None = None, delay_s: float = 0.0
) -> list[dict[str, Any]]:
    """Every stage begun so far, in order: index, name, target requests, ``done`` (its requests
    that ended, cancelled ones left out, as the records received so far say; None without a
    recorder), ``settled`` (it has ended and its records and counts are all in), its live
    figures from those records (:mod:`locust_llm.live.stage_tally`:
    ``completed``, ``failed``, ``qps`` and ``output_tokens_per_s`` over the last 10 s of the
    stage up to ``now - delay_s``, ``ttft_p50_s`` of the stage's own completions, ``window_s``;
    None without a recorder) and, open loop, its arrivals (``drawn``, ``unsent`` by reason,
    else None). A stage shorter than a poll of ``/llm/stats`` is still seen to have run, and
    each stage's figures are its own (the records carry the stage they were sent in)."""
    now = time.time() if now is None else now
    recorder = getattr(runtime, "recorder", None)
    ended = getattr(recorder, "ended_in", None)
    tallies = getattr(recorder, "stage_tallies", None)
    arrivals = _arrival_counts(runtime, recorder)
    run_ended = bool(getattr(runtime, "run_ended", False))  # the workers' last records are in
    out = []
    for s in list(getattr(runtime, "stages", None) or []):
        counts = arrivals.get(s.index)
        done = ended(s.index) if callable(ended) else None
        # records of the stage may still be on their way for delay_s after they end, except
        # once a stage of --llm-stage-requests has all of its (it ends only then) or the run
        # has ended (the workers drained)
        complete = s.target_requests is not None and (done or 0) >= s.target_requests
        upto = now if complete or run_ended else now - delay_s
        row: dict[str, Any] = {
            "index": s.index,
            "name": s.name,
            "target_requests": s.target_requests,
            "done": done,
            # it has ended, and every record and count of it has arrived: its figures are final
            "settled": math.isfinite(s.end_wall_s) and upto >= s.end_wall_s,
            "drawn": counts.drawn if counts is not None else None,
            "unsent": dict(counts.unsent) if counts is not None else None,
        }
        figures = (
            tallies.figures(s.index, s.start_wall_s, s.end_wall_s, upto).to_dict()
            if tallies is not None
            else dict.fromkeys(StageFigures.__slots__)
        )
        out.append({**row, **figures})
    return out


def _arrival_counts(runtime: Any, recorder: Any) -> dict[int, Any]:
    """Open loop: arrivals never sent per stage and reason, as this process and the workers'
    last batches say (a stage's pool_ran_dry count arrives with the batch after it ends)."""
    total = getattr(recorder, "arrivals_total", None)
    schedule = getattr(getattr(runtime, "gate", None), "schedule", None)
    if not callable(total) or schedule is None:
        return {}
    return dict(total(schedule.counts))


def report_info(runtime: Any) -> dict[str, Any]:
    """Where the run dir and its report.html are, and whether the report can be downloaded."""
    run_dir = getattr(runtime, "run_dir", None)
    ready = run_dir is not None and (run_dir / "report.html").is_file()
    return {
        "run_dir": None if run_dir is None else str(run_dir),
        "run_ended": bool(getattr(runtime, "run_ended", False)),
        "ready": ready,
        "url": "llm/report",
        "command": None if run_dir is None else f"locust-llm report {run_dir}",
    }


def capacity_state(runtime: Any) -> dict[str, Any] | None:
    """The capacity search as the tab shows it (None without one): its answer once done, else
    the phase, the load it measures and the bracket so far."""
    info_of = getattr(runtime, "capacity_info", None)
    if not callable(info_of):
        return None
    info = info_of()
    unit = info.get("unit", "users")

    def load(x: Any) -> str:
        return "-" if x is None else f"{x:g}"

    if info.get("done"):
        text = f"{info['sentence']} (the report names what limits it)"
    else:
        text = (
            f"capacity search: {info.get('phase')} at {load(info.get('next_load'))} {unit}; "
            f"every SLO met up to {load(info.get('capacity'))}, broken at "
            f"{load(info.get('above'))}"
        )
    return {"text": text, "done": bool(info.get("done")), "slo": info.get("slo", "")}


def backoff_state(runtime: Any) -> dict[str, int]:
    """Users waiting out a back-off after connection errors now, and the waits so far (the
    whole run: this process and every worker's last batch)."""
    recorder = getattr(runtime, "recorder", None)
    waiting = getattr(recorder, "backing_off_total", 0)
    waits = getattr(recorder, "backoffs_total", 0)
    return {
        "users_waiting": waiting if isinstance(waiting, int) else 0,
        "waits": waits if isinstance(waits, int) else 0,
    }


def stats_payload(runtime: Any, runner: Any, now: float | None = None) -> dict[str, Any]:
    """Everything ``/llm/stats`` returns (JSON-safe: missing numbers are ``None``)."""
    now = time.time() if now is None else now
    stats: LiveStats = runtime.stats
    state = getattr(runner, "state", None)
    rows = telemetry_rows(getattr(runtime, "telemetry", None))
    worker_count = getattr(runner, "worker_count", None) if hasattr(runner, "clients") else None
    return {
        "time_s": now,
        "state": state,
        "user_count": getattr(runner, "user_count", None),
        "worker_count": worker_count if isinstance(worker_count, int) else None,
        "stage": current_stage(runtime),
        "stages_begun": stages_begun(runtime, now, record_delay_s(runtime, runner)),
        "backoff": backoff_state(runtime),
        "capacity": capacity_state(runtime),
        "endpoints": endpoint_rows(stats, rates_time(stats, state, now)),
        "errors": error_messages(stats),
        "signals": latest_signals(rows),
        "telemetry": getattr(runtime, "telemetry", None) is not None,
        "history": history_series(stats.history),
        "recent_window_s": RECENT_WINDOW_S,
        "scrape_interval_s": _json_number(
            float(getattr(getattr(runtime, "options", None), "scrape_interval_s", math.nan))
        ),
        "signal_history": signal_series(rows, now - SIGNAL_WINDOW_S),
        "report": report_info(runtime),
    }


def extended_stats(runtime: Any, runner: Any, key: str = "llm") -> list[dict[str, Any]]:
    """The ``extended_stats`` entry Locust's UI reads from ``/stats/requests`` for the tab
    (only the endpoint rows of :func:`stats_payload`: no telemetry or history work)."""
    stats: LiveStats = runtime.stats
    at_s = rates_time(stats, getattr(runner, "state", None), time.time())
    return [{"key": key, "data": table_rows(endpoint_rows(stats, at_s))}]


# ---- Prometheus ----------------------------------------------------------------------------------
def _histogram_family(metric: str, help_text: str, stats: LiveStats) -> Any:
    from prometheus_client.core import HistogramMetricFamily
    from prometheus_client.utils import floatToGoString

    family = HistogramMetricFamily(f"locust_llm_{metric}_seconds", help_text, labels=["name"])
    for name, entry in sorted(stats.entries.items()):
        hist: LatencyHistogram = entry.hist[metric]
        buckets = [(floatToGoString(le), float(n)) for le, n in hist.prometheus_buckets()]
        family.add_metric([name], buckets, sum_value=float(hist.sum))
    return family


_HISTOGRAM_HELP = {
    "ttft": "Time to first token (first chunk with generated text) in seconds.",
    "tpot": "Time per output token after the first, per request, in seconds.",
    "itl": "Gaps between token-bearing chunks per token, in seconds (token-weighted counts).",
    "e2e": "End-to-end request latency in seconds.",
}


class LiveStatsCollector:
    """A prometheus_client custom collector over the live stats of one Runtime.

    Fresh families on every scrape, no timestamps; per request ``name``: requests, failures
    (by ``kind``), output/input token counters and the TTFT/TPOT/ITL/E2E histograms; plus the
    current users and stage index.
    """

    def __init__(self, runtime: Any, runner: Any) -> None:
        self.runtime = runtime
        self.runner = runner

    def describe(self) -> list[Any]:
        return []  # no fixed set: collect() is cheap and always current

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        stats: LiveStats = self.runtime.stats
        entries = sorted(stats.entries.items())
        counters = (
            ("requests", "Requests finished (completed or failed).", "requests"),
            ("output_tokens", "Output tokens of completed requests.", "output_tokens"),
            ("input_tokens", "Input tokens of completed requests (when known).", "input_tokens"),
        )
        for metric, help_text, attr in counters:
            family = CounterMetricFamily(f"locust_llm_{metric}", help_text, labels=["name"])
            for name, entry in entries:
                family.add_metric([name], float(getattr(entry, attr)))
            yield family
        failures = CounterMetricFamily(
            "locust_llm_failures", "Failed requests by failure kind.", labels=["name", "kind"]
        )
        for name, entry in entries:
            for kind, n in sorted(entry.errors.items()):
                failures.add_metric([name, kind], float(n))
        yield failures
        for metric in METRICS:
            yield _histogram_family(metric, _HISTOGRAM_HELP[metric], stats)
        users = getattr(self.runner, "user_count", None)
        yield GaugeMetricFamily(
            "locust_llm_users", "Locust users running now.",
            value=float(users) if isinstance(users, int) else math.nan,
        )  # fmt: skip
        backoff = backoff_state(self.runtime)
        yield GaugeMetricFamily(
            "locust_llm_users_backing_off",
            "Users waiting out a back-off after connection errors now.",
            value=float(backoff["users_waiting"]),
        )
        yield CounterMetricFamily(
            "locust_llm_backoff_waits",
            "Back-off waits users made after connection errors.",
            value=float(backoff["waits"]),
        )
        stage = current_stage(self.runtime)
        yield GaugeMetricFamily(
            "locust_llm_stage", "Index of the current stage (-1: none).",
            value=float(stage["index"]) if stage else -1.0,
        )  # fmt: skip


def metrics_text(runtime: Any, runner: Any) -> bytes:
    """The Prometheus text exposition of the live stats (a private registry per call)."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(LiveStatsCollector(runtime, runner))
    return generate_latest(registry)


def stats_csv(stats: LiveStats) -> str:
    """``llm_stats.csv`` as text (the same columns the run dir gets)."""
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    for name, summary in stats.rows():
        writer.writerow(_csv_row(name, summary))
    return buffer.getvalue()
