"""Requests the load test cancelled at its own end are counted apart, not as server failures."""

from __future__ import annotations

import pandas as pd
import pytest

from locust_llm.metrics import RECORD_FIELDS, RequestRecord
from locust_llm.report.tables import stage_table
from locust_llm.rundir.layout import Stage


def _record(i: int, *, ok: bool, kind: str = "") -> RequestRecord:
    return RequestRecord(
        request_id=f"r{i}", endpoint="/v1/chat/completions", start_wall_s=100.0 + i * 0.1,
        ok=ok, error_kind=kind, e2e_s=1.0 if ok else float("nan"), ttft_s=0.1 if ok else
        float("nan"), tpot_s=0.01 if ok else float("nan"), output_tokens=10 if ok else 0,
    )  # fmt: skip


def test_cancelled_requests_are_not_failures() -> None:
    records = [_record(i, ok=True) for i in range(8)]
    records += [_record(8, ok=False, kind="http_5xx")]
    records += [_record(9, ok=False, kind="cancelled"), _record(10, ok=False, kind="cancelled")]
    frame = pd.DataFrame([r.to_dict() for r in records], columns=list(RECORD_FIELDS))
    stages = [Stage(index=0, name="c=4", start_wall_s=99.0, end_wall_s=110.0, concurrency=4)]
    row = stage_table(frame, None, stages).iloc[0]
    assert (row["requests"], row["completed"], row["failed"], row["cancelled"]) == (9, 8, 1, 2)
    assert row["error_rate"] == pytest.approx(1 / 9)
    assert row["error_rate_http_5xx"] == pytest.approx(1 / 9)
