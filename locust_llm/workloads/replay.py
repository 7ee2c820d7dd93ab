"""A trace ready to replay and one process's claim on its lines (pure: no Locust).

:class:`Replay` is a trace's lines inside its window with the speed-up; :func:`load_replay`
reads the one a ``TraceReplayUser`` class describes (once per process). :class:`TraceBook` hands
this process's lines (its partition, plus the lines it adopted from a lost worker) to its users
in time order. The user class is :class:`locust_llm.client.workload_users.TraceReplayUser`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from locust_llm.workloads import partition as parts
from locust_llm.workloads.traces import TraceLine, read_trace, window


@dataclass(frozen=True, slots=True)
class Replay:
    """A trace ready to replay: its lines (windowed) and how fast."""

    lines: list[TraceLine]
    speedup: float
    block_tokens: int

    @property
    def span_s(self) -> float:
        """Wall-clock seconds from the first line's send to the last's."""
        return (self.lines[-1].time_s / self.speedup) if self.lines else 0.0

    def peak_rate_per_s(self) -> float:
        """Most lines sent in any one wall-clock second."""
        best, lo = 0, 0
        times = [x.time_s / self.speedup for x in self.lines]
        for hi, t in enumerate(times):
            while times[lo] <= t - 1.0:
                lo += 1
            best = max(best, hi - lo + 1)
        return float(best)


_replays: dict[tuple[str, float, float, float, int], Replay] = {}


def load_replay(user_class: Any) -> Replay:
    """The replay a ``TraceReplayUser`` class describes (read once per process)."""
    speedup = float(user_class.speedup)
    if not speedup > 0:
        raise ValueError(f"{user_class.__name__}.speedup must be > 0, got {speedup!r}")
    start_s, end_s = user_class.trace_window_s
    key = (str(user_class.trace), speedup, float(start_s), float(end_s), user_class.block_tokens)
    replay = _replays.get(key)
    if replay is None:
        lines = window(read_trace(key[0]), key[2], key[3])
        replay = _replays[key] = Replay(lines, speedup, user_class.block_tokens)
    return replay


class TraceBook:
    """This process's lines of a replay (its partition and the lines it adopted from a lost
    worker), claimed in time order by its users."""

    def __init__(self, replay: Replay) -> None:
        self.replay = replay
        self.owned: list[TraceLine] | None = None
        self.claimed = 0
        self.adopted_seen = 0  # how many of the partition's adopted numbers are in ``owned``

    def _refresh(self, part: parts.Partition) -> list[TraceLine]:
        if self.owned is None:
            self.owned = [x for x in self.replay.lines if part.owns(x.index)]
        if len(part.adopted) > self.adopted_seen:  # lines a lost worker left: in time order
            new = set(part.adopted[self.adopted_seen :])
            self.adopted_seen = len(part.adopted)
            added = [x for x in self.replay.lines if x.index in new]
            rest = sorted([*self.owned[self.claimed :], *added], key=lambda x: x.time_s)
            self.owned[self.claimed :] = rest
        return self.owned

    def claim(self, part: parts.Partition) -> TraceLine | None:
        owned = self._refresh(part)
        if self.claimed >= len(owned):
            return None
        line = owned[self.claimed]
        self.claimed += 1
        return line

    def unclaimed(self, part: parts.Partition) -> list[TraceLine]:
        """Lines not claimed yet (all of this partition's before the first claim); claims them."""
        owned = self._refresh(part)
        rest = owned[self.claimed :]
        self.claimed += len(rest)
        return rest
