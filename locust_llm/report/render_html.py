"""report.html: one self-contained page (inline CSS and SVG, no scripts, no network).

Shows the source document's table, reading and conclusion, the verdict, alerts, charts
(throughput and latency vs load with the knee and cap marked, TTFT / TPOT percentiles vs load,
GPU / KV / worker-CPU timelines with stage bands, latency histograms) and the detail tables.
Telemetry gaps (NaN samples, or silences longer than 3 sampling intervals) break the lines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

import numpy as np

from locust_llm.report.build import Report
from locust_llm.report.fmt import load_label
from locust_llm.report.render_md import detail_sections, seed_table
from locust_llm.report.svg import Series, histogram, line_chart

MAX_POINTS = 1500
CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}.verdict{font-size:1.3em;font-weight:600}
.chart{width:100%;max-width:640px;font:11px sans-serif}.t{font-weight:600;font-size:13px}
.ax{stroke:#444}.band{fill:#eef}.bl{fill:#669;font-size:10px}.mk{stroke:#c00;fill:#c00;
stroke-dasharray:4 3}.bar{fill:#4a7fb5}.grid{display:flex;flex-wrap:wrap;gap:8px}
.alert{color:#b00}"""


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _md_to_html_table(md: str) -> str:
    lines = [ln.strip().strip("|").split("|") for ln in md.splitlines()]
    return _html_table([c.strip() for c in lines[0]], [[c.strip() for c in r] for r in lines[2:]])


def with_gaps(t: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Insert a NaN wherever sampling stopped for more than 3 median intervals."""
    if t.size < 3:
        return t, v
    dt = np.diff(t)
    limit = 3 * float(np.median(dt))
    cut = np.nonzero(dt > limit)[0]
    if cut.size == 0:
        return t, v
    return (np.insert(t, cut + 1, t[cut] + limit / 3), np.insert(v, cut + 1, math.nan))


def downsample(
    t: np.ndarray, v: np.ndarray, points: int = MAX_POINTS
) -> tuple[np.ndarray, np.ndarray]:
    """Bucket means over equal time bins; a bin without finite samples stays NaN (a gap)."""
    if t.size <= points:
        return t, v
    edges = np.linspace(t.min(), t.max(), points + 1)
    idx = np.clip(np.searchsorted(edges, t, "right") - 1, 0, points - 1)
    finite = np.isfinite(v)
    sums = np.bincount(idx[finite], weights=v[finite], minlength=points)
    counts = np.bincount(idx[finite], minlength=points)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / np.maximum(counts, 1), math.nan)
    return (edges[:-1] + edges[1:]) / 2, means


def _loads(report: Report) -> np.ndarray:
    rows = [r for r in report.rows if r["kind"] != "soak"]
    return np.array(
        [r["concurrency"] if math.isfinite(r["concurrency"]) else r["rate"] for r in rows], float
    )


def _vs_load_charts(report: Report) -> list[str]:
    rows = [r for r in report.rows if r["kind"] != "soak"]
    if not rows:
        return []
    x = _loads(report)
    order = np.argsort(x, kind="stable")
    x = x[order]

    def col(name: str, scale: float = 1.0) -> np.ndarray:
        return np.array([rows[i][name] for i in order], float) * scale

    by_stage = {r["stage"]: r for r in rows}
    markers, bands = [], []
    knee = report.knee
    if knee.cap_stage in by_stage:
        cap = by_stage[knee.cap_stage]
        cap_x = cap["concurrency"] if math.isfinite(cap["concurrency"]) else cap["rate"]
        markers.append((cap_x, f"cap {knee.cap}"))
        if knee.knee_stage in by_stage:
            k = by_stage[knee.knee_stage]
            k_x = k["concurrency"] if math.isfinite(k["concurrency"]) else k["rate"]
            bands.append((k_x, cap_x, f"best {knee.best}"))
    unit = "rate (req/s)" if report.run.info.mode == "open" else "concurrency"
    log_x = bool(x.size > 1 and x.min() > 0 and x.max() / x.min() >= 20)

    def chart(series: Sequence[Series], title: str, y_label: str) -> str:
        return line_chart(
            series,
            title=title,
            y_label=y_label,
            x_label=unit,
            log_x=log_x,
            markers=markers,
            bands=bands,
        )

    return [
        chart([Series("QPS", x, col("qps"))], "Throughput vs load", "req/s"),
        chart([Series("output TPS", x, col("output_tps"))], "Token throughput vs load", "tokens/s"),
        chart(
            [
                Series("avg", x, col("latency_avg_s", 1e3)),
                Series("P99", x, col("latency_p99_s", 1e3)),
            ],
            "E2E latency vs load",
            "ms",
        ),
        chart(
            [
                Series("P50", x, col("ttft_p50_s", 1e3)),
                Series("P99", x, col("ttft_p99_s", 1e3)),
                Series("floor", x, col("ttft_floor_s", 1e3)),
            ],
            "TTFT percentiles vs load",
            "ms",
        ),
        chart(
            [
                Series("P50", x, col("tpot_p50_s", 1e3)),
                Series("P99", x, col("tpot_p99_s", 1e3)),
                Series("floor", x, col("tpot_floor_s", 1e3)),
            ],
            "TPOT percentiles vs load",
            "ms",
        ),
    ]


def _timeline_charts(report: Report) -> list[str]:
    tel = report.telemetry
    t0 = min((s.start_wall_s for s in report.stages), default=0.0)
    bands = [
        (
            r["start_wall_s"] - t0,
            r["end_wall_s"] - t0,
            f"{r['stage']}: {load_label(r['concurrency'], r['rate'])}",
        )
        for r in report.rows
        if math.isfinite(r["end_wall_s"])
    ]

    def series(label: str, signal: str, scale: float = 1.0) -> Series:
        t, v = tel.timeline(signal)  # combined over GPUs and sources as the signal says
        t, v = downsample(*with_gaps(t - t0, v * scale))
        return Series(label, t, v)

    ratios = [
        series("GPU util", "gpu_util", scale=100),
        series("GPU mem", "gpu_mem_util", scale=100),
        series("KV cache", "kv_cache_usage", scale=100),
        series("worker CPU max", "worker_cpu_util", scale=100),
    ]
    queue = [series("running", "running"), series("waiting", "waiting")]
    x_label = "seconds since the first stage"
    return [
        line_chart(
            ratios,
            title="GPU, KV cache and worker CPU over time",
            y_label="%",
            x_label=x_label,
            bands=bands,
        ),
        line_chart(
            queue,
            title="Server batch and queue over time",
            y_label="requests",
            x_label=x_label,
            bands=bands,
        ),
    ]


def _histograms(report: Report) -> list[str]:
    req = report.run.requests
    ok = req["ok"].fillna(False).to_numpy(bool)
    e2e = req["e2e_s"].to_numpy(float, na_value=math.nan) * 1e3
    out = []
    for r in report.rows[:16]:
        sel = ok & (report.stage_ix == r["stage"])
        out.append(
            histogram(
                e2e[sel],
                title=f"E2E latency, stage {r['stage']} (load "
                f"{load_label(r['concurrency'], r['rate'])})",
                x_label="ms",
            )
        )
    return out


def render_html(report: Report) -> str:
    """The whole report.html text."""
    info, knee, v = report.run.info, report.knee, report.overall
    li = "".join
    body = [
        f"<h1>locust-llm report: {escape(info.run_id)}</h1>",
        _md_to_html_table(seed_table(report)),
        f"<p><b>Reading:</b> {escape(knee.reading or 'n/a')}.</p>",
        f"<p><b>Conclusion:</b> {escape(knee.conclusion or 'n/a')}.</p>",
        f"<h2>Verdict</h2><p class=verdict>{escape(v.kind)}</p>",
        "<p>Evidence:</p><ul>" + li(f"<li>{escape(e)}</li>" for e in v.evidence) + "</ul>",
        "<p>Actions:</p><ul>" + li(f"<li>{escape(a)}</li>" for a in v.actions) + "</ul>",
        "<h2>Alerts</h2>"
        + (
            "<ul>"
            + li(f"<li class=alert>{escape(a.message)}</li>" for a in report.alerts)
            + "</ul>"
            if report.alerts
            else "<p>No alert fired.</p>"
        ),
        "<h2>Stage verdicts</h2>"
        + _html_table(
            ["stage", "load", "verdict", "evidence"],
            [
                [
                    str(r["stage"]),
                    load_label(r["concurrency"], r["rate"]),
                    sv.kind,
                    "; ".join(sv.evidence),
                ]
                for r, sv in zip(report.rows, report.verdicts, strict=True)
            ],
        ),
        "<h2>Scaling</h2><div class=grid>" + li(_vs_load_charts(report)) + "</div>",
        "<h2>Telemetry</h2><div class=grid>" + li(_timeline_charts(report)) + "</div>",
        "<h2>Latency histograms</h2><div class=grid>" + li(_histograms(report)) + "</div>",
    ]
    for title, note, headers, rows in detail_sections(report):
        body.append(
            f"<h2>{escape(title)}</h2>"
            + (f"<p>{escape(note)}</p>" if note else "")
            + _html_table(headers, rows)
        )
    if report.warnings:
        body.append(
            "<h2>Warnings</h2><ul>" + li(f"<li>{escape(w)}</li>" for w in report.warnings) + "</ul>"
        )
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>locust-llm report "
        f"{escape(info.run_id)}</title><style>{CSS}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )
