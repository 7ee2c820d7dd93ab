"""Read a run dir into memory: run.json, requests.parquet, telemetry.parquet -> RunData.

The only part of the report that touches files. A missing or unreadable file, or one without
the columns the report needs, is an InputError whose one-line message names the file. A run
without telemetry.parquet loads with an empty telemetry frame (resource columns become "no
data") and a warning; ``prometheus=URL`` instead asks
``locust_llm.telemetry.promapi.read_prometheus``
for the run's window. An unfinished run (killed, or still running) is read from its record
journal (``requests.arrows``) and says so in its first warning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from locust_llm.errors import InputError
from locust_llm.report.diagnosis.client_delay import REQUEST_COLUMNS as CLIENT_DELAY_COLUMNS
from locust_llm.report.tables import REQUEST_ARRAYS
from locust_llm.rundir.journal import JOURNAL_FILE, read_journal
from locust_llm.rundir.layout import (
    REQUESTS_FILE,
    TELEMETRY_COLUMNS,
    TELEMETRY_FILE,
    RunInfo,
    read_run_info,
)
from locust_llm.telemetry.promapi import read_prometheus

#: requests.parquet columns the report reads when they are there (the failures' messages)
MESSAGE_COLUMNS: tuple[str, ...] = ("error_message",)

#: requests.parquet columns the report cannot do without
REQUIRED_REQUEST_COLUMNS: tuple[str, ...] = (
    "ok",
    "error_kind",
    "start_wall_s",
    "e2e_s",
    "ttft_s",
    "tpot_s",
    "output_tokens",
)


@dataclass
class RunData:
    """A run dir in memory."""

    path: Path
    info: RunInfo
    requests: pd.DataFrame
    telemetry: pd.DataFrame
    warnings: list[str] = field(default_factory=list)


def _read_parquet(path: Path, required: tuple[str, ...], wanted: tuple[str, ...]) -> pd.DataFrame:
    import pyarrow.parquet as pq

    try:
        names = set(pq.read_schema(path).names)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise InputError(f"{path}: corrupt or not a parquet file ({type(exc).__name__})") from None
    missing = [c for c in required if c not in names]
    if missing:
        raise InputError(f"{path}: missing column {missing[0]!r} (needs {', '.join(required)})")
    try:
        return pd.read_parquet(path, columns=[c for c in wanted if c in names])
    except Exception as exc:
        raise InputError(
            f"{path}: cannot read ({type(exc).__name__}: {exc})".splitlines()[0]
        ) from None


def read_requests(run_dir: Path) -> pd.DataFrame:
    """requests.parquet, the columns the report uses."""
    path = Path(run_dir) / REQUESTS_FILE
    if not path.is_file():
        raise InputError(f"{path}: missing (the run wrote no request records)")
    wanted = REQUEST_ARRAYS + CLIENT_DELAY_COLUMNS + MESSAGE_COLUMNS
    return _read_parquet(path, REQUIRED_REQUEST_COLUMNS, wanted)


def read_journal_requests(run_dir: Path) -> pd.DataFrame:
    """The records of an unfinished run: every whole batch of its requests.arrows journal."""
    table, _clean = read_journal(Path(run_dir) / JOURNAL_FILE)
    wanted = (*REQUEST_ARRAYS, *CLIENT_DELAY_COLUMNS, *MESSAGE_COLUMNS)
    return table.select([c for c in wanted if c in table.column_names]).to_pandas()


def is_partial(run_dir: Path, info: RunInfo) -> bool:
    """The run did not finish: run.json says 'running' (it crashed or is still going) or only
    its journal holds the records."""
    journal = Path(run_dir) / JOURNAL_FILE
    finished = (Path(run_dir) / REQUESTS_FILE).is_file() and info.state != "running"
    return journal.is_file() and not finished


def read_telemetry(run_dir: Path) -> pd.DataFrame | None:
    """telemetry.parquet, or None when the run has none."""
    path = Path(run_dir) / TELEMETRY_FILE
    if not path.exists():
        return None
    return _read_parquet(path, TELEMETRY_COLUMNS, TELEMETRY_COLUMNS)


def empty_telemetry() -> pd.DataFrame:
    """A telemetry frame with the contract's columns and no rows."""
    return pd.DataFrame(
        {
            c: pd.Series(dtype=float if c in ("time_s", "value") else object)
            for c in TELEMETRY_COLUMNS
        }
    )


def prometheus_telemetry(url: str, info: RunInfo, step_s: float = 1.0) -> pd.DataFrame:
    """Telemetry for the run's window from a Prometheus server
    (``locust_llm.telemetry.promapi``)."""

    starts = [s.start_wall_s for s in info.stages] or [info.start_wall_s]
    ends = [e for e in [*(s.end_wall_s for s in info.stages), info.end_wall_s] if not math.isnan(e)]
    start, end = min(starts), max(ends, default=math.nan)
    if math.isnan(start) or math.isnan(end):
        raise InputError(f"--prometheus {url}: run.json has no start/end time to query")
    frame = read_prometheus(url, start, end, step_s)
    missing = [c for c in TELEMETRY_COLUMNS if c not in frame]
    if missing:
        raise InputError(f"--prometheus {url}: the answer lacks column {missing[0]!r}")
    return frame


def load_run(
    run_dir: Path | str, *, prometheus: str | None = None, prometheus_step_s: float = 1.0
) -> RunData:
    """Load a run dir; raises InputError naming the first bad file."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: not a directory (expected a locust-llm run dir)")
    info = read_run_info(run_dir)
    warnings = list(info.warnings)
    if is_partial(run_dir, info):
        requests = read_journal_requests(run_dir)
        warnings.insert(
            0,
            f"partial run: it did not finish (killed, or still running); {len(requests)} "
            f"records read from {JOURNAL_FILE}",
        )
        if math.isnan(info.end_wall_s) and len(requests):
            info.end_wall_s = float(requests["start_wall_s"].max() + requests["e2e_s"].max())
    else:
        requests = read_requests(run_dir)
    if prometheus:
        telemetry = prometheus_telemetry(prometheus, info, prometheus_step_s)
    else:
        telemetry = read_telemetry(run_dir)
        if telemetry is None:
            warnings.append(f"no {TELEMETRY_FILE}: GPU and server columns are 'no data'")
            telemetry = empty_telemetry()
    for worker, in_flight in sorted(info.lost_workers.items()):
        warnings.append(f"worker {worker} was lost: {in_flight} requests it sent have no record")
    if not info.stages:
        warnings.append("run.json has no stages: the whole run is one stage")
    return RunData(run_dir, info, requests, telemetry, warnings)
