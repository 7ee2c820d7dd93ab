"""Assemble a report from a loaded run: stage table, verdicts, knee, alerts, soak drift.

Pure given a :class:`~locust_llm.report.load.RunData`: the renderers (markdown, HTML, CSV,
JSON) read the :class:`Report` this returns and compute nothing themselves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from locust_llm.error_messages import KindMessages
from locust_llm.errors import InputError
from locust_llm.report.compare import CompareRow
from locust_llm.report.diagnosis.alerts import Alert, check
from locust_llm.report.diagnosis.client_delay import (
    add_client_delay,
    contention_caveats,
    delay_caveats,
    send_caveats,
)
from locust_llm.report.diagnosis.knee import Knee, find_knee, stage_scaling
from locust_llm.report.diagnosis.lag import lag_warnings
from locust_llm.report.diagnosis.resources import (
    over_peak_warnings,
    server_limits,
    with_observed_limit,
)
from locust_llm.report.diagnosis.thresholds import Slo, Thresholds
from locust_llm.report.diagnosis.verdict import ACTIONS, Verdict, overall_verdict, stage_verdicts
from locust_llm.report.load import RunData
from locust_llm.report.messages import error_messages
from locust_llm.report.soak import SoakResult, soak_results
from locust_llm.report.sources import source_warnings
from locust_llm.report.tables import Floors, TelemetryIndex, request_arrays, stage_table
from locust_llm.report.wording import DeviceWords, without_gpu_telemetry
from locust_llm.roofline.devices import PLUGIN_FLAGS, DeviceArgs, measured_on_a_host
from locust_llm.roofline.floors import GpuSpec, get_gpu, get_model
from locust_llm.rundir.layout import Stage, assign_stages, is_cpu_warning, stage_ends


@dataclass
class Report:
    """Everything the renderers show."""

    run: RunData
    stages: list[Stage]
    table: pd.DataFrame
    verdicts: list[Verdict]
    overall: Verdict
    knee: Knee
    alerts: list[Alert]
    soak: list[SoakResult]
    slo: Slo
    thresholds: Thresholds
    floors: Floors | None
    stage_ix: np.ndarray  # per request row: its stage index (-1: none / warm-up)
    telemetry: TelemetryIndex
    warnings: list[str] = field(default_factory=list)
    comparison: list[CompareRow] = field(default_factory=list)
    words: DeviceWords = field(default_factory=DeviceWords)  # "GPU", or "CPU" / "device"
    #: the run's error kinds (stage windows) with their most frequent message, most first
    errors: list[KindMessages] = field(default_factory=list)
    stage_errors: list[list[KindMessages]] = field(default_factory=list)  # per stage, the same

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.table.to_dict("records")

    @property
    def request_counts(self) -> dict[str, int]:
        """The stages' requests: sent, completed, failed (the server's), cancelled (by the
        load test, at a stage's or the run's end) and client errors (locust-llm's own)."""
        keys = ("sent", "completed", "failed", "cancelled", "client_errors")
        return {
            k: int(self.table[k].fillna(0).sum()) if k in self.table and len(self.table) else 0
            for k in keys
        }


def recorded_device(roofline: dict[str, Any]) -> GpuSpec | None:
    """The device run.json's roofline entry names (``run``'s device flags): a preset, ``cpu``
    (measured now, on this host) or one given by hand; None when it names none."""
    try:
        return DeviceArgs.from_entry(roofline).resolve(PLUGIN_FLAGS)
    except InputError as exc:
        raise InputError(f"run.json's roofline entry: {exc}") from None


def the_device(roofline: dict[str, Any], gpu: str | GpuSpec | None) -> GpuSpec | None:
    """The report's device (a spec, or a preset name) if given, else run.json's."""
    if isinstance(gpu, GpuSpec):
        return gpu
    return get_gpu(gpu) if gpu else recorded_device(roofline)


def resolve_floors(
    roofline: dict[str, Any],
    model: str | None,
    gpu: str | GpuSpec | None,
    tp: int | None = None,
    *,
    server_tp: int | None = None,
) -> tuple[Floors | None, list[str]]:
    """Model and device from the report's flags, else from run.json's roofline entry (what
    ``run`` was told); both are needed. The tensor-parallel degree: ``tp`` (the report's
    flag), else the roofline entry's, else ``server_tp`` (what a simulator records), else 1."""
    model = model or roofline.get("model") or None
    device = the_device(roofline, gpu)
    degree = tp or roofline.get("tp") or server_tp or 1
    if model and device:
        return Floors(get_model(str(model)), device, int(degree)), []
    if model or device:
        missing = "--gpu (or --bandwidth/--flops/--memory)" if model else "--model"
        return None, [f"roofline floors need both a model and a device: give {missing}"]
    return None, []


def pipeline_floor_warning(sim: dict[str, Any], floors: Floors | None) -> list[str]:
    """What the floors leave out for a simulated pipeline (``--pp`` > 1): they take the
    tensor-parallel degree only, so their per-token floor holds (a token reads every stage's
    weights in turn) and their KV capacity is that of tp GPUs, not tp x pp."""
    pp = sim.get("pp", 1)
    if floors is None or not isinstance(pp, int) or pp <= 1:
        return []
    return [
        f"the simulated server ran {pp} pipeline stages (--pp {pp}); the roofline floors take "
        f"--tp {floors.tp} only: their per-token floor holds, their KV capacity is that of "
        f"{floors.tp} GPU(s), not {floors.tp * pp}"
    ]


def server_flags(extra: dict[str, Any]) -> dict[str, Any]:
    """The server's flags run.json records (``extra``, ``extra.sim``, ``extra.server``; the
    server's own entry wins): ``max_num_seqs``, ``total_slots``, ``gpu_memory_utilization`` ..."""
    flags = {k: v for k, v in extra.items() if not isinstance(v, dict | list)}
    for part in ("sim", "server"):  # the simulator's config, then the server's own word
        server = extra.get(part)
        if isinstance(server, dict):
            flags.update({k: v for k, v in server.items() if not isinstance(v, dict | list)})
    return flags


def _client_warning_verdict(
    overall: Verdict, rows: list[dict[str, Any]], warnings: list[str]
) -> Verdict:
    """``client_bound`` overall when Locust warned of its CPU though no stage window caught it.

    Locust's monitor reports CPU over the past interval, so the reading that covers a stage's
    last second can land after its window; its warning still says the run's timings are suspect.
    OOM keeps precedence (the server failed, whatever the client did).
    """
    if overall.kind in ("memory_oom", "client_bound"):
        return overall
    said = [w for w in warnings if is_cpu_warning(w)]  # coded in locust_llm.rundir.layout
    if not said:
        return overall
    peaks = [
        float(r["worker_cpu_max"])
        for r in rows
        if isinstance(r.get("worker_cpu_max"), float) and math.isfinite(r["worker_cpu_max"])
    ]
    seen = f"{max(peaks):.0%}" if peaks else "n/a"
    evidence = (
        f"run.json: {said[0]} (Locust's own CPU monitor, threshold 90%); worker CPU max "
        f"sampled inside the stage windows {seen}",
        f"without it the verdict would be {overall.kind}: " + "; ".join(overall.evidence),
    )
    return Verdict("client_bound", evidence, ACTIONS["client_bound"], None)


def _unfinished_run_verdict(overall: Verdict, info: Any) -> Verdict:
    """A run that was interrupted, failed or never finished is never called ``healthy``: its
    stages did not all run, so nothing shows the server holds the whole sweep."""
    if overall.kind != "healthy" or info.state in ("", "finished"):
        return overall
    why = info.state_reason or "it did not finish"
    evidence = (
        f"run.json: the run is {info.state} ({why}); a healthy verdict needs a finished run",
        "without it the verdict would be healthy: " + "; ".join(overall.evidence),
    )
    return Verdict("insufficient_data", evidence, ACTIONS["insufficient_data"], None)


def locust_users(command: Sequence[str]) -> int | None:
    """The user count a plain Locust command line asked for (``-u N``, ``--users N``,
    ``--users=N``; the last one given wins), or None."""
    users = None
    for i, arg in enumerate(command):
        value = None
        if arg in ("-u", "--users") and i + 1 < len(command):
            value = command[i + 1]
        elif arg.startswith("--users="):
            value = arg.partition("=")[2]
        elif arg.startswith("-u") and arg[2:].isdigit():
            value = arg[2:]
        if value is not None and value.strip().isdigit():
            users = int(value)
    return users


def peak_in_flight(start_wall_s: np.ndarray, e2e_s: np.ndarray) -> int:
    """The most requests that were in flight at once (records with a start and a duration)."""
    ok = np.isfinite(start_wall_s) & np.isfinite(e2e_s)
    starts, ends = start_wall_s[ok], start_wall_s[ok] + e2e_s[ok]
    if starts.size == 0:
        return 0
    times = np.concatenate([starts, ends])
    steps = np.concatenate([np.ones(starts.size), -np.ones(ends.size)])
    order = np.lexsort((steps, times))  # at equal times an end (-1) comes before a start
    return int(np.cumsum(steps[order]).max())


def effective_stages(run: RunData) -> tuple[list[Stage], list[str]]:
    """run.json's stages; a run without any (plain Locust) is one stage spanning all its
    requests, at the user count Locust ran (its ``-u``; else the peak of requests in flight,
    said in a warning)."""
    if run.info.stages:
        return list(run.info.stages), []
    starts = run.requests["start_wall_s"].to_numpy(float)
    finite = starts[np.isfinite(starts)]
    if finite.size == 0:
        raise InputError(f"{run.path}: no stages in run.json and no request start times")
    users, warnings = locust_users(run.info.command), []
    if users is None:
        users = peak_in_flight(starts, run.requests["e2e_s"].to_numpy(float, na_value=np.nan))
        warnings.append(
            f"run.json has no stages and its command no -u/--users: concurrency {users} is the "
            "peak of requests in flight"
        )
    stage = Stage(
        index=0,
        name="all",
        start_wall_s=float(finite.min()),
        end_wall_s=run.info.end_wall_s,
        concurrency=users or None,
    )
    return [stage], warnings


def build_report(
    run: RunData,
    *,
    slo: Slo | None = None,
    thresholds: Thresholds | None = None,
    model: str | None = None,
    gpu: str | GpuSpec | None = None,
    tp: int | None = None,
) -> Report:
    """The full analysis of one run."""
    slo = slo or Slo()
    thresholds = thresholds or Thresholds()
    sim = run.info.extra.get("sim")
    sim_tp = sim.get("tp") if isinstance(sim, dict) else None  # a simulator records it
    device = the_device(run.info.roofline, gpu)  # resolved once (``cpu`` is measured)
    words = DeviceWords.of(device)
    floors, warnings = resolve_floors(run.info.roofline, model, device, tp, server_tp=sim_tp)
    warnings += pipeline_floor_warning(sim if isinstance(sim, dict) else {}, floors)
    stages, stage_warnings = effective_stages(run)
    warnings += stage_warnings
    telemetry = TelemetryIndex(run.telemetry, floors.gpu if floors else None)
    extra = with_observed_limit(run.info.extra, telemetry.timeline)  # a flat running gauge
    table = stage_table(
        run.requests,
        run.telemetry,
        stages,
        run_end_wall_s=run.info.end_wall_s,
        mode=run.info.mode,
        slo=slo,
        floors=floors,
        limits=server_limits(extra),
    )
    device_warnings = without_gpu_telemetry(table, words)  # report/wording.py
    # how each stage answered its load: the one classification the reading, the cap and the
    # verdict read (knee.stage_scaling)
    scaling = stage_scaling(table.to_dict("records"), thresholds, floors.model if floors else None)
    table["scaling"] = [scaling.get(int(s), ("", ""))[0] for s in table["stage"]]
    table["scaling_next"] = [scaling.get(int(s), ("", ""))[1] for s in table["stage"]]
    rows = table.to_dict("records")
    if floors is not None:
        device_warnings += over_peak_warnings(rows, floors.gpu.name)
    add_client_delay(rows, run.requests, stages, run.info.end_wall_s)  # report/client_delay.py
    arrays = request_arrays(run.requests)
    ends = stage_ends(stages, run.info.end_wall_s)
    ends = [float(r["end_wall_s"]) if math.isnan(e) else e for e, r in zip(ends, rows, strict=True)]
    stage_ix = assign_stages(arrays["start_wall_s"], stages, ends)
    errors, stage_errors = error_messages(run.requests, stage_ix, [s.index for s in stages])
    for row, kinds in zip(rows, stage_errors, strict=True):
        row["error_messages"] = {k.kind: k for k in kinds}  # the errors rule quotes them
    server = server_flags(extra)
    if device is not None and measured_on_a_host(device):
        # a probe's figures (roofline/cpu_device.py), now or when the run started
        server["device_probed"] = device.source or "a CPU's figures measured on a host"
    verdicts = stage_verdicts(rows, thresholds=thresholds, server=server)
    verdicts = [words.verdict(v) for v in verdicts]
    over = [int(r["stage"]) for r, v in zip(rows, verdicts, strict=True) if v.kind == "overloaded"]
    knee = find_knee(
        rows,
        slo=slo,
        thresholds=thresholds,
        overloaded=over,
        model=floors.model if floors else None,
    )
    overall = overall_verdict(rows, verdicts, cap_stage=knee.cap_stage, thresholds=thresholds)
    overall = words.verdict(_client_warning_verdict(overall, rows, run.warnings))
    overall = _unfinished_run_verdict(overall, run.info)
    soak = soak_results(
        stages, ends, stage_ix, arrays["start_wall_s"], arrays["e2e_s"], arrays["ok"],
        thresholds=thresholds,
    )  # fmt: skip
    return Report(
        run=run,
        stages=stages,
        table=table,
        verdicts=verdicts,
        overall=overall,
        knee=knee,
        alerts=check(rows, thresholds, steps=knee.steps),
        soak=soak,
        slo=slo,
        thresholds=thresholds,
        floors=floors,
        stage_ix=stage_ix,
        telemetry=telemetry,
        warnings=[
            *words.say_all(
                [
                    *run.warnings,
                    *warnings,
                    *delay_caveats(rows, [v.kind for v in verdicts], thresholds),
                    *contention_caveats(rows, thresholds),
                    *send_caveats(rows, thresholds),
                    *lag_warnings(
                        run.telemetry,
                        [(s.name, s.start_wall_s, e) for s, e in zip(stages, ends, strict=True)],
                    ),
                    *source_warnings(run.telemetry),
                ]
            ),
            *device_warnings,
        ],
        words=words,
        errors=errors,
        stage_errors=stage_errors,
    )
