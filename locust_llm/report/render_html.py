"""report.html: the document model (:mod:`locust_llm.report.document`) as one self-contained page
(inline CSS and SVG, no scripts, no network).

Every section of report.md is here, in the same order and words; the HTML adds the charts each
:class:`~locust_llm.report.document.Chart` slot names: ``key`` (throughput and P99 latency vs
load with the knee band and the cap, beside the verdict so both are above the fold), ``scaling``
(token throughput, E2E, TTFT and TPOT vs load), ``telemetry`` (GPU / KV / worker-CPU and the
server's batch and queue over time, one shaded band per stage) and ``histograms`` (E2E per
stage, on one x axis from zero). Charts sit in a responsive grid: two columns on a 1400 px
window, one on 800 px. Telemetry gaps (NaN samples, or silences longer than 3 sampling
intervals) break the lines.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from html import escape

import numpy as np

from locust_llm.report.blocks import Block, Bullets, Chart, Paragraph, Section, Table
from locust_llm.report.build import Report
from locust_llm.report.document import document
from locust_llm.report.fmt import load_label
from locust_llm.report.svg import Series, histogram, line_chart

MAX_POINTS = 1500
CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1600px;
padding:12px 24px;color:#222}h1{font-size:1.5em;margin:.3em 0}h2{margin:1.2em 0 .4em}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 7px;text-align:right;vertical-align:top}
th{background:#f3f3f3}td.l,th.l{text-align:left}.tw{overflow-x:auto}
#verdict h2{font-size:1.5em;color:#7a1f00}ul{margin:.2em 0 .6em;padding-left:1.4em}
.lead{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,520px),1fr));
gap:8px 24px;align-items:start}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,560px),1fr));
gap:12px 24px}figure{margin:0}.chart{width:100%;height:auto;font:11px sans-serif}
.t{font-weight:600;font-size:13px}.ax{stroke:#444}.gl{stroke:#eee}.band0{fill:#e6ebf7}
.band1{fill:#f3f3ea}.bl{fill:#557;font-size:10px}.mk{stroke:#c00;fill:#c00;
stroke-dasharray:4 3}text.mk{stroke:none;font-weight:600}.bar{fill:#4a7fb5}.alert{color:#b00}
code{background:#f3f3f3;padding:0 3px}"""
_CODE = re.compile(r"`([^`]+)`")


def _text(text: str) -> str:
    """Escaped text with `code` spans."""
    return _CODE.sub(r"<code>\1</code>", escape(text))


def _html_table(table: Table) -> str:
    def cell(tag: str, i: int, text: str) -> str:
        cls = ' class="l"' if i in table.text_columns else ""
        return f"<{tag}{cls}>{escape(text)}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(table.headers))
    body = "".join(
        "<tr>" + "".join(cell("td", i, c) for i, c in enumerate(r)) + "</tr>" for r in table.rows
    )
    return f'<div class="tw"><table><tr>{head}</tr>{body}</table></div>'


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


def _x(row: dict) -> float:
    return row["concurrency"] if math.isfinite(row["concurrency"]) else row["rate"]


class _VsLoad:
    """Charts against the stages' load (soak stages left out), with the knee band and cap."""

    def __init__(self, report: Report) -> None:
        rows = [r for r in report.rows if r["kind"] != "soak"]
        x = np.array([_x(r) for r in rows], float)
        order = np.argsort(x, kind="stable")
        self.rows, self.x = [rows[i] for i in order], x[order]
        by_stage = {r["stage"]: r for r in rows}
        self.markers: list[tuple[float, str]] = []
        self.bands: list[tuple[float, float, str]] = []
        knee = report.knee
        if knee.cap_stage in by_stage:
            cap_x = _x(by_stage[knee.cap_stage])
            self.markers.append((cap_x, f"cap {knee.cap}"))
            if knee.knee_stage in by_stage:
                self.bands.append((_x(by_stage[knee.knee_stage]), cap_x, f"best {knee.best}"))
        self.unit = "rate (req/s)" if report.run.info.mode == "open" else "concurrency"
        x = self.x
        self.log_x = bool(x.size > 1 and x.min() > 0 and x.max() / x.min() >= 20)

    def col(self, name: str, scale: float = 1.0) -> np.ndarray:
        return np.array([r[name] for r in self.rows], float) * scale

    def series(self, label: str, name: str, scale: float = 1.0) -> Series:
        return Series(label, self.x, self.col(name, scale))

    def chart(self, series: Sequence[Series], title: str, y_label: str, **kw: object) -> str:
        return line_chart(
            series,
            title=title,
            y_label=y_label,
            x_label=self.unit,
            log_x=self.log_x,
            markers=self.markers,
            bands=self.bands,
            **kw,  # type: ignore[arg-type]
        )


def _key_chart(report: Report) -> list[str]:
    v = _VsLoad(report)
    if not v.rows:
        return []
    return [
        v.chart(
            [v.series("QPS (left)", "qps")],
            "Throughput and P99 latency vs load",
            "completed req/s",
            right=[v.series("E2E P99 ms (right)", "latency_p99_s", 1e3)],
            y2_label="E2E P99 (ms)",
        )
    ]


def _vs_load_charts(report: Report) -> list[str]:
    v = _VsLoad(report)
    if not v.rows:
        return []
    return [
        v.chart([v.series("output TPS", "output_tps")], "Token throughput vs load", "tokens/s"),
        v.chart(
            [v.series("avg", "latency_avg_s", 1e3), v.series("P99", "latency_p99_s", 1e3)],
            "E2E latency vs load",
            "ms",
        ),
        v.chart(
            [
                v.series("P50", "ttft_p50_s", 1e3),
                v.series("P99", "ttft_p99_s", 1e3),
                v.series("roofline floor", "ttft_floor_s", 1e3),
            ],
            "TTFT percentiles vs load",
            "ms",
        ),
        v.chart(
            [
                v.series("P50", "tpot_p50_s", 1e3),
                v.series("P99", "tpot_p99_s", 1e3),
                v.series("roofline floor", "tpot_floor_s", 1e3),
            ],
            "TPOT percentiles vs load",
            "ms",
        ),
    ]


def _band_label(row: dict) -> str:
    """A stage band's label: ``c=50`` (closed loop) or ``12.5/s`` (open loop)."""
    load = load_label(row["concurrency"], row["rate"])
    return f"c={load}" if math.isfinite(row["concurrency"]) else load


def _timeline_charts(report: Report) -> list[str]:
    tel = report.telemetry
    t0 = min((s.start_wall_s for s in report.stages), default=0.0)
    bands = [
        (
            r["start_wall_s"] - t0,
            r["end_wall_s"] - t0,
            _band_label(r),
        )
        for r in report.rows
        if math.isfinite(r["end_wall_s"])
    ]

    def series(label: str, signal: str, scale: float = 1.0) -> Series:
        t, v = tel.timeline(signal)  # combined over GPUs and sources as the signal says
        t, v = downsample(*with_gaps(t - t0, v * scale))
        return Series(label, t, v)

    shown = [
        ("GPU util", "gpu_util"),
        ("GPU mem used", "gpu_mem_util"),
        ("KV cache", "kv_cache_usage"),
        ("worker CPU max", "worker_cpu_util"),
    ]
    words = report.words  # no GPU series for a device that is no GPU
    ratios = [series(label, sig, scale=100) for label, sig in shown if words.keeps_header(label)]
    queue = [series("running", "running"), series("waiting", "waiting")]
    x_label = "seconds since the first stage"
    return [
        line_chart(
            ratios,
            title=("GPU, " if words.is_gpu else "") + "KV cache and worker CPU over time",
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
    in_stage = ok & (report.stage_ix >= 0) & np.isfinite(e2e)
    x_max = float(e2e[in_stage].max()) if in_stage.any() else None
    out = []
    for r in report.rows[:16]:
        sel = ok & (report.stage_ix == r["stage"])
        out.append(
            histogram(
                e2e[sel],
                title=f"E2E latency, stage {r['stage']} (load "
                f"{load_label(r['concurrency'], r['rate'])})",
                x_label="E2E latency (ms), one axis for all stages",
                x_max=x_max,
            )
        )
    return out


CHARTS: dict[str, Callable[[Report], list[str]]] = {
    "key": _key_chart,
    "scaling": _vs_load_charts,
    "telemetry": _timeline_charts,
    "histograms": _histograms,
}


def _block(block: Block, report: Report) -> str:
    if isinstance(block, Paragraph):
        lead = f"<b>{escape(block.lead)}:</b> " if block.lead else ""
        return f"<p>{lead}{_text(block.text)}</p>"
    if isinstance(block, Bullets):
        lead = f"<p>{escape(block.lead)}:</p>" if block.lead else ""
        if not block.items:
            return f"{lead}<p>{escape(block.empty)}</p>"
        cls = f' class="{block.css}"' if block.css else ""
        return lead + "<ul>" + "".join(f"<li{cls}>{_text(i)}</li>" for i in block.items) + "</ul>"
    if isinstance(block, Table):
        return _html_table(block)
    if isinstance(block, Chart):
        figures = "".join(f"<figure>{svg}</figure>" for svg in CHARTS[block.name](report))
        return f'<div class="grid charts" data-chart="{block.name}">{figures}</div>'
    raise TypeError(f"unknown block {block!r}")


def _section(section: Section, report: Report) -> str:
    title = f"<h2>{escape(section.title)}</h2>" if section.title else ""
    body = "".join(_block(b, report) for b in section.blocks)
    if section.aside is not None:
        body = f'<div class="lead"><div>{body}</div>{_block(section.aside, report)}</div>'
    return f'<section id="{section.key}">{title}{body}</section>'


def render_html(report: Report) -> str:
    """The whole report.html text."""
    doc = document(report)
    body = [f"<h1>{escape(doc.title)}</h1>", *(_section(s, report) for s in doc.sections)]
    return (
        '<!doctype html><html lang="en"><head><meta charset=utf-8>'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(doc.title)}</title><style>{CSS}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )
