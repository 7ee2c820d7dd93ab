"""report.md: the document model (:mod:`locust_llm.report.document`) as GitHub markdown.

The seed's table first, then its reading, conclusion and caveats, the verdict with evidence and
actions, alerts, the detail tables, warnings and definitions. Charts are the HTML's; this file
formats the blocks and computes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from locust_llm.report.blocks import Block, Bullets, Chart, Paragraph, Table
from locust_llm.report.build import Report
from locust_llm.report.document import document


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _block(block: Block) -> list[str]:
    if isinstance(block, Paragraph):
        return [f"**{block.lead}:** {block.text}" if block.lead else block.text]
    if isinstance(block, Bullets):
        body = "\n".join(f"- {i}" for i in block.items) if block.items else block.empty
        return [f"{block.lead}:", body] if block.lead else [body]
    if isinstance(block, Table):
        return [md_table(block.headers, block.rows)]
    if isinstance(block, Chart):
        return []
    raise TypeError(f"unknown block {block!r}")


def render_markdown(report: Report) -> str:
    """The whole report.md text."""
    doc = document(report)
    parts = [f"# {doc.title}"]
    for section in doc.sections:
        body = [text for block in section.blocks for text in _block(block)]
        if not body:
            continue  # a charts-only section
        parts += [f"## {section.title}"] if section.title else []
        parts += body
    return "\n\n".join(parts) + "\n"
