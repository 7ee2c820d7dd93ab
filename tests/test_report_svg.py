"""The SVG helpers' own rules: label rows, log ticks, axes from zero, series without data."""

from __future__ import annotations

import re

import numpy as np
import pytest

from locust_llm.report.svg import CHAR_W, Series, histogram, label_rows, line_chart


def test_label_rows_put_colliding_labels_on_another_row_or_leave_them_out() -> None:
    width = CHAR_W * len("c=100")
    labels = [(0.0, "c=100"), (width / 2, "c=100"), (width, "c=100"), (3 * width, "c=100")]
    # the second collides with the first (row 1), the third with both rows' last (left out)
    assert label_rows(labels) == [0, 1, None, 0]


def _texts(svg: str) -> list[str]:
    return re.findall(r"<text[^>]*>([^<]*)</text>", svg)


def test_log_axis_with_many_loads_gets_1_2_5_ticks() -> None:
    xs = np.array([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128], float)
    svg = line_chart([Series("QPS", xs, xs)], title="t", x_label="c", y_label="q", log_x=True)
    ticks = _texts(svg)
    for tick in ("1", "2", "5", "10", "20", "50", "100"):
        assert tick in ticks
    assert "3.16" not in ticks and "31.6" not in ticks


def test_value_axis_starts_at_zero_and_a_series_without_data_is_left_out() -> None:
    xs = np.array([1.0, 2.0, 3.0])
    svg = line_chart(
        [Series("P50", xs, [500.0, 510.0, 520.0]), Series("floor", xs, [np.nan] * 3)],
        title="t", x_label="c", y_label="ms",
    )  # fmt: skip
    texts = _texts(svg)
    assert "0" in texts and "P50" in texts and "floor" not in texts
    assert svg.count("<polyline") == 1


def test_histogram_x_axis_from_zero_with_a_y_label() -> None:
    values = np.random.default_rng(0).normal(1217.0, 1.0, 200)  # a 4 ms spread at 1.2 s
    svg = histogram(values, title="E2E", x_label="ms", x_max=15_000.0)
    texts = _texts(svg)
    assert "0" in texts
    assert "requests" in texts and "15,000" in texts
    heights = [float(h) for h in re.findall(r'height="([\d.]+)" class="bar"', svg)]
    assert len(heights) == 40
    assert sum(h > 0 for h in heights) <= 2  # the narrow spread stays narrow: one or two bars


def test_one_x_value_gets_an_axis_from_zero_to_twice_it() -> None:
    """A chart of one x value (one load) is one labelled point on a sane axis: 0, the value
    and twice it, not value - 1 .. value + 1."""
    svg = line_chart([Series("QPS", [32.0], [12.5])], title="t", x_label="c", y_label="q")
    ticks = _texts(svg)
    assert "32" in ticks and "0" in ticks and "64" in ticks
    assert not {"31", "31.5", "32.5", "33"} & set(ticks)
    cx = float(re.search(r'<circle cx="([\d.]+)"', svg).group(1))  # type: ignore[union-attr]
    zero = float(
        re.search(r'<text x="([\d.]+)" y="[\d.]+" text-anchor="middle" class="tk">0<', svg).group(1)
    )  # type: ignore[union-attr]
    end = float(
        re.search(r'<text x="([\d.]+)" y="[\d.]+" text-anchor="middle" class="tk">64<', svg).group(
            1
        )
    )  # type: ignore[union-attr]
    assert cx == pytest.approx((zero + end) / 2, abs=0.2)  # the point in the middle
