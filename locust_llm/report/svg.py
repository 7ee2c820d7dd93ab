"""Inline SVG charts for report.html: line charts (with gaps, markers and bands) and histograms.

Hand-written so the HTML stays one self-contained file (no plotting library, no CDN). A NaN in a
series ends the line there: missing telemetry shows as a gap, never as a drop to 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import numpy as np

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2")
W, H = 640, 300
L, R, T, B = 60, 16, 28, 44  # margins


@dataclass(frozen=True)
class Series:
    """One line: label, x and y values (NaN = gap)."""

    label: str
    xs: Sequence[float] | np.ndarray
    ys: Sequence[float] | np.ndarray


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    step = 10 ** math.floor(math.log10((hi - lo) / n))
    for mult in (1, 2, 5, 10):
        if (hi - lo) / (step * mult) <= n:
            step *= mult
            break
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 1)]


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 or float(v).is_integer() else f"{v:.3g}"


def segments(xs: np.ndarray, ys: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Runs of consecutive finite points (each NaN in ys splits the line)."""
    ok = np.isfinite(xs) & np.isfinite(ys)
    out, start = [], None
    for i, good in enumerate(ok):
        if good and start is None:
            start = i
        if not good and start is not None:
            out.append((xs[start:i], ys[start:i]))
            start = None
    if start is not None:
        out.append((xs[start:], ys[start:]))
    return out


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    log_x: bool = False,
    markers: Sequence[tuple[float, str]] = (),
    bands: Sequence[tuple[float, float, str]] = (),
    y_min: float | None = 0.0,
) -> str:
    """An SVG line chart; ``markers`` are labelled vertical lines, ``bands`` shaded x ranges."""
    xs_all = np.concatenate([np.asarray(s.xs, float) for s in series] or [np.empty(0)])
    ys_all = np.concatenate([np.asarray(s.ys, float) for s in series] or [np.empty(0)])
    fin_x, fin_y = xs_all[np.isfinite(xs_all)], ys_all[np.isfinite(ys_all)]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" class="chart" '
        f'role="img"><title>{escape(title)}</title>',
        f'<text x="{W / 2}" y="16" text-anchor="middle" class="t">{escape(title)}</text>',
    ]
    if fin_x.size == 0 or fin_y.size == 0:
        parts.append(f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle">no data</text></svg>')
        return "".join(parts)
    use_log = log_x and fin_x.min() > 0
    tx = np.log10 if use_log else (lambda a: a)
    x_lo, x_hi = float(tx(fin_x.min())), float(tx(fin_x.max()))
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    y_lo = y_min if y_min is not None else float(fin_y.min())
    y_hi = float(fin_y.max()) * 1.05 or 1.0
    if y_hi <= y_lo:
        y_hi = y_lo + 1

    def px(x: float) -> float:
        return L + (float(tx(x)) - x_lo) / (x_hi - x_lo) * (W - L - R)

    def py(y: float) -> float:
        return H - B - (y - y_lo) / (y_hi - y_lo) * (H - T - B)

    for x0, x1, label in bands:
        a, b = px(max(x0, fin_x.min())), px(min(x1, fin_x.max()))
        parts.append(
            f'<rect x="{a:.1f}" y="{T}" width="{max(b - a, 0):.1f}" '
            f'height="{H - T - B}" class="band"><title>{escape(label)}</title></rect>'
            f'<text x="{a + 2:.1f}" y="{T + 10}" class="bl">{escape(label)}</text>'
        )
    parts.append(
        f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" class="ax"/>'
        f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" class="ax"/>'
    )
    for y in _ticks(y_lo, y_hi):
        parts.append(f'<text x="{L - 4}" y="{py(y) + 4:.1f}" text-anchor="end">{_fmt(y)}</text>')
    x_ticks = (
        sorted(set(fin_x.tolist()))
        if use_log and np.unique(fin_x).size <= 12
        else [10**t if use_log else t for t in _ticks(x_lo, x_hi)]
    )
    for x in x_ticks:
        parts.append(
            f'<text x="{px(x):.1f}" y="{H - B + 14}" text-anchor="middle">{_fmt(x)}</text>'
        )
    parts.append(
        f'<text x="{(L + W - R) / 2}" y="{H - 8}" text-anchor="middle">'
        f"{escape(x_label)}{' (log)' if use_log else ''}</text>"
        f'<text x="12" y="{(T + H - B) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 12 {(T + H - B) / 2})">{escape(y_label)}</text>'
    )
    for x, label in markers:
        if math.isfinite(x):
            parts.append(
                f'<line x1="{px(x):.1f}" y1="{T}" x2="{px(x):.1f}" y2="{H - B}" '
                f'class="mk"/><text x="{px(x) + 3:.1f}" y="{T + 22}" class="mk">'
                f"{escape(label)}</text>"
            )
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        for xs, ys in segments(np.asarray(s.xs, float), np.asarray(s.ys, float)):
            pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys, strict=True))
            parts.append(
                f'<polyline points="{pts}" fill="none" stroke="{color}" '
                f'stroke-width="1.5" class="series"/>'
            )
        parts.append(
            f'<text x="{W - R - 4}" y="{T + 12 + 13 * i}" text-anchor="end" '
            f'fill="{color}">{escape(s.label)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def histogram(values: np.ndarray, *, title: str, x_label: str, bins: int = 40) -> str:
    """An SVG histogram of the finite ``values``."""
    values = np.asarray(values, float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return line_chart([], title=title, x_label=x_label, y_label="requests")
    if np.ptp(values) <= 1e-9 * max(float(np.abs(values).max()), 1e-12):
        values = np.full_like(values, values.mean())  # equal but for float noise: one bar
    counts, edges = np.histogram(values, bins=bins)
    top = counts.max() or 1
    bw = (W - L - R) / len(counts)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" class="chart" '
        f'role="img"><title>{escape(title)}</title>',
        f'<text x="{W / 2}" y="16" text-anchor="middle" class="t">{escape(title)}</text>',
        f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" class="ax"/>',
    ]
    for i, c in enumerate(counts):
        h = c / top * (H - T - B)
        parts.append(
            f'<rect x="{L + i * bw:.1f}" y="{H - B - h:.1f}" width="{bw * 0.9:.1f}" '
            f'height="{h:.1f}" class="bar"><title>{_fmt(edges[i])}-{_fmt(edges[i + 1])}'
            f": {c}</title></rect>"
        )
    for x in _ticks(float(edges[0]), float(edges[-1])):
        xp = L + (x - edges[0]) / (edges[-1] - edges[0] or 1) * (W - L - R)
        parts.append(f'<text x="{xp:.1f}" y="{H - B + 14}" text-anchor="middle">{_fmt(x)}</text>')
    parts.append(
        f'<text x="{L - 4}" y="{T + 4}" text-anchor="end">{top}</text>'
        f'<text x="{(L + W - R) / 2}" y="{H - 8}" text-anchor="middle">'
        f"{escape(x_label)}</text></svg>"
    )
    return "".join(parts)
