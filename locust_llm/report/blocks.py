"""The block kinds a report's document is made of: paragraphs, bullets, tables, chart slots.

:mod:`locust_llm.report.document` arranges them into sections; the workload sections
(:mod:`locust_llm.report.workloads`) build their own; every renderer walks them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Paragraph:
    """A paragraph; ``lead`` is a bold label before it ("Reading")."""

    text: str
    lead: str = ""


@dataclass(frozen=True)
class Bullets:
    """A bullet list; ``lead`` introduces it ("Evidence"); ``empty`` is shown when it has none."""

    items: tuple[str, ...]
    lead: str = ""
    empty: str = "none"
    css: str = ""  # an HTML class for the items ("alert")


@dataclass(frozen=True)
class Table:
    """A table of formatted cells; ``text_columns`` (indices) are left-aligned prose."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    text_columns: frozenset[int] = frozenset({0})


@dataclass(frozen=True)
class Chart:
    """A slot for the chart(s) the HTML draws from the report: ``key``, ``scaling``,
    ``telemetry`` or ``histograms`` (see :mod:`locust_llm.report.render_html`)."""

    name: str


Block = Paragraph | Bullets | Table | Chart


@dataclass(frozen=True)
class Section:
    """A titled part of the report; ``aside`` is a chart shown beside it (HTML only)."""

    key: str  # stable id (HTML anchor, tests)
    title: str
    blocks: tuple[Block, ...]
    aside: Chart | None = None


@dataclass(frozen=True)
class Document:
    """The whole report: a title and its sections, in reading order."""

    title: str
    sections: tuple[Section, ...] = field(default_factory=tuple)

    def section(self, key: str) -> Section:
        """The section with ``key`` (KeyError when the report has none)."""
        for s in self.sections:
            if s.key == key:
                return s
        raise KeyError(key)
