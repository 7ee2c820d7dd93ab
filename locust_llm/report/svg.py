"""Inline SVG charts for report.html: line charts (gaps, markers, bands, a right axis) and
histograms.

Hand-written so the HTML stays one self-contained file (no plotting library, no CDN). A NaN in a
series ends the line there: missing telemetry shows as a gap, never as a drop to 0. Every label
sits outside the plot area (legend and marker/band labels in rows above it, ticks and axis
titles around it), so no data line can cross one; band labels that would collide are moved to a
second row or left to the band's tooltip. Y axes start at zero, so heights compare as sizes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

import numpy as np

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2")
W, H = 640, 340
L, B = 62, 44  # left and bottom margins (tick labels and axis titles)
TITLE_Y, LEGEND_Y, ROW0_Y, ROW_H = 16, 34, 50, 13
#: Estimated width of one character of a 10-11 px label (sans-serif), for collision checks.
CHAR_W = 6.4
LEGEND_CHAR_W = 7.0  # legend text is 11 px


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
    return [start + i * step for i in range(int((hi - start) / step + 1e-9) + 1)]


def _log_ticks(lo_exp: float, hi_exp: float) -> list[float]:
    """1-2-5 ticks between 10**lo_exp and 10**hi_exp (log axes)."""
    out = []
    for decade in range(math.floor(lo_exp), math.ceil(hi_exp) + 1):
        for mult in (1, 2, 5):
            v = mult * 10.0**decade
            if 10**lo_exp * (1 - 1e-9) <= v <= 10**hi_exp * (1 + 1e-9):
                out.append(v)
    return out


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


def label_rows(
    labels: Sequence[tuple[float, str]], *, rows: int = 2, gap_px: float = 6.0
) -> list[int | None]:
    """Row index for each (left x in px, text) so that no two labels in a row overlap; None
    where no row has room (the label is left out). Earlier labels take precedence."""
    ends: list[float] = [-math.inf] * rows
    out: list[int | None] = []
    for x, text in labels:
        width = CHAR_W * len(text)
        row = next((r for r in range(rows) if x >= ends[r] + gap_px), None)
        if row is not None:
            ends[row] = x + width
        out.append(row)
    return out


def _open(title: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" class="chart" '
        f'role="img"><title>{escape(title)}</title>',
        f'<text x="{W / 2}" y="{TITLE_Y}" text-anchor="middle" class="t">{escape(title)}</text>',
    ]


def _legend(labels: Sequence[str], colors: Sequence[str]) -> str:
    out, x = [], float(L)
    for label, color in zip(labels, colors, strict=True):
        out.append(
            f'<rect x="{x:.1f}" y="{LEGEND_Y - 7}" width="14" height="4" fill="{color}"/>'
            f'<text x="{x + 18:.1f}" y="{LEGEND_Y}" class="lg">{escape(label)}</text>'
        )
        x += 18 + LEGEND_CHAR_W * len(label) + 18
    return "".join(out)


def _y_range(values: np.ndarray, y_min: float | None) -> tuple[float, float]:
    fin = values[np.isfinite(values)]
    if fin.size == 0:
        return 0.0, 1.0
    lo = y_min if y_min is not None else float(fin.min())
    hi = float(fin.max()) * 1.05 or 1.0
    return lo, hi if hi > lo else lo + 1


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
    right: Sequence[Series] = (),
    y2_label: str = "",
) -> str:
    """An SVG line chart; ``markers`` are labelled vertical lines, ``bands`` shaded x ranges,
    ``right`` series use a second y axis (from zero) on the right."""
    # a series without a single value (no roofline floors, say) has no line and no legend entry
    series = [s for s in series if np.isfinite(np.asarray(s.ys, float)).any()]
    right = [s for s in right if np.isfinite(np.asarray(s.ys, float)).any()]
    everything = [*series, *right]
    xs_all = np.concatenate([np.asarray(s.xs, float) for s in everything] or [np.empty(0)])
    ys_all = np.concatenate([np.asarray(s.ys, float) for s in series] or [np.empty(0)])
    y2_all = np.concatenate([np.asarray(s.ys, float) for s in right] or [np.empty(0)])
    fin_x = xs_all[np.isfinite(xs_all)]
    parts = _open(title)
    if fin_x.size == 0 or not (np.isfinite(ys_all).any() or np.isfinite(y2_all).any()):
        parts.append(f'<text x="{W / 2}" y="{H / 2}" text-anchor="middle">no data</text></svg>')
        return "".join(parts)
    r_margin = 66 if right else 16
    use_log = log_x and fin_x.min() > 0
    tx = np.log10 if use_log else (lambda a: a)
    x_lo, x_hi = float(tx(fin_x.min())), float(tx(fin_x.max()))
    one_x = x_hi == x_lo  # one x value: an axis from zero to twice it, ticked at 0, x, 2x
    if one_x:
        use_log, tx = False, (lambda a: a)
        x = float(fin_x.min())
        x_lo, x_hi = (0.0, 2 * x) if x > 0 else (x - 1, x + 1)
    y_lo, y_hi = _y_range(ys_all, y_min)
    y2_lo, y2_hi = _y_range(y2_all, 0.0)

    def px(x: float) -> float:
        return L + (float(tx(x)) - x_lo) / (x_hi - x_lo) * (W - L - r_margin)

    # labels above the plot: markers first (they matter most), then bands
    tops = [(px(x) - CHAR_W * len(t) / 2, t, "mk") for x, t in markers if math.isfinite(x)]
    tops += [(px(max(a, fin_x.min())) + 2, t, "bl") for a, _, t in bands]
    rows = label_rows([(x, t) for x, t, _ in tops])
    used = max((r for r in rows if r is not None), default=-1) + 1
    top = ROW0_Y + ROW_H * used - (ROW_H - 4 if used == 0 else 6)
    bottom = H - B

    def py(y: float, lo: float = y_lo, hi: float = y_hi) -> float:
        return bottom - (y - lo) / (hi - lo) * (bottom - top)

    for i, (x0, x1, label) in enumerate(bands):
        a, b = px(max(x0, fin_x.min())), px(min(x1, fin_x.max()))
        parts.append(
            f'<rect x="{a:.1f}" y="{top}" width="{max(b - a, 0):.1f}" height="{bottom - top}" '
            f'class="band band{i % 2}"><title>{escape(label)}</title></rect>'
        )
    for (x, text, cls), row in zip(tops, rows, strict=True):
        if row is not None:
            parts.append(
                f'<text x="{max(x, 0):.1f}" y="{ROW0_Y + ROW_H * row}" class="{cls}">'
                f"{escape(text)}</text>"
            )
    for y in _ticks(y_lo, y_hi):
        parts.append(
            f'<line x1="{L}" y1="{py(y):.1f}" x2="{W - r_margin}" y2="{py(y):.1f}" class="gl"/>'
            f'<text x="{L - 4}" y="{py(y) + 4:.1f}" text-anchor="end" class="tk">{_fmt(y)}</text>'
        )
    if right:
        for y in _ticks(y2_lo, y2_hi):
            parts.append(
                f'<text x="{W - r_margin + 4}" y="{py(y, y2_lo, y2_hi) + 4:.1f}" class="tk">'
                f"{_fmt(y)}</text>"
            )
        mid = (top + bottom) / 2
        parts.append(
            f'<line x1="{W - r_margin}" y1="{top}" x2="{W - r_margin}" y2="{bottom}" class="ax"/>'
            f'<text x="{W - 8}" y="{mid}" text-anchor="middle" class="al" '
            f'transform="rotate(90 {W - 8} {mid})">{escape(y2_label)}</text>'
        )
    parts.append(
        f'<line x1="{L}" y1="{bottom}" x2="{W - r_margin}" y2="{bottom}" class="ax"/>'
        f'<line x1="{L}" y1="{top}" x2="{L}" y2="{bottom}" class="ax"/>'
    )
    if one_x:
        x_ticks = [x_lo, float(fin_x.min()), x_hi]
    elif use_log:
        few = np.unique(fin_x).size <= 12
        x_ticks = sorted(set(fin_x.tolist())) if few else _log_ticks(x_lo, x_hi)
    else:
        x_ticks = _ticks(x_lo, x_hi)
    tick_rows = label_rows([(px(x) - CHAR_W * len(_fmt(x)) / 2, _fmt(x)) for x in x_ticks], rows=1)
    for x, row in zip(x_ticks, tick_rows, strict=True):
        if row is not None:
            parts.append(
                f'<text x="{px(x):.1f}" y="{bottom + 18}" text-anchor="middle" class="tk">'
                f"{_fmt(x)}</text>"
            )
    mid = (top + bottom) / 2
    parts.append(
        f'<text x="{(L + W - r_margin) / 2}" y="{H - 8}" text-anchor="middle" class="al">'
        f"{escape(x_label)}{' (log scale)' if use_log else ''}</text>"
        f'<text x="12" y="{mid}" text-anchor="middle" class="al" '
        f'transform="rotate(-90 12 {mid})">{escape(y_label)}</text>'
    )
    for x, _ in markers:
        if math.isfinite(x):
            parts.append(
                f'<line x1="{px(x):.1f}" y1="{top}" x2="{px(x):.1f}" y2="{bottom}" class="mk"/>'
            )
    colors = [PALETTE[i % len(PALETTE)] for i in range(len(everything))]
    for i, s in enumerate(everything):
        lo, hi = (y2_lo, y2_hi) if i >= len(series) else (y_lo, y_hi)
        xs, ys = np.asarray(s.xs, float), np.asarray(s.ys, float)
        dots = np.isfinite(xs).sum() <= 30
        dash = ' stroke-dasharray="6 3"' if i >= len(series) else ""
        for seg_x, seg_y in segments(xs, ys):
            pts = [(px(x), py(y, lo, hi)) for x, y in zip(seg_x, seg_y, strict=True)]
            parts.append(
                f'<polyline points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in pts)}" fill="none" '
                f'stroke="{colors[i]}" stroke-width="1.8"{dash} class="series"/>'
            )
            if dots:
                parts += [
                    f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2.5" fill="{colors[i]}"/>'
                    for a, b in pts
                ]
    parts.append(_legend([s.label for s in everything], colors))
    parts.append("</svg>")
    return "".join(parts)


def histogram(
    values: np.ndarray,
    *,
    title: str,
    x_label: str,
    bins: int = 40,
    x_max: float | None = None,
) -> str:
    """An SVG histogram of the finite ``values``: x from 0 to ``x_max`` (default: their max),
    so a narrow spread looks narrow and histograms drawn with one ``x_max`` compare."""
    values = np.asarray(values, float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return line_chart([], title=title, x_label=x_label, y_label="requests")
    hi = x_max if x_max is not None and x_max > 0 else float(values.max()) or 1.0
    counts, edges = np.histogram(values, bins=bins, range=(0.0, hi))
    top_count = int(counts.max()) or 1
    y_hi = top_count * 1.05
    top, bottom, right_px = ROW0_Y - 10, H - B, W - 16
    bw = (right_px - L) / len(counts)
    parts = [
        *_open(title),
        f'<line x1="{L}" y1="{bottom}" x2="{right_px}" y2="{bottom}" class="ax"/>',
        f'<line x1="{L}" y1="{top}" x2="{L}" y2="{bottom}" class="ax"/>',
    ]
    for y in _ticks(0.0, y_hi):
        if float(y).is_integer():
            yp = bottom - y / y_hi * (bottom - top)
            parts.append(
                f'<text x="{L - 4}" y="{yp + 4:.1f}" text-anchor="end" class="tk">{_fmt(y)}</text>'
            )
    for i, c in enumerate(counts):
        h = c / y_hi * (bottom - top)
        parts.append(
            f'<rect x="{L + i * bw:.1f}" y="{bottom - h:.1f}" width="{bw * 0.9:.1f}" '
            f'height="{h:.1f}" class="bar"><title>{_fmt(edges[i])}-{_fmt(edges[i + 1])}'
            f": {c}</title></rect>"
        )
    for x in _ticks(0.0, hi):
        xp = L + x / hi * (right_px - L)
        parts.append(
            f'<text x="{xp:.1f}" y="{bottom + 18}" text-anchor="middle" class="tk">{_fmt(x)}</text>'
        )
    mid = (top + bottom) / 2
    parts.append(
        f'<text x="{(L + right_px) / 2}" y="{H - 8}" text-anchor="middle" class="al">'
        f"{escape(x_label)}</text>"
        f'<text x="12" y="{mid}" text-anchor="middle" class="al" '
        f'transform="rotate(-90 12 {mid})">requests</text></svg>'
    )
    return "".join(parts)
