"""report.md: the document model (:mod:`locust_llm.report.document`) as GitHub markdown.

The seed's table first, then its reading, conclusion and caveats, the verdict with evidence and
actions, alerts, the detail tables, warnings and definitions. Charts are the HTML's; this file
formats the blocks and computes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from locust_llm.report.blocks import Block, Bullets, Chart, Paragraph, Table
from locust_llm.report.build import Report
from locust_llm.report.document import document

_TAG = re.compile(r"<(?=[A-Za-z/!?])")


def md_text(text: str) -> str:
    """Text as markdown shows it: a ``<`` that would open an HTML tag is escaped (a server's
    message quoted in the report may hold one); "<=" and "< 5" stay as they are."""
    return _TAG.sub("&lt;", text)


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table (a ``|`` inside a cell escaped)."""

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(md_text(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(headers), "|" + "---|" * len(headers), *(line(r) for r in rows)])


def _block(block: Block) -> list[str]:
    if isinstance(block, Paragraph):
        text = md_text(block.text)
        return [f"**{block.lead}:** {text}" if block.lead else text]
    if isinstance(block, Bullets):
        body = "\n".join(f"- {md_text(i)}" for i in block.items) if block.items else block.empty
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
