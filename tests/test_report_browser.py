"""report.html in real headless Chromium at 1400 px and 800 px: layout facts measured in the page.

The committed example run (a real demo run) is rendered to a file and opened in the system
Chromium (Playwright). Measured, not assumed: the charts' grid has two columns at 1400 px and one
at 800 px; the verdict starts inside the first screen (and, at 1400 px, the key chart too); no
chart label (title, legend, marker, stage band, ticks, axis titles) is crossed by a data line or
a marker line, and no two labels of a chart overlap; the stage verdicts' evidence column is
left-aligned; every histogram has a y label; the charts' value axes start at zero. Screenshots
of each width are written next to the page (``pytest --basetemp DIR`` keeps them) to be looked at.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rundir_factory import DECODE, make_run, server_stage
from webui_support import chromium

from locust_llm.report.build import build_report
from locust_llm.report.load import load_run
from locust_llm.report.render_html import render_html

pytestmark = pytest.mark.browser

EXAMPLE = Path(__file__).resolve().parent.parent / "reports" / "example"
VIEWPORT_HEIGHT = 900

#: In the page: label/line crossings, label/label overlaps, grid columns, key boxes.
MEASURE_JS = """() => {
  const inside = (p, r) => p.x > r.left + 0.5 && p.x < r.right - 0.5 &&
                           p.y > r.top + 0.5 && p.y < r.bottom - 0.5;
  const crossings = [], overlaps = [], charts = [];
  for (const svg of document.querySelectorAll('svg.chart')) {
    const title = svg.querySelector('text.t').textContent;
    const ctm = svg.getScreenCTM();
    const labels = [...svg.querySelectorAll('text')].map(t => ({text: t.textContent,
      cls: t.getAttribute('class') || '', r: t.getBoundingClientRect()}));
    const lines = [];
    for (const pl of svg.querySelectorAll('polyline'))
      lines.push([...pl.points].map(p => new DOMPoint(p.x, p.y).matrixTransform(ctm)));
    for (const ln of svg.querySelectorAll('line.mk')) {
      const a = new DOMPoint(ln.x1.baseVal.value, ln.y1.baseVal.value).matrixTransform(ctm);
      const b = new DOMPoint(ln.x2.baseVal.value, ln.y2.baseVal.value).matrixTransform(ctm);
      lines.push([a, b]);
    }
    let segments = 0;
    for (const pts of lines) for (let i = 1; i < pts.length; i++) {
      segments++;
      const a = pts[i - 1], b = pts[i];
      const steps = Math.max(1, Math.ceil(Math.hypot(b.x - a.x, b.y - a.y)));
      for (const l of labels) {
        for (let k = 0; k <= steps; k++) {
          const p = {x: a.x + (b.x - a.x) * k / steps, y: a.y + (b.y - a.y) * k / steps};
          if (inside(p, l.r)) { crossings.push(title + ': ' + l.text); break; }
        }
      }
    }
    for (let i = 0; i < labels.length; i++) for (let j = i + 1; j < labels.length; j++) {
      const a = labels[i].r, b = labels[j].r;
      const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
      const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
      if (w > 0.5 && h > 0.5) overlaps.push(title + ': ' + labels[i].text + ' / ' + labels[j].text);
    }
    charts.push({title, segments, labels: labels.map(l => [l.text, l.cls])});
  }
  const grids = {};
  for (const g of document.querySelectorAll('.grid.charts')) {
    const lefts = new Set([...g.children].map(c => Math.round(c.getBoundingClientRect().left)));
    grids[g.dataset.chart] = {columns: lefts.size, figures: g.children.length,
                              width: Math.round(g.children[0].getBoundingClientRect().width)};
  }
  const box = s => document.querySelector(s).getBoundingClientRect();
  const evidence = document.querySelector('#stage-verdicts tr:nth-child(2) td:nth-child(4)');
  return {crossings, overlaps, charts, grids, innerHeight, innerWidth,
          verdictTop: box('#verdict').top, keyTop: box('[data-chart="key"] svg').top,
          keyBottom: box('[data-chart="key"] svg').bottom,
          evidenceAlign: getComputedStyle(evidence).textAlign,
          scrollWidth: document.documentElement.scrollWidth};
}"""


#: A crowded sweep: 14 short stages, so stage bands and their labels are narrow.
CROWDED = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)


@pytest.fixture(scope="module")
def page_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("html") / "report.html"
    path.write_text(render_html(build_report(load_run(EXAMPLE))))
    return path


@pytest.fixture(scope="module")
def crowded_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("crowded")
    run = make_run(tmp / "run", [server_stage(DECODE, c) for c in CROWDED], stage_s=3)
    path = tmp / "report.html"
    path.write_text(render_html(build_report(load_run(run))))
    return path


def _measure(page_path: Path, profile: Path, width: int) -> dict[str, Any]:
    with chromium(profile, width=width, height=VIEWPORT_HEIGHT) as page:
        page.goto(page_path.as_uri())
        page.screenshot(path=str(page_path.with_name(f"report-{width}.png")))
        page.screenshot(path=str(page_path.with_name(f"report-{width}-full.png")), full_page=True)
        return page.evaluate(MEASURE_JS)


@pytest.mark.parametrize(("width", "columns"), [(1400, 2), (800, 1)])
def test_report_layout_in_chromium(
    page_path: Path, tmp_path: Path, width: int, columns: int
) -> None:
    m = _measure(page_path, tmp_path / "profile", width)
    assert m["innerWidth"] == width
    assert m["scrollWidth"] <= width  # wide tables scroll inside their box, not the page
    for name in ("scaling", "telemetry", "histograms"):
        assert m["grids"][name]["columns"] == columns, (name, m["grids"])
    assert m["verdictTop"] < m["innerHeight"]
    if width >= 1400:  # the verdict and the key chart side by side, both on the first screen
        assert m["keyBottom"] < m["innerHeight"], m["keyBottom"]
        assert m["keyTop"] < m["innerHeight"] / 2 + 100
    assert not m["crossings"], m["crossings"][:10]
    assert not m["overlaps"], m["overlaps"][:10]
    assert m["evidenceAlign"] == "left"
    charts = {c["title"]: c for c in m["charts"]}
    lines = [c for t, c in charts.items() if not t.startswith("E2E latency, stage")]
    assert len(charts) == 12 and all(c["segments"] > 0 for c in lines)  # the check saw lines
    for title, chart in charts.items():
        texts = [t for t, _ in chart["labels"]]
        if title.startswith("E2E latency, stage"):
            assert "requests" in texts and "0" in texts, title  # y label; x from zero
        elif " vs load" in title:
            assert "0" in texts, title  # value axis from zero
    key = charts["Throughput and P99 latency vs load"]
    assert any(t.startswith("cap ") for t, _ in key["labels"])
    assert any(t.startswith("best ") for t, _ in key["labels"])
    stages = [t for t, cls in charts["GPU, KV cache and worker CPU over time"]["labels"]
              if cls == "bl"]  # fmt: skip
    assert stages == ["c=1", "c=10", "c=50", "c=100", "c=200"]


@pytest.mark.parametrize("width", [1400, 800])
def test_crowded_sweep_labels_stay_apart(crowded_path: Path, tmp_path: Path, width: int) -> None:
    m = _measure(crowded_path, tmp_path / "profile", width)
    assert not m["crossings"], m["crossings"][:10]
    assert not m["overlaps"], m["overlaps"][:10]
    charts = {c["title"]: c for c in m["charts"]}
    stages = [t for t, cls in charts["GPU, KV cache and worker CPU over time"]["labels"]
              if cls == "bl"]  # fmt: skip
    # most stages keep a visible label (two rows); the rest keep their tooltip
    assert len(stages) >= len(CROWDED) // 2 and stages[0] == "c=1"
