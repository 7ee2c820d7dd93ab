"""The run directory: the contract between what the load test writes and the report reads.

A run dir holds, per run::

    run.json            RunInfo: command line (no secrets), versions, host, model, wall-clock start
                        and end, workers seen, stage windows, warnings
    requests.parquet    one row per request sent, columns = metrics.RECORD_FIELDS
    requests.arrows     while running (or after a crash): the same records as an fsync'd Arrow
                        IPC stream journal (locust_llm.rundir.journal); gone once the run finishes
    telemetry.parquet   long format, one row per sample: columns = TELEMETRY_COLUMNS
    llm_stats.csv       final live-histogram summary (written by llmstats, for humans)

Pure helpers only (json, dataclasses); pandas is imported lazily by the loaders that need it.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from locust_llm.errors import InputError

RUN_JSON = "run.json"
REQUESTS_FILE = "requests.parquet"
TELEMETRY_FILE = "telemetry.parquet"

#: telemetry.parquet columns: wall-clock time, scrape target URL, canonical signal name,
#: GPU index ("" for non-GPU signals), value (nan = scrape failed / no data: a gap).
TELEMETRY_COLUMNS: tuple[str, ...] = ("time_s", "source", "signal", "gpu", "value")

#: The ``signal`` column holds canonical telemetry signals, defined once in
#: :mod:`locust_llm.telemetry.signals` (``signal_docs()``: name -> "meaning (unit)").


@dataclass(slots=True)
class Stage:
    """One stage window of a run (closed loop: ``concurrency``; open loop: ``rate`` req/s)."""

    index: int
    name: str
    start_wall_s: float
    end_wall_s: float = math.nan
    concurrency: int | None = None
    rate: float | None = None
    warmup_s: float = 0.0  # requests started before start + warmup_s are excluded from tables
    target_requests: int | None = None  # --llm-stage-requests
    kind: str = "step"  # step | soak | baseline
    #: the fewest users running at once once the stage had spawned (sampled each second; a
    #: lost worker's users show here until they are re-dispatched); None: not sampled
    users_min: int | None = None
    #: open loop: arrivals the schedule drew in the stage (all processes), None: not counted;
    #: each was sent (a record) or is in ``arrivals_unsent`` by reason (pool_ran_dry: every
    #: user busy until the stage ended; stage_ended: due after the stage's end; run_stopped)
    arrivals_drawn: int | None = None
    arrivals_unsent: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class RunInfo:
    """Contents of run.json."""

    run_id: str
    command: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    host: str = ""
    hosts: list[str] = field(default_factory=list)
    model: str = ""
    endpoint: str = ""
    start_wall_s: float = math.nan
    end_wall_s: float = math.nan
    workers: list[str] = field(default_factory=list)
    stages: list[Stage] = field(default_factory=list)
    mode: str = "closed"  # closed | open
    warnings: list[str] = field(default_factory=list)
    lost_workers: dict[str, int] = field(default_factory=dict)  # worker id -> requests in flight
    roofline: dict[str, Any] = field(default_factory=dict)  # {"model": preset/path, "gpu": ...}
    server_instances: int = 1
    #: "running" while the load test runs (run.json refreshed every second, records in the
    #: requests.arrows journal), then "finished", "interrupted" or "failed" once the run ended
    #: (locust_llm.rundir.states); "" in run dirs written before the journal existed
    state: str = ""
    #: why a run ended interrupted or failed: the signal or failure, the stage cut and how far
    #: (locust_llm.rundir.states); "" when finished
    state_reason: str = ""
    #: every stage of the plan by name, in order (the report names those that never ran)
    stages_planned: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True, default=str, allow_nan=True)


#: what a finished run and its report leave in a run dir (``--llm-overwrite`` removes these)
RUN_FILES: tuple[str, ...] = (
    RUN_JSON,
    REQUESTS_FILE,
    "requests.arrows",
    TELEMETRY_FILE,
    "llm_stats.csv",
    "llm_stats_history.csv",
    "report.md",
    "report.html",
    "stages.csv",
    "summary.json",
)
#: any of these means the dir already holds a run
_RUN_MARKERS = (RUN_JSON, REQUESTS_FILE, "requests.arrows")


def claim_run_dir(run_dir: Path, *, overwrite: bool) -> None:
    """Make ``run_dir`` ready for a new run: refuse one holding an earlier run (InputError)
    unless ``overwrite``, which removes the earlier run's and report's files so none is stale."""
    held = [name for name in _RUN_MARKERS if (run_dir / name).exists()]
    if held and not overwrite:
        raise InputError(
            f"run dir {run_dir} already holds a run ({held[0]}); give another --llm-run-dir "
            "or --llm-overwrite to replace it"
        )
    for name in RUN_FILES if held else ():
        (run_dir / name).unlink(missing_ok=True)


def write_run_info(run_dir: Path, info: RunInfo) -> Path:
    """Write run.json atomically (write a temp file, then rename)."""
    return write_run_json(run_dir, info.to_json())


def write_run_json(run_dir: Path, text: str) -> Path:
    """Write ``text`` (a RunInfo's JSON) as run.json atomically: a thread may do this while
    the RunInfo itself changes."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / RUN_JSON
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def report_command(run_dir: Path) -> str:
    """The command line that turns ``run_dir`` into its report (``locust-llm report DIR``,
    the path quoted for a shell); ``""`` while the dir holds no run.json to report on."""
    if not (Path(run_dir) / RUN_JSON).is_file():
        return ""
    return f"locust-llm report {shlex.quote(str(run_dir))}"


def read_run_info(run_dir: Path) -> RunInfo:
    """Read run.json; a missing or corrupt file is an InputError naming it."""
    path = Path(run_dir) / RUN_JSON
    if not path.is_file():
        raise InputError(f"{path}: missing (is {run_dir} a locust-llm run dir?)")
    try:
        raw = json.loads(path.read_text())
        if not isinstance(raw, dict):
            raise TypeError(f"top level is a {type(raw).__name__}, expected an object")
        stages_raw = raw.pop("stages", [])
        if not isinstance(stages_raw, list):
            raise TypeError(f'"stages" is a {type(stages_raw).__name__}, expected a list')
        stages = [Stage(**_typed(s, Stage, f"stages[{i}]")) for i, s in enumerate(stages_raw)]
        info = RunInfo(**_typed(raw, RunInfo, ""))
    except (json.JSONDecodeError, TypeError, ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: corrupt run.json ({exc})") from None
    info.stages = stages
    return info


#: JSON types each annotation accepts (a number may be an int; NaN is a float)
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "float": (int, float),
    "int": (int,),
    "bool": (bool,),
    "int | None": (int, type(None)),
    "float | None": (int, float, type(None)),
}


def _typed(raw: Any, cls: Any, where: str) -> dict[str, Any]:
    """``raw``'s known fields of dataclass ``cls``, each checked against its annotation."""
    if not isinstance(raw, dict):
        raise TypeError(f"{where or 'run.json'} is a {type(raw).__name__}, expected an object")
    out: dict[str, Any] = {}
    for name, spec in cls.__dataclass_fields__.items():
        if name not in raw or name == "stages":
            continue
        value = raw[name]
        annotation = str(spec.type)
        base = annotation.split("[", 1)[0]
        accepted = _JSON_TYPES.get(annotation) or {"list": (list,), "dict": (dict,)}.get(base)
        if annotation == "float" and value is None:
            value = math.nan
        elif accepted and (
            not isinstance(value, accepted) or (bool not in accepted and isinstance(value, bool))
        ):
            field_name = f"{where}.{name}" if where else name
            raise TypeError(f'"{field_name}" is {value!r}, expected {annotation}')
        out[name] = value
    return out


def stage_of(start_wall_s: float, stages: list[Stage]) -> int:
    """Index of the stage whose window holds ``start_wall_s``; -1 when none does."""
    for stage in stages:
        end = stage.end_wall_s if not math.isnan(stage.end_wall_s) else math.inf
        if stage.start_wall_s <= start_wall_s < end:
            return stage.index
    return -1


def stage_ends(stages: Sequence[Stage], run_end_wall_s: float = math.nan) -> list[float]:
    """Each stage's end: its own, else the next stage's start, else the run's end (may be NaN)."""
    ordered = sorted(stages, key=lambda s: s.start_wall_s)
    ends = {}
    for i, s in enumerate(ordered):
        end = s.end_wall_s
        if math.isnan(end):
            end = ordered[i + 1].start_wall_s if i + 1 < len(ordered) else run_end_wall_s
        ends[s.index] = end
    return [ends[s.index] for s in stages]


def assign_stages(
    start_wall_s: np.ndarray, stages: Sequence[Stage], ends: Sequence[float]
) -> np.ndarray:
    """Per request: the index of the stage window holding its start, -1 for none or warm-up."""
    out = np.full(len(start_wall_s), -1, dtype=np.int64)
    for stage, end in zip(stages, ends, strict=True):
        hi = end if not math.isnan(end) else math.inf
        inside = (start_wall_s >= stage.start_wall_s + stage.warmup_s) & (start_wall_s < hi)
        out[inside] = stage.index
    return out


#: run.json warnings that say Locust's CPU monitor saw > 90%: code -> text. The text starts with
#: its code, so the report recognises the warning by that prefix, never by wording.
CPU_WARNINGS: dict[str, str] = {
    "cpu_high_local": "the load generator's CPU went above 90%: timings may be inflated",
    "cpu_high_worker": "a worker's CPU went above 90%: timings may be inflated",
}


def warning_text(code: str) -> str:
    """A run.json warning: ``"<code>: <text>"``."""
    return f"{code}: {CPU_WARNINGS[code]}"


def is_cpu_warning(text: str) -> bool:
    """True for a warning made by :func:`warning_text` from a :data:`CPU_WARNINGS` code."""
    return text.partition(":")[0] in CPU_WARNINGS
