"""Each stage's and the run's error kinds with their most frequent message, from the records.

The grouping is :mod:`locust_llm.error_messages`' (numbers and ids folded, cut to 160
characters); this module only picks the records: those the stage table counts (a stage's
window, warm-up left out: ``build.Report.stage_ix``), ``cancelled`` ones left out. A kind's
share is its count over those records, so a failure kind's share is its error rate in the
stage table (client errors, counted apart there, are in the denominator here).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import pandas as pd

from locust_llm.error_messages import KindMessages, MessageTally


def _column(requests: pd.DataFrame, name: str) -> np.ndarray:
    if name not in requests:
        return np.full(len(requests), "", dtype=object)
    return requests[name].fillna("").astype(str).to_numpy(object)


def error_messages(
    requests: pd.DataFrame, stage_ix: np.ndarray, stages: Sequence[int]
) -> tuple[list[KindMessages], list[list[KindMessages]]]:
    """(the run's kinds, each stage's kinds in ``stages``' order) with their most frequent
    message; ``stage_ix``: each record's stage (-1: outside every window or in a warm-up)."""
    kinds, messages = _column(requests, "error_kind"), _column(requests, "error_message")
    counted = kinds != "cancelled"
    run, per_stage = MessageTally(), []
    for index in stages:
        pick = np.flatnonzero((stage_ix == index) & counted)
        failed = pick[kinds[pick] != ""]
        tally = MessageTally()  # each distinct (kind, message) read once, with its count
        said = Counter(zip(kinds[failed], messages[failed], strict=True))
        for (kind, message), n in said.items():
            tally.add(kind, message, n)
        per_stage.append(tally.summary(len(pick)))
        run.merge(tally)
    total = int(((stage_ix >= 0) & counted).sum())
    return run.summary(total), per_stage
