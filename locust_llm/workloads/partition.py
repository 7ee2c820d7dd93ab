"""Which share of a numbered workload a process takes: worker ``index`` of ``count`` (pure).

Sessions and trace lines are numbered; process ``index`` of ``count`` takes the numbers ``n``
with ``n % count == index``, so every one is run by exactly one worker. One process alone is
``0 of 1``; a worker that joins a running test has an empty share (``count`` 0). How the master
decides and sends the shares, and hands a lost worker's share over, is Locust's part:
:mod:`locust_llm.client.shares`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

UNKNOWN = -1  # a worker's count until the master answers


@dataclass(slots=True)
class Partition:
    """This process's share; ``origin_wall_s`` = a trace's time 0 (nan until a replay starts)."""

    index: int = 0
    count: int = 1
    origin_wall_s: float = math.nan
    #: numbers a lost worker's share left to this process (its own share is ``index of count``)
    adopted: list[int] = field(default_factory=list)

    @property
    def known(self) -> bool:
        return self.count != UNKNOWN

    @property
    def empty(self) -> bool:
        """A worker that joined after the partition was made: it has no share."""
        return self.count <= 0

    def owns(self, number: int) -> bool:
        """``number`` is in this process's own share (adopted numbers aside)."""
        return not self.empty and number % self.count == self.index
