"""Per-request records: from every user to the master's run dir, none lost, none duplicated.

On a worker, records wait in ``pending`` and go to the master in batches over Locust's own
messages (``llm_records``, at most ``--llm-record-batch-s`` apart, and at stop), so workers on
other hosts need no shared disk. Each batch also says how many requests the worker has sent and
recorded so far; if a worker dies, the master knows how many of its requests were in flight at
its last batch. In a single process the records go straight to the master side.

The master (or single process) keeps no records in memory: they wait at most a second in
``unflushed`` and are then appended to the run dir's journal (:mod:`locust_llm.rundir.journal`,
fsync'd), so a crash loses at most that second and memory stays flat however long the run.
What the run needs while it runs (records ended per stage, the models and endpoints seen, the
count, each stage's live QPS and TTFT: :mod:`locust_llm.live.stage_tally`) is kept as counters.
:meth:`Recorder.finalise` turns the journal into ``requests.parquet`` and writes ``run.json``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from operator import attrgetter
from pathlib import Path
from typing import Any

from locust_llm.client.messages import RecordBatch
from locust_llm.live.stage_tally import StageTallies
from locust_llm.metrics import COL_KIND, COL_STAGE, COL_TRACE_LINE, RECORD_FIELDS, RequestRecord
from locust_llm.rundir.journal import JOURNAL_FILE, RecordJournal, journal_to_parquet
from locust_llm.rundir.layout import REQUESTS_FILE, RunInfo, write_run_info
from locust_llm.workloads.arrivals import ArrivalCounts

logger = logging.getLogger(__name__)

_as_row = attrgetter(*RECORD_FIELDS)  # a record as a tuple in column order (40x astuple's speed)
#: record fields whose distinct values the master keeps (run.json's model and endpoint)
TRACKED_FIELDS: tuple[str, ...] = ("model", "endpoint")
_TRACKED = tuple((name, RECORD_FIELDS.index(name)) for name in TRACKED_FIELDS)


class Recorder:
    """Collects records on one process; ships them (worker) or keeps them (master / local)."""

    def __init__(self, *, is_worker: bool) -> None:
        self.is_worker = is_worker
        self.pending: list[tuple[Any, ...]] = []  # worker: not yet sent
        self.unflushed: list[tuple[Any, ...]] = []  # master/local: not yet in the journal
        self.journal: RecordJournal | None = None  # master/local: the run dir's journal
        self.count = 0  # master/local: records received in this run
        self._values: dict[str, set[Any]] = {name: set() for name in TRACKED_FIELDS}
        self.sent_total = 0  # worker: requests started on this process
        self.recorded_total = 0  # worker: records produced on this process
        self.reconnects = 0  # requests resent on a fresh connection (this process)
        self.backoffs = 0  # waits after a connection error (this process)
        self.backoff_s = 0.0  # seconds users spent in them
        self.backing_off = 0  # users in a back-off wait now (this process)
        self.backing_off_by_worker: dict[str, int] = {}  # master: as of each worker's last batch
        self.reconnects_by_worker: dict[str, int] = {}  # master: as of each worker's last batch
        self.backoffs_by_worker: dict[str, int] = {}
        #: master: each worker's open-loop arrival counts per stage, as of its last batch
        self.arrivals_by_worker: dict[str, dict[int, ArrivalCounts]] = {}
        # master: worker id -> (requests sent, records produced) as of its last batch
        self.worker_progress: dict[str, tuple[int, int]] = {}
        self.received_by_worker: dict[str, int] = {}
        self.received_by_worker_stage: Counter[tuple[str, int]] = Counter()
        # master: worker id -> the trace lines its records carried (trace replay only)
        self.trace_lines_by_worker: dict[str, set[int]] = {}
        # master/local: per stage, requests that ended (success or failure), not counting those
        # the load test cancelled itself
        self._ended_by_stage: Counter[int] = Counter()
        #: master/local: each stage's live QPS, tokens/s and TTFT P50, fed as records arrive
        self.stage_tallies = StageTallies()
        #: master/local: also told every record row it keeps (the capacity search's planner)
        self.row_sink: Callable[[tuple[Any, ...]], None] | None = None

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
    def take_batch(
        self, worker_id: str, arrivals: dict[int, ArrivalCounts] | None = None
    ) -> RecordBatch:
        """The next batch to send (and forget the records it carries), with this process's
        open-loop ``arrivals`` counts per stage so far."""
        batch, self.pending = self.pending, []
        return RecordBatch(
            worker=worker_id,
            records=batch,
            sent=self.sent_total,
            recorded=self.recorded_total,
            reconnects=self.reconnects,
            backoffs=self.backoffs,
            backing_off=self.backing_off,
            arrivals=[[stage, *c.to_list()] for stage, c in sorted((arrivals or {}).items())],
        )

    def receive_batch(self, batch: RecordBatch) -> None:
        """Master side of :meth:`take_batch`."""
        worker = batch.worker
        self._keep(batch.records)
        self.received_by_worker[worker] = self.received_by_worker.get(worker, 0) + len(
            batch.records
        )
        self.worker_progress[worker] = (batch.sent, batch.recorded)
        for row in batch.records:
            self.received_by_worker_stage[(worker, row[COL_STAGE])] += 1
            if row[COL_TRACE_LINE] >= 0:
                self.trace_lines_by_worker.setdefault(worker, set()).add(row[COL_TRACE_LINE])
        self.reconnects_by_worker[worker] = batch.reconnects
        self.backoffs_by_worker[worker] = batch.backoffs
        self.backing_off_by_worker[worker] = batch.backing_off
        if batch.arrivals:
            self.arrivals_by_worker[worker] = {
                row[0]: ArrivalCounts.from_list(row[1:]) for row in batch.arrivals
            }

    def arrivals_total(self, local: dict[int, ArrivalCounts]) -> dict[int, ArrivalCounts]:
        """Open-loop arrival counts per stage in the whole run: this process's ``local``
        counts plus every worker's last."""
        total: dict[int, ArrivalCounts] = {}
        for counts in (local, *self.arrivals_by_worker.values()):
            for stage, c in counts.items():
                total.setdefault(stage, ArrivalCounts(0, dict.fromkeys(c.unsent, 0))).add(c)
        return total

    @property
    def backoffs_total(self) -> int:
        """Back-off waits after connection errors in the whole run (here + every worker)."""
        return self.backoffs + sum(self.backoffs_by_worker.values())

    @property
    def backing_off_total(self) -> int:
        """Users waiting out a back-off now (here + every worker's last batch)."""
        return self.backing_off + sum(self.backing_off_by_worker.values())

    def forget_worker_waits(self, worker: str) -> None:
        """A lost worker's users wait no more (its back-off count leaves the live total)."""
        self.backing_off_by_worker.pop(worker, None)

    @property
    def reconnects_total(self) -> int:
        """Resends on a fresh connection in the whole run (this process + every worker)."""
        return self.reconnects + sum(self.reconnects_by_worker.values())

    def _keep(self, rows: list[tuple[Any, ...]]) -> None:
        self.unflushed.extend(rows)
        self.count += len(rows)
        for row in rows:
            if row[COL_KIND] != "cancelled":
                self._ended_by_stage[row[COL_STAGE]] += 1
            self.stage_tallies.add_row(row)
            if self.row_sink is not None:
                self.row_sink(row)
            for name, index in _TRACKED:
                self._values[name].add(row[index])

    # ---- counters ---------------------------------------------------------------------------
    def ended_in(self, stage: int) -> int:
        """Requests sent in ``stage`` that ended (the worker's own stage: no clock skew),
        cancelled ones left out: what ends a stage of ``--llm-stage-requests``."""
        return self._ended_by_stage[stage]

    def values_of(self, field_name: str) -> set[Any]:
        """The distinct values of one of :data:`TRACKED_FIELDS` in this run's records."""
        return set(self._values[field_name])

    def clear(self) -> None:
        """Forget this run's counters (a new run in the same process; call after finalise)."""
        self.close_journal()
        self.unflushed.clear()
        self.count = 0
        self._ended_by_stage.clear()
        self.stage_tallies.clear()
        self.trace_lines_by_worker.clear()
        self.arrivals_by_worker.clear()
        for values in self._values.values():
            values.clear()

    def lost_in_flight(self, worker: str) -> int:
        """Requests a worker had sent but not reported when its last batch left it."""
        sent, _recorded = self.worker_progress.get(worker, (0, 0))
        return max(sent - self.received_by_worker.get(worker, 0), 0)

    # ---- run dir ----------------------------------------------------------------------------
    def open_journal(self, run_dir: Path) -> None:
        """Master/local: start appending this run's records to ``run_dir``'s journal."""
        self.close_journal()
        self.journal = RecordJournal(run_dir / JOURNAL_FILE)

    def flush(self, run: Callable[..., Any] | None = None) -> int:
        """Append the records received since the last flush to the journal (fsync'd).

        ``run(append, rows)`` runs the write, e.g. in a thread so that an fsync on a busy disk
        does not stall the greenlets timing streams; by default it runs here."""
        if self.journal is None or self.journal.closed or not self.unflushed:
            return 0
        rows, self.unflushed = self.unflushed, []
        if run is None:
            self.journal.append(rows)
        else:
            run(self.journal.append, rows)
        return len(rows)

    def close_journal(self) -> None:
        if self.journal is not None:
            self.flush()
            self.journal.close()

    def finalise(self, run_dir: Path, info: RunInfo) -> None:
        """Write requests.parquet (from the journal) and run.json, each atomically."""
        run_dir.mkdir(parents=True, exist_ok=True)
        if self.journal is None:  # never opened (nothing was recorded through a run dir)
            self.open_journal(run_dir)
        assert self.journal is not None
        self.flush()
        path = run_dir / REQUESTS_FILE
        rows = journal_to_parquet(self.journal.path, path)
        write_run_info(run_dir, info)
        logger.info("locust-llm: wrote %d records to %s", rows, path)

    def write(self, run_dir: Path, info: RunInfo) -> None:
        """Everything received so far as requests.parquet + run.json, at once (for producers
        that are not a live run, such as the virtual-time run): finalise, then no journal."""
        self.finalise(run_dir, info)
        self.remove_journal()

    def remove_journal(self) -> None:
        """After the last finalise: the journal's records are all in requests.parquet."""
        if self.journal is not None:
            self.close_journal()
            self.journal.path.unlink(missing_ok=True)
            self.journal = None


def ensure_writable(run_dir: Path) -> None:
    """Create ``run_dir`` and prove it is writable; raises OSError otherwise."""
    run_dir.mkdir(parents=True, exist_ok=True)
    probe = run_dir / ".write-test"
    probe.write_text("ok")
    probe.unlink()
