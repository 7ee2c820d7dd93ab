"""Live figures of each stage from the records the master receives: QPS, output tokens/s, TTFT P50.

The master (or single process) sees every record once, within a second of its end (the
workers' record batches, :mod:`locust_llm.client.recorder`). :class:`StageTallies` folds each one
into
its stage's :class:`StageTally` as it arrives, so a poll of ``/llm/stats`` never re-scans the
records: per stage it keeps the completed and failed counts, a TTFT histogram
(:class:`~locust_llm.live.histogram.LatencyHistogram`, within 0.8 % of the exact median) and, per
tick of ``1 / TICKS_PER_S`` s by end time, the completions, their output tokens and (open loop)
how late they were sent, pruned to the last :data:`KEEP_S` (memory stays flat however long the
stage).

Definitions (pure; tests recompute them from the records):

- a record belongs to the stage it was sent in (``RequestRecord.stage``); *completed* = ``ok``,
  *failed* = not ok and not the load test's own doing (``cancelled``, ``client_error``);
- its end = ``start_wall_s + e2e_s`` (the start when there is no E2E);
- the *window* ends at ``upto`` = the earlier of "now" (the caller subtracts the seconds records
  may still be on their way) and the stage's end, and starts :data:`WINDOW_S` before that or at
  the stage's start, whichever is later; both edges are rounded down to a tick;
- QPS = completions whose end falls in the window / its length; output tokens/s likewise with
  their output tokens; TTFT P50 = the median TTFT of all the stage's completions so far (the
  stage's own, not the run's);
- open loop: *dispatch delay* = the mean of ``start_wall_s - scheduled_wall_s`` over the
  completions in the window: how far behind its schedule the load generator sent them (a user
  pool that keeps up sends within milliseconds; one that ran dry sends later and later, long
  before the stage's end says how many arrivals it never sent).

A stage that has ended gets its rates computed once, when "now" has passed its end, and kept
(:meth:`StageTallies.figures`); its ticks are then dropped. Its counts and TTFT P50 go on
counting the completions that end after it (an open-loop stage's tail).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from locust_llm.live.histogram import LatencyHistogram
from locust_llm.metrics import (
    CLIENT_SIDE_KINDS,
    COL_E2E,
    COL_KIND,
    COL_OK,
    COL_OUT,
    COL_SCHEDULED,
    COL_STAGE,
    COL_START,
    COL_TTFT,
)

#: Seconds of completions the QPS and tokens/s are taken over (Locust's charts' window).
WINDOW_S = 10.0
#: Ticks per second of the completions' end times (the window's resolution).
TICKS_PER_S = 10
#: Seconds of ticks a stage keeps behind its newest completion.
KEEP_S = 30.0
_KEEP_TICKS = int(KEEP_S * TICKS_PER_S)


def tick_of(time_s: float) -> int:
    """The tick a wall time falls in (ticks of ``1 / TICKS_PER_S`` s, rounded down)."""
    return math.floor(time_s * TICKS_PER_S)


def end_of(start_wall_s: float, e2e_s: float) -> float:
    """A record's end time: its start plus its E2E (the start alone when there is none)."""
    return start_wall_s + e2e_s if math.isfinite(e2e_s) else start_wall_s


def window_ticks(start_s: float, end_s: float, now_s: float) -> tuple[int, int]:
    """The window's ticks ``[lo, hi)`` for a stage from ``start_s`` to ``end_s`` (NaN: still
    running) at ``now_s``; ``hi <= lo`` when it holds no whole tick yet."""
    upto = now_s if math.isnan(end_s) else min(now_s, end_s)
    since = upto - WINDOW_S if math.isnan(start_s) else max(start_s, upto - WINDOW_S)
    return tick_of(since), tick_of(upto)


@dataclass(frozen=True, slots=True)
class StageFigures:
    """One stage's live figures (NaN: not known yet)."""

    completed: int = 0
    failed: int = 0
    qps: float = math.nan
    output_tokens_per_s: float = math.nan
    ttft_p50_s: float = math.nan
    window_s: float = math.nan  # the window the rates are over (seconds)
    dispatch_delay_s: float = math.nan  # open loop: mean lateness of the window's sends

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: NaN -> None."""
        out: dict[str, Any] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            out[name] = None if isinstance(value, float) and not math.isfinite(value) else value
        return out


class StageTally:
    """Counts, a TTFT histogram and completions per end tick of one stage."""

    __slots__ = ("completed", "failed", "newest_tick", "ticks", "ttft")

    def __init__(self) -> None:
        self.completed = 0
        self.failed = 0
        self.ttft = LatencyHistogram()
        #: end tick -> [completions, their output tokens, those with a schedule (open loop),
        #: the sum of their dispatch delays (s)]
        self.ticks: dict[int, list[float]] = {}
        self.newest_tick = -1

    def add(
        self,
        *,
        end_s: float,
        ok: bool,
        ttft_s: float,
        output_tokens: int,
        dispatch_delay_s: float = math.nan,
        timed: bool = True,
    ) -> None:
        """Count one record that is not the load test's own doing (``timed``: and its end in
        the ticks; not once the stage's rates are final)."""
        if not ok:
            self.failed += 1
            return
        self.completed += 1
        self.ttft.add(ttft_s)
        if not (timed and math.isfinite(end_s)):  # a record with no time: counted, not placed
            return
        tick = tick_of(end_s)
        slot = self.ticks.get(tick)
        if slot is None:
            slot = self.ticks[tick] = [0, 0, 0, 0.0]
            self.newest_tick = max(self.newest_tick, tick)
            if len(self.ticks) > 2 * _KEEP_TICKS:
                self._prune()
        slot[0] += 1
        slot[1] += output_tokens
        if dispatch_delay_s == dispatch_delay_s:  # not NaN: it had a schedule
            slot[2] += 1
            slot[3] += dispatch_delay_s

    def _prune(self) -> None:
        oldest = self.newest_tick - _KEEP_TICKS
        self.ticks = {t: v for t, v in self.ticks.items() if t >= oldest}

    def figures(self, lo: int, hi: int) -> StageFigures:
        """The figures over the window of ticks ``[lo, hi)``."""
        qps = tps = window = delay = math.nan
        if hi > lo:
            window = (hi - lo) / TICKS_PER_S
            if hi - lo < len(self.ticks):
                spans = (self.ticks.get(t) for t in range(lo, hi))
                slots = [s for s in spans if s is not None]
            else:
                slots = [s for t, s in self.ticks.items() if lo <= t < hi]
            done = tokens = scheduled = late_s = 0.0
            for n, out, with_schedule, late in slots:
                done += n
                tokens += out
                scheduled += with_schedule
                late_s += late
            qps, tps = done / window, tokens / window
            delay = late_s / scheduled if scheduled else math.nan
        return StageFigures(
            completed=self.completed,
            failed=self.failed,
            qps=qps,
            output_tokens_per_s=tps,
            ttft_p50_s=self.ttft.quantile(0.5),
            window_s=window,
            dispatch_delay_s=delay,
        )


class StageTallies:
    """Every stage's :class:`StageTally`, fed one record row at a time (in ``RECORD_FIELDS``
    order, as the recorder keeps them)."""

    def __init__(self) -> None:
        self.stages: dict[int, StageTally] = {}
        #: stages that have ended: their window's figures as they were at their end
        self._final: dict[int, StageFigures] = {}

    def add_row(self, row: tuple[Any, ...]) -> None:
        """Fold one record into its stage (cancelled and client errors are left out)."""
        if row[COL_KIND] in CLIENT_SIDE_KINDS:
            return
        stage = row[COL_STAGE]
        tally = self.stages.get(stage)
        if tally is None:
            tally = self.stages[stage] = StageTally()
        tally.add(
            end_s=end_of(row[COL_START], row[COL_E2E]),
            ok=bool(row[COL_OK]),
            ttft_s=row[COL_TTFT],
            output_tokens=row[COL_OUT],
            dispatch_delay_s=row[COL_START] - row[COL_SCHEDULED],
            timed=stage not in self._final,
        )

    def figures(self, stage: int, start_s: float, end_s: float, now_s: float) -> StageFigures:
        """``stage``'s figures at ``now_s`` (records that ended after it may still be on their
        way: pass "now" less that delay); the stage ran from ``start_s`` to ``end_s`` (NaN: it
        still runs). Once ``now_s`` has passed a stage's end, its rates are kept as they are
        then and its ticks dropped."""
        tally = self.stages.get(stage) or StageTally()
        final = self._final.get(stage)
        if final is not None:
            now = tally.figures(0, 0)
            return replace(final, completed=now.completed, failed=now.failed,
                           ttft_p50_s=now.ttft_p50_s)  # fmt: skip
        out = tally.figures(*window_ticks(start_s, end_s, now_s))
        if math.isfinite(end_s) and now_s >= end_s and stage in self.stages:
            self._final[stage] = out
            tally.ticks.clear()
        return out

    def clear(self) -> None:
        """Forget every stage (a new run in the same process)."""
        self.stages.clear()
        self._final.clear()
