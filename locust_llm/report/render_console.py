"""The console summary of a report: what ``locust-llm report``, ``run`` and ``demo`` print.

The field's compact table first (per stage QPS, output tok/s, TTFT / TPOT / E2E P50 and P99,
errors: what vLLM's benchmark, GuideLLM and EvalScope print), the requests sent, completed,
failed and cancelled, each error kind's most frequent message when requests failed, then the
reading, conclusion and caveats, the capacity search's answer, the verdict with its evidence
and actions, the time split, the alerts, the comparison with other runs (``--compare``) and
where the full report is. Every line
comes from the document model (:mod:`locust_llm.report.document`), so the console says what
report.md and report.html say.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from locust_llm.report.blocks import Block, Bullets, Document, Paragraph, Table
from locust_llm.report.build import Report
from locust_llm.report.document import document, field_table, request_counts, run_state_banner

B = TypeVar("B", bound=Block)


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


def _blocks(doc: Document, key: str, kind: type[B]) -> list[B]:
    """The blocks of one kind in section ``key``, in order."""
    return [b for b in doc.section(key).blocks if isinstance(b, kind)]


def render_console(report: Report, report_path: Path | None = None) -> str:
    """The summary printed after a run (times in ms)."""
    doc = document(report)
    state = run_state_banner(report)
    lines = [state, ""] if state else []
    lines += ["Per stage (times in ms):", text_table(field_table(report)), ""]
    lines += [f"Requests: {request_counts(report)}."]
    if report.errors:
        lines += ["", "Errors (each kind's most frequent message):"]
        lines += [text_table(_blocks(doc, "error-messages", Table)[0]), ""]
    for block in doc.section("overview").blocks:
        if isinstance(block, Paragraph) and block.lead:
            lines.append(f"{block.lead}: {block.text}")
        elif isinstance(block, Bullets):
            lines += [f"{block.lead}:", *(f"  - {i}" for i in block.items)]
    capacity = [s for s in doc.sections if s.key == "capacity"]
    for block in capacity[0].blocks[:2] if capacity else ():
        if isinstance(block, Paragraph):
            lines.append(f"{block.lead}: {block.text}")
    verdict = doc.section("verdict")
    evidence, actions = _blocks(doc, "verdict", Bullets)
    basis = next(b for b in verdict.blocks if isinstance(b, Paragraph))
    lines += ["", verdict.title, f"  ({basis.text})", *(f"  - {e}" for e in evidence.items)]
    if actions.items:
        lines += [f"  {actions.lead}:", *(f"    - {a}" for a in actions.items)]
    split = next(b for b in doc.section("time-split").blocks if isinstance(b, Bullets))
    if split.items:
        lines += ["", "Time split:", *(f"  - {s}" for s in split.items)]
    alerts = next(b for b in doc.section("alerts").blocks if isinstance(b, Bullets))
    if alerts.items:
        lines += ["", f"Alerts ({len(alerts.items)}):", *(f"  - {a}" for a in alerts.items)]
    if report.comparison:
        lines += ["", f"{doc.section('comparison').title}:"]
        lines.append(text_table(_blocks(doc, "comparison", Table)[0]))
    if report.warnings:
        lines += ["", "Warnings:", *(f"  - {w}" for w in report.warnings)]
    if report_path is not None:
        lines += ["", f"Report: {report_path}"]
    return "\n".join(lines)
