"""The record journal: requests appended to disk as they arrive, readable after a crash.

The master (or single process) appends each second's records to ``requests.arrows``, an Arrow
IPC *stream* (a schema, then one record batch per flush), and fsyncs the file after every
batch. A process killed at any moment leaves at most one half-written batch at the end; the
reader keeps every whole batch before it, so a SIGKILL loses at most the last flush interval.
At the end of a run :func:`journal_to_parquet` turns the journal into ``requests.parquet``
(written to a temp file, then renamed: readers see the old file or the whole new one), batch by
batch, so neither writing nor finalising holds the run's records in memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pyarrow as pa

from locust_llm.metrics import RequestRecord

JOURNAL_FILE = "requests.arrows"

_ARROW_TYPES = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_()}

#: requests.parquet / journal schema: one column per RequestRecord field, in order.
RECORD_SCHEMA = pa.schema(
    [pa.field(f.name, _ARROW_TYPES.get(str(f.type), pa.string())) for f in fields(RequestRecord)]
)

#: journal batches are lz4-compressed (a day at 100 req/s stays a few hundred MB on disk)
_COMPRESSION = "lz4" if pa.Codec.is_available("lz4") else None

#: rows per parquet row group when finalising (small flush batches are coalesced)
_ROW_GROUP_ROWS = 65_536


def rows_to_batch(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    """Record rows (tuples in RECORD_SCHEMA order) as one Arrow record batch."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(RECORD_SCHEMA)
    pairs = zip(columns, RECORD_SCHEMA, strict=True)
    arrays = [pa.array(column, type=field.type) for column, field in pairs]
    return pa.RecordBatch.from_arrays(arrays, schema=RECORD_SCHEMA)


class RecordJournal:
    """An append-only, fsync'd Arrow IPC stream of records (one process writes it)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "wb")  # noqa: SIM115 - closed by close()
        options = pa.ipc.IpcWriteOptions(compression=_COMPRESSION)
        self._writer = pa.ipc.new_stream(self._file, RECORD_SCHEMA, options=options)
        self.rows_written = 0
        self._sync()
        # pyarrow's first conversion from Python imports pandas (~0.2 s of CPU on this class
        # of host): taken here, as the run opens, not in the first flush under load
        rows_to_batch([])

    def append(self, rows: list[tuple[Any, ...]]) -> None:
        """Write ``rows`` as one batch and make it durable (flush + fsync)."""
        if not rows:
            return
        self._writer.write_batch(rows_to_batch(rows))
        self.rows_written += len(rows)
        self._sync()

    def _sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    @property
    def closed(self) -> bool:
        return self._file.closed

    def close(self) -> None:
        if not self._file.closed:
            self._writer.close()
            self._sync()
            self._file.close()


def iter_journal(path: Path, outcome: dict[str, bool] | None = None) -> Iterator[pa.RecordBatch]:
    """Every whole batch of a journal, one at a time; ``outcome["clean"]`` says afterwards
    whether it ended cleanly (False: cut short by a crash, or still being written)."""
    clean = False
    try:
        with pa.OSFile(str(path), "rb") as source:
            reader = pa.ipc.open_stream(source)
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    clean = True
                    break
                yield batch
    except (pa.ArrowInvalid, OSError, EOFError):
        clean = False
    if outcome is not None:
        outcome["clean"] = clean


def read_journal(path: Path) -> tuple[pa.Table, bool]:
    """A journal as one table (every whole batch) and whether it ended cleanly."""
    outcome: dict[str, bool] = {}
    batches = list(iter_journal(path, outcome))
    return pa.Table.from_batches(batches, schema=RECORD_SCHEMA), outcome.get("clean", False)


def journal_to_parquet(journal: Path, parquet: Path) -> int:
    """Write the journal's records to ``parquet`` (temp file + rename); returns the row count."""
    import pyarrow.parquet as pq

    tmp = parquet.with_suffix(".parquet.tmp")
    rows = 0
    with pq.ParquetWriter(str(tmp), RECORD_SCHEMA) as writer:
        group: list[pa.RecordBatch] = []
        size = 0
        for batch in iter_journal(journal):
            group.append(batch)
            size += batch.num_rows
            if size >= _ROW_GROUP_ROWS:
                writer.write_table(pa.Table.from_batches(group, schema=RECORD_SCHEMA))
                rows += size
                group, size = [], 0
        if group or not rows:
            writer.write_table(pa.Table.from_batches(group, schema=RECORD_SCHEMA))
            rows += size
    tmp.replace(parquet)
    return rows
