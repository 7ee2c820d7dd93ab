"""Number formatting for human-facing report text: one place that turns base units into strings.

Internal values are seconds and ratios; people read milliseconds and percentages. NaN (no data)
prints as ``n/a`` everywhere, never as 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeGuard

NO_DATA = "n/a"


def is_num(value: object) -> TypeGuard[int | float]:
    """True for a finite int/float (NaN, None and inf are 'no data')."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def column(row: Mapping[str, Any], key: str) -> float:
    """A numeric column of a stage row as a float; NaN when missing or not a finite number."""
    value = row.get(key, math.nan)
    return float(value) if is_num(value) else math.nan


def ms(seconds: object, digits: int = 0) -> str:
    """Seconds as milliseconds, e.g. ``0.1234 -> '123'``."""
    return f"{float(seconds) * 1e3:,.{digits}f}" if is_num(seconds) else NO_DATA


def pct(ratio: object, digits: int = 0) -> str:
    """A 0..1 ratio as a percentage, e.g. ``0.953 -> '95%'``."""
    return f"{float(ratio) * 100:.{digits}f}%" if is_num(ratio) else NO_DATA


def num(value: object, digits: int = 1) -> str:
    """A plain number with thousands separators; integers print without decimals."""
    if not is_num(value):
        return NO_DATA
    v = float(value)
    if v.is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"
    return f"{v:,.{digits}f}"


def ratio(value: object) -> str:
    """A multiplier, e.g. ``1.75 -> 'x1.75'``."""
    return f"x{float(value):.2f}" if is_num(value) else NO_DATA


def load_label(concurrency: object, rate: object) -> str:
    """How a stage's load prints: ``'50'`` users or ``'12.5/s'`` in open loop."""
    if is_num(concurrency):
        return num(concurrency)
    if is_num(rate):
        return f"{num(rate, 2)}/s"
    return NO_DATA
