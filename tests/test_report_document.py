"""report.md, report.html and the console say the same things: they render one document model.

Checked on the committed example run (a real demo run: the simulator, a master and two workers)
and on the synthetic seed sweep: every paragraph, list item and table cell of the document is in
the markdown and in the HTML's visible text; the console's field table agrees with percentiles
computed here from the raw records.
"""

from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from rundir_factory import make_run, seed_specs

from locust_llm.report.blocks import Bullets, Chart, Paragraph, Table
from locust_llm.report.build import Report, build_report
from locust_llm.report.document import document, field_table
from locust_llm.report.load import load_run
from locust_llm.report.render_console import render_console, text_table
from locust_llm.report.render_html import render_html
from locust_llm.report.render_md import render_markdown

EXAMPLE = Path(__file__).resolve().parent.parent / "reports" / "example"


INLINE = frozenset({"b", "code"})


class _Text(HTMLParser):
    """The visible text of a page: <style>, <title> and SVG tooltips left out."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.skip += tag in ("style", "title")
        self.parts.append("" if tag in INLINE else " ")

    def handle_endtag(self, tag: str) -> None:
        self.skip -= tag in ("style", "title")
        self.parts.append("" if tag in INLINE else " ")

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.parts.append(data)


def visible_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    return " ".join("".join(parser.parts).split())


def _squash(text: str) -> str:
    return " ".join(text.replace("`", "").split())


@pytest.fixture(scope="module", params=["example", "seed"])
def report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Report:
    if request.param == "example":
        return build_report(load_run(EXAMPLE))
    run = make_run(tmp_path_factory.mktemp("d") / "seed", seed_specs(), stage_s=4)
    return build_report(load_run(run))


def _texts(report: Report) -> list[str]:
    out = []
    for section in document(report).sections:
        charts_only = all(isinstance(b, Chart) for b in section.blocks)
        out += [section.title] if section.title and not charts_only else []
        for block in section.blocks:
            if isinstance(block, Paragraph):
                out.append(block.text)
            elif isinstance(block, Bullets):
                out += list(block.items) or [block.empty]
            elif isinstance(block, Table):
                out += [*block.headers, *(c for row in block.rows for c in row)]
    return out


def test_markdown_and_html_carry_every_text_of_the_document(report: Report) -> None:
    md = _squash(render_markdown(report))
    html = _squash(visible_text(render_html(report)))
    texts = _texts(report)
    assert len(texts) > 100
    missing_md = [t for t in texts if _squash(t) not in md]
    missing_html = [t for t in texts if _squash(t) not in html]
    assert not missing_md and not missing_html, (missing_md[:5], missing_html[:5])


def test_the_issue_s_sections_are_in_both(report: Report) -> None:
    md, html = render_markdown(report), visible_text(render_html(report))
    for text in ("Reading:", "Conclusion:", "Verdict:", "Evidence:", "Actions:", "Alerts",
                 "Definitions", "GPU mem used = GPU memory in use / total memory"):  # fmt: skip
        assert text in md and text in html, text
    desc = document(report).sections[0].blocks[0]
    assert isinstance(desc, Paragraph) and "closed loop" in desc.text and "stage(s)" in desc.text


def test_example_caveat_is_in_both() -> None:
    report = build_report(load_run(EXAMPLE))
    assert report.knee.notes  # the example sweep's cap stops below an overloaded stage
    md, html = render_markdown(report), visible_text(render_html(report))
    for note in report.knee.notes:
        assert note in md and note in html
    assert re.search(r"load \d+ is overloaded \(see its verdict\)", html)


def test_still_scaling_caveat_reaches_the_html(tmp_path: Path) -> None:
    # only the linear part of the seed sweep: the knee lies above the highest concurrency
    run = make_run(tmp_path / "lin", seed_specs()[:3], stage_s=4)
    report = build_report(load_run(run))
    html = visible_text(render_html(report))
    assert "still scaling at the highest concurrency" in html and "extend the sweep" in html


def test_console_field_table_matches_the_records() -> None:
    report = build_report(load_run(EXAMPLE))
    req = report.run.requests
    text = render_console(report, EXAMPLE / "report.html")
    lines = text.splitlines()
    header = lines[1].split()
    assert header[:4] == ["stage", "concurrency", "QPS", "out"]
    for row, line in zip(report.rows, lines[3 : 3 + len(report.rows)], strict=True):
        sel = req[(report.stage_ix == row["stage"]) & req["ok"].fillna(False).to_numpy(bool)]
        cells = line.split()
        ttft_p50 = float(cells[4].replace(",", ""))
        e2e_p99 = float(cells[9].replace(",", ""))
        assert ttft_p50 == round(np.percentile(sel["ttft_s"], 50) * 1e3)
        assert e2e_p99 == round(np.percentile(sel["e2e_s"], 99) * 1e3)
    assert "Verdict: " + report.overall.kind in text and text.endswith("report.html")


def test_text_table_aligns_numbers_right_and_prose_left() -> None:
    table = Table(("name", "n"), (("a", "1"), ("longer", "100")), frozenset({0}))
    assert text_table(table, indent="").splitlines() == [
        "name      n",
        "------  ---",
        "a         1",
        "longer  100",
    ]


def test_field_table_has_the_field_s_columns() -> None:
    table = field_table(build_report(load_run(EXAMPLE)))
    assert table.headers == ("stage", "concurrency", "QPS", "out tok/s", "TTFT P50", "TTFT P99",
                             "TPOT P50", "TPOT P99", "E2E P50", "E2E P99", "errors")  # fmt: skip


def test_docs_console_summary_is_what_the_command_prints() -> None:
    doc = (EXAMPLE.parent.parent / "docs" / "report.md").read_text()
    command = "locust-llm report reports/example --out /tmp/example-report"
    assert f"`{command}` prints" in doc
    block = doc.split(f"`{command}` prints", 1)[1].split("```\n", 2)[1]
    out = subprocess.run(
        [str(Path(sys.executable).parent / "locust-llm"), *command.split()[1:]],
        cwd=EXAMPLE.parent.parent, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 3, out.stderr  # the example's alerts fired
    assert out.stdout == block


def test_a_one_stage_report_draws_no_charts_against_load(tmp_path: Path) -> None:
    """One load is one point: the key chart and the scaling charts (a degenerate x axis of
    49-51 before) are left out, the Scaling section says why, the charts over time stay."""
    report = build_report(load_run(make_run(tmp_path / "one", seed_specs()[2:3], stage_s=4)))
    html = render_html(report)
    assert 'data-chart="key"' not in html and 'data-chart="scaling"' not in html
    assert 'data-chart="telemetry"' in html and 'data-chart="histograms"' in html
    said = "One load (50): charts against load need stages at two loads or more"
    assert said in visible_text(html) and said in render_markdown(report)
    for svg in re.findall(r"<svg.*?</svg>", html, re.S):  # no x axis around the one load
        assert ">49<" not in svg and ">51<" not in svg
    two = build_report(load_run(make_run(tmp_path / "two", seed_specs()[2:4], stage_s=4)))
    assert 'data-chart="key"' in render_html(two) and "One load" not in render_markdown(two)
