"""Where the run's telemetry came from: per scraped target, scrapes answered and signals given.

Read from telemetry.parquet's ``scrape_up`` rows (one per scrape: 1 answered, 0 failed) and the
signals each source gave a value for. The report lists every source with its signals, so a GPU
utilization in the tables can be traced to the server's ``/metrics`` or to a GPU exporter, and
warns about a target that never answered (an unreachable ``--gpu-metrics`` exporter), naming
the source the GPU figures came from instead. Worker CPU rows (no ``scrape_up``) are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from locust_llm.telemetry.signals import SCRAPE_UP


@dataclass(frozen=True)
class SourceSummary:
    """One scraped target: its URL, scrapes tried and answered, signals it gave values for."""

    source: str
    scrapes: int
    answered: int
    signals: tuple[str, ...]

    @property
    def gpu_signals(self) -> tuple[str, ...]:
        return tuple(s for s in self.signals if s.startswith(("gpu_", "mem_", "dram_", "power")))


def source_summaries(telemetry: Any) -> list[SourceSummary]:
    """One summary per scraped target, in URL order (none without telemetry)."""
    if telemetry is None or telemetry.empty:
        return []
    up = telemetry[telemetry["signal"] == SCRAPE_UP]
    given = telemetry[(telemetry["signal"] != SCRAPE_UP) & telemetry["value"].notna()]
    out = []
    for source, rows in up.groupby("source", sort=True):
        signals = given.loc[given["source"] == source, "signal"].unique()
        out.append(
            SourceSummary(
                source=str(source),
                scrapes=len(rows),
                answered=int((rows["value"] == 1).sum()),
                signals=tuple(sorted(str(s) for s in signals)),
            )
        )
    return out


def source_lines(summaries: list[SourceSummary]) -> list[str]:
    """One line per source: answered / tried and the signals it gave."""
    return [
        f"{s.source}: {s.answered} of {s.scrapes} scrapes answered; "
        + (f"gave {', '.join(s.signals)}" if s.signals else "gave no figures")
        for s in summaries
    ]


def source_warnings(telemetry: Any) -> list[str]:
    """A warning per target that never answered, naming where the GPU figures came from."""
    summaries = source_summaries(telemetry)
    out = []
    for dead in (s for s in summaries if s.answered == 0):
        others = [s.source for s in summaries if s.answered and s.gpu_signals]
        where = (
            f"the GPU figures in the tables come from {', '.join(others)} only"
            if others
            else "the report has no GPU figures"
        )
        out.append(
            f"telemetry target {dead.source} never answered ({dead.scrapes} scrapes failed): "
            f"no figure comes from it; {where}"
        )
    return out
