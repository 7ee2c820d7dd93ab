"""Per-request records: from every user to the master's run dir, none lost, none duplicated.

On a worker, records wait in ``pending`` and go to the master in batches over Locust's own
messages (``llm_records``, at most ``--llm-record-batch-s`` apart, and at stop), so workers on
other hosts need no shared disk. Each batch also says how many requests the worker has sent and
recorded so far; if a worker dies, the master knows how many of its requests were in flight at
its last batch. In a single process the records go straight to the list the run dir is written
from. The master (or single process) writes ``requests.parquet`` and ``run.json``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from operator import attrgetter
from pathlib import Path
from typing import Any

from locust_llm.client.messages import RecordBatch
from locust_llm.metrics import RECORD_FIELDS, RequestRecord
from locust_llm.rundir import REQUESTS_FILE, RunInfo, write_run_info

logger = logging.getLogger(__name__)

_as_row = attrgetter(*RECORD_FIELDS)  # a record as a tuple in column order (40x astuple's speed)
_STAGE = RECORD_FIELDS.index("stage")
_KIND = RECORD_FIELDS.index("error_kind")


class Recorder:
    """Collects records on one process; ships them (worker) or keeps them (master / local)."""

    def __init__(self, *, is_worker: bool) -> None:
        self.is_worker = is_worker
        self.pending: list[tuple[Any, ...]] = []  # worker: not yet sent
        self.records: list[tuple[Any, ...]] = []  # master/local: everything received
        self.sent_total = 0  # worker: requests started on this process
        self.recorded_total = 0  # worker: records produced on this process
        self.reconnects = 0  # requests resent on a fresh connection (this process)
        self.reconnects_by_worker: dict[str, int] = {}  # master: as of each worker's last batch
        # master: worker id -> (requests sent, records produced) as of its last batch
        self.worker_progress: dict[str, tuple[int, int]] = {}
        self.received_by_worker: dict[str, int] = {}
        # master/local: per stage, requests that ended (success or failure), not counting those
        # the load test cancelled itself
        self._ended_by_stage: Counter[int] = Counter()

    # ---- producing --------------------------------------------------------------------------
    def request_started(self) -> None:
        self.sent_total += 1

    def add(self, record: RequestRecord) -> None:
        self.recorded_total += 1
        row = _as_row(record)
        if self.is_worker:
            self.pending.append(row)
        else:
            self._keep([row])

    @property
    def in_flight(self) -> int:
        return self.sent_total - self.recorded_total

    # ---- worker -> master -------------------------------------------------------------------
    def take_batch(self, worker_id: str) -> RecordBatch:
        """The next batch to send (and forget the records it carries)."""
        batch, self.pending = self.pending, []
        return RecordBatch(
            worker=worker_id,
            records=batch,
            sent=self.sent_total,
            recorded=self.recorded_total,
            reconnects=self.reconnects,
        )

    def receive_batch(self, batch: RecordBatch) -> None:
        """Master side of :meth:`take_batch`."""
        worker = batch.worker
        self._keep(batch.records)
        self.received_by_worker[worker] = self.received_by_worker.get(worker, 0) + len(
            batch.records
        )
        self.worker_progress[worker] = (batch.sent, batch.recorded)
        self.reconnects_by_worker[worker] = batch.reconnects

    @property
    def reconnects_total(self) -> int:
        """Resends on a fresh connection in the whole run (this process + every worker)."""
        return self.reconnects + sum(self.reconnects_by_worker.values())

    def _keep(self, rows: list[tuple[Any, ...]]) -> None:
        self.records.extend(rows)
        for row in rows:
            if row[_KIND] != "cancelled":
                self._ended_by_stage[row[_STAGE]] += 1

    # ---- counters ---------------------------------------------------------------------------
    def ended_in(self, stage: int) -> int:
        """Requests sent in ``stage`` that ended (the worker's own stage: no clock skew),
        cancelled ones left out: what ends a stage of ``--llm-stage-requests``."""
        return self._ended_by_stage[stage]

    def values_of(self, field_name: str) -> set[Any]:
        """The distinct values of one record field (``endpoint``, ``model``...)."""
        return set(_column(self.records, RECORD_FIELDS.index(field_name)))

    def clear(self) -> None:
        """Forget every record kept (a new run in the same process)."""
        self.records.clear()
        self._ended_by_stage.clear()

    def lost_in_flight(self, worker: str) -> int:
        """Requests a worker had sent but not reported when its last batch left it."""
        sent, _recorded = self.worker_progress.get(worker, (0, 0))
        return max(sent - self.received_by_worker.get(worker, 0), 0)

    # ---- run dir ----------------------------------------------------------------------------
    def frame(self) -> Any:
        """All records as a pandas DataFrame with the requests.parquet schema."""
        import pandas as pd

        frame = pd.DataFrame.from_records(self.records, columns=list(RECORD_FIELDS))
        for name in ("ok", "tokens_estimated", "input_tokens_estimated"):
            frame[name] = frame[name].astype(bool)
        return frame

    def write(self, run_dir: Path, info: RunInfo) -> None:
        """Write requests.parquet and run.json (atomically: temp file, then rename)."""
        run_dir.mkdir(parents=True, exist_ok=True)
        path = run_dir / REQUESTS_FILE
        tmp = path.with_suffix(".parquet.tmp")
        self.frame().to_parquet(tmp, index=False)
        tmp.replace(path)
        write_run_info(run_dir, info)
        logger.info("locust-llm: wrote %d records to %s", len(self.records), path)


def _column(rows: Iterable[tuple[Any, ...]], index: int) -> Iterable[Any]:
    return (row[index] for row in rows)


def ensure_writable(run_dir: Path) -> None:
    """Create ``run_dir`` and prove it is writable; raises OSError otherwise."""
    run_dir.mkdir(parents=True, exist_ok=True)
    probe = run_dir / ".write-test"
    probe.write_text("ok")
    probe.unlink()
