"""Prometheus text exposition -> samples ``(name, labels, value)`` (pure, no I/O).

A cheap line pre-filter (:func:`select_lines`) keeps only the metric names the caller reads, so
prometheus_client's full parser sees a few lines of a page that is mostly histogram buckets. A
body that is not Prometheus text is an :class:`~locust_llm.errors.InputError` whose one line
says why and how the body starts.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from locust_llm.errors import InputError

Sample = tuple[str, Mapping[str, str], float]

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def _not_prometheus(text: str, why: object) -> InputError:
    first = text.strip().splitlines()[0][:80] if text.strip() else "(empty)"
    return InputError(f"not Prometheus text exposition ({why}); starts with {first!r}")


def select_lines(text: str, names: Collection[str]) -> str:
    """The sample lines of ``text`` whose metric name is in ``names`` (comments dropped).

    A line that does not start with a metric name is an InputError.
    """
    kept = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        match = _METRIC_NAME.match(line)
        end = match.end() if match else 0
        if match is None or (end < len(line) and line[end] not in "{ \t"):
            raise _not_prometheus(text, f"bad line {line[:40]!r}")
        if match.group() in names:
            kept.append(line)
    return "\n".join(kept) + "\n" if kept else ""


def parse_samples(text: str, names: Collection[str] | None = None) -> list[Sample]:
    """Samples ``(name, labels, value)`` of Prometheus text exposition ``text``, only those named
    in ``names`` when given; an unparsable text is an InputError."""
    from prometheus_client.parser import text_string_to_metric_families

    if names is not None:
        text = select_lines(text, names)
    try:
        return [
            (s.name, s.labels, s.value)
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise _not_prometheus(text, exc) from exc
