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
from operator import attrgetter
from pathlib import Path
from typing import Any

from locust_llm.metrics import RECORD_FIELDS, RequestRecord
from locust_llm.rundir import REQUESTS_FILE, RunInfo, write_run_info

logger = logging.getLogger(__name__)

MSG_RECORDS = "llm_records"
_as_row = attrgetter(*RECORD_FIELDS)  # a record as a tuple in column order (40x astuple's speed)


class Recorder:
    """Collects records on one process; ships them (worker) or keeps them (master / local)."""

    def __init__(self, *, is_worker: bool) -> None:
        self.is_worker = is_worker
        self.pending: list[tuple[Any, ...]] = []  # worker: not yet sent
        self.records: list[tuple[Any, ...]] = []  # master/local: everything received
        self.sent_total = 0  # worker: requests started on this process
        self.recorded_total = 0  # worker: records produced on this process
        # master: worker id -> (requests sent, records produced) as of its last batch
        self.worker_progress: dict[str, tuple[int, int]] = {}
        self.received_by_worker: dict[str, int] = {}

    # ---- producing --------------------------------------------------------------------------
    def request_started(self) -> None:
        self.sent_total += 1

    def add(self, record: RequestRecord) -> None:
        self.recorded_total += 1
        (self.pending if self.is_worker else self.records).append(_as_row(record))

    @property
    def in_flight(self) -> int:
        return self.sent_total - self.recorded_total

    # ---- worker -> master -------------------------------------------------------------------
    def take_batch(self, worker_id: str) -> dict[str, Any]:
        """The message body of the next batch (and forget the records it carries)."""
        batch, self.pending = self.pending, []
        return {
            "worker": worker_id,
            "records": batch,
            "sent": self.sent_total,
            "recorded": self.recorded_total,
        }

    def receive_batch(self, data: dict[str, Any]) -> None:
        """Master side of :meth:`take_batch`."""
        worker = str(data["worker"])
        records = data.get("records") or []
        self.records.extend(tuple(r) for r in records)
        self.received_by_worker[worker] = self.received_by_worker.get(worker, 0) + len(records)
        self.worker_progress[worker] = (int(data["sent"]), int(data["recorded"]))

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


def ensure_writable(run_dir: Path) -> None:
    """Create ``run_dir`` and prove it is writable; raises OSError otherwise."""
    run_dir.mkdir(parents=True, exist_ok=True)
    probe = run_dir / ".write-test"
    probe.write_text("ok")
    probe.unlink()
