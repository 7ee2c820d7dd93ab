"""The console summary of a report: what ``locust-llm report``, ``run`` and ``demo`` print.

The field's compact table (per stage QPS, output tok/s, TTFT / TPOT / E2E P50 and P99,
errors: what vLLM's benchmark, GuideLLM and EvalScope print), the requests sent, completed,
failed and cancelled, then the reading, conclusion and
caveats, the verdict with its evidence, the alerts and where the full report is. Every line
comes from the document model (:mod:`locust_llm.report.document`), so the console says what
report.md and report.html say.
"""

from __future__ import annotations

from pathlib import Path

from locust_llm.report.blocks import Bullets, Paragraph, Table
from locust_llm.report.build import Report
from locust_llm.report.document import document, field_table, request_counts, run_state_banner


def text_table(table: Table, indent: str = "  ") -> str:
    """A table as aligned plain text: prose columns left-aligned, numbers right-aligned."""
    cells = [table.headers, *table.rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(table.headers))]

    def line(row: tuple[str, ...]) -> str:
        out = [
            c.ljust(w) if i in table.text_columns else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        return (indent + "  ".join(out)).rstrip()

    rule = indent + "  ".join("-" * w for w in widths)
    return "\n".join([line(table.headers), rule, *(line(r) for r in table.rows)])


def render_console(report: Report, report_path: Path | None = None) -> str:
    """The summary printed after a run (times in ms)."""
    doc = document(report)
    state = run_state_banner(report)
    lines = [state, ""] if state else []
    lines += ["Per stage (times in ms):", text_table(field_table(report)), ""]
    lines += [f"Requests: {request_counts(report)}."]
    for block in doc.section("overview").blocks:
        if isinstance(block, Paragraph) and block.lead:
            lines.append(f"{block.lead}: {block.text}")
        elif isinstance(block, Bullets):
            lines += [f"{block.lead}:", *(f"  - {i}" for i in block.items)]
    verdict = doc.section("verdict")
    evidence = next(b for b in verdict.blocks if isinstance(b, Bullets))
    basis = next(b for b in verdict.blocks if isinstance(b, Paragraph))
    lines += ["", verdict.title, f"  ({basis.text})", *(f"  - {e}" for e in evidence.items)]
    split = next(b for b in doc.section("time-split").blocks if isinstance(b, Bullets))
    if split.items:
        lines += ["", "Time split:", *(f"  - {s}" for s in split.items)]
    alerts = next(b for b in doc.section("alerts").blocks if isinstance(b, Bullets))
    if alerts.items:
        lines += ["", f"Alerts ({len(alerts.items)}):", *(f"  - {a}" for a in alerts.items)]
    if report.warnings:
        lines += ["", "Warnings:", *(f"  - {w}" for w in report.warnings)]
    if report_path is not None:
        lines += ["", f"Report: {report_path}"]
    return "\n".join(lines)
