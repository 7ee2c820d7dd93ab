"""The one document model of a report: what ``report.md``, ``report.html`` and the console show.

``build.Report`` holds the numbers; :func:`document` turns them into an ordered list of
sections made of a few block kinds (paragraphs, bullet lists, tables, chart slots). Every
renderer walks the same sections, so the markdown and the HTML cannot disagree on a sentence,
a caveat or a definition: the HTML adds the charts (a :class:`Chart` names one; the markdown
leaves it out) and the layout. Text is plain; a `backquoted` span is code in both outputs.
Formats numbers (through :mod:`locust_llm.report.fmt`) and computes nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from locust_llm.metrics import FAILURE_KINDS
from locust_llm.report.blocks import Block, Bullets, Chart, Document, Paragraph, Section, Table
from locust_llm.report.build import Report
from locust_llm.report.capacity import capacity_report
from locust_llm.report.diagnosis.client_delay import COLUMNS as CLIENT_DELAY_COLUMNS
from locust_llm.report.diagnosis.client_delay import TABLE_HEADERS as CLIENT_DELAY_HEADERS
from locust_llm.report.diagnosis.client_delay import client_delay_rows
from locust_llm.report.diagnosis.decompose import split_line
from locust_llm.report.fmt import is_num, load_label, ms, num, pct, ratio
from locust_llm.report.sources import source_lines, source_summaries
from locust_llm.report.wording import DeviceWords
from locust_llm.report.workloads import sections as workload_sections
from locust_llm.rundir.states import banner, stages_not_run

#: What each column and figure means; every renderer prints these words.
DEFINITIONS: tuple[str, ...] = (
    "QPS = completed requests / stage duration (warm-up excluded); output TPS = output tokens / "
    "duration; total TPS adds input tokens",
    "latency (E2E) = request sent -> end of stream; TTFT = request sent -> first chunk with "
    "generated text; TPOT = (last token - first token) / (output tokens - 1) (vLLM's TPOT, "
    "GuideLLM's and AIPerf's ITL); ITL = gaps between token-bearing chunks per token; "
    "percentiles exact over the records, linear interpolation",
    "error rate = failed / (failed + completed); goodput = completed requests meeting every SLO "
    "/ duration; SLO attainment = the share of completed requests meeting every SLO",
    "GPU util = NVML's GPU utilization (the share of time a kernel was running, not how much of "
    "the GPU it used), mean over the stage's samples and GPUs",
    "GPU mem used = GPU memory in use / total memory (NVML's memory used and total; a capacity "
    "figure). It is not NVML's memory utilization (the share of time the memory controller was "
    "busy); the closest figure to that is DRAM BW util",
    "DRAM BW util = the share of cycles the DRAM interface was active (DCGM "
    "DCGM_FI_PROF_DRAM_ACTIVE or NVML GPM), when an exporter reports it",
    "KV cache = the server's KV-cache usage (its /metrics); running / waiting = requests in the "
    "server's batch / in its queue; preemptions = requests the server evicted in the stage",
    "model BW util = roofline memory time of a decode step at the observed batch and context / "
    "mean TPOT",
    "n/a = no data (never 0)",
)


THROUGHPUT_HEADERS = ("requests", "QPS", "output TPS", "total TPS", "avg (ms)", "P50 (ms)",
                      "P90 (ms)", "P95 (ms)", "P99 (ms)")  # fmt: skip
ROOFLINE_HEADERS = ("TTFT avg (ms)", "TTFT P50 (ms)", "TTFT P99 (ms)", "TTFT floor (ms)",
                    "TPOT avg (ms)", "TPOT P50 (ms)", "TPOT P99 (ms)", "TPOT floor (ms)",
                    "ITL P99 (ms)", "model BW util")  # fmt: skip
#: "GPU mem used" is memory capacity in use (see DEFINITIONS), not NVML's memory utilization.
RESOURCE_HEADERS = ("GPU util", "GPU util max", "GPU mem used", "GPU mem used max",
                    "DRAM BW util", "KV cache", "KV cache max", "running", "running max",
                    "waiting", "waiting max", "preemptions", "worker CPU max")  # fmt: skip


def _load(row: dict[str, Any]) -> str:
    return load_label(row.get("concurrency"), row.get("rate"))


def load_header(report: Report) -> str:
    """The load column's title: concurrency (closed loop) or rate (open loop)."""
    return "rate (req/s)" if report.run.info.mode == "open" else "concurrency"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], *text: int) -> Table:
    return Table(tuple(headers), tuple(tuple(r) for r in rows), frozenset({0, *text}))


def seed_table(report: Report) -> Table:
    """concurrency | QPS | avg latency (ms) | P99 (ms) | GPU util | GPU mem used."""
    headers = [load_header(report), "QPS", "avg latency (ms)", "P99 (ms)", "GPU util"]
    headers.append("GPU mem used")
    rows = [
        [
            _load(r),
            num(r["qps"]),
            ms(r["latency_avg_s"]),
            ms(r["latency_p99_s"]),
            pct(r["gpu_util"]),
            pct(r["gpu_mem_util"]),
        ]
        for r in report.rows
    ]
    return _table(headers, rows)


def field_table(report: Report) -> Table:
    """What vLLM's benchmark, GuideLLM and EvalScope print first, one row per stage: QPS,
    output tok/s, TTFT / TPOT / E2E P50 and P99 (ms), errors."""
    headers = [
        "stage",
        load_header(report),
        "QPS",
        "out tok/s",
        "TTFT P50",
        "TTFT P99",
        "TPOT P50",
        "TPOT P99",
        "E2E P50",
        "E2E P99",
        "errors",
    ]
    rows = [
        [
            str(r["stage"]),
            _load(r),
            num(r["qps"]),
            num(r["output_tps"]),
            ms(r["ttft_p50_s"]),
            ms(r["ttft_p99_s"]),
            ms(r["tpot_p50_s"], 1),
            ms(r["tpot_p99_s"], 1),
            ms(r["latency_p50_s"]),
            ms(r["latency_p99_s"]),
            f"{num(r['failed'])} ({pct(r['error_rate'], 1)})",
        ]
        for r in report.rows
    ]
    return _table(headers, rows)


def _stamp(wall_s: float) -> str:
    return datetime.fromtimestamp(wall_s, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def request_counts(report: Report) -> str:
    """ "1,741 sent, 63 completed, 0 failed, 1,678 cancelled" (client errors when any)."""
    n = report.request_counts
    text = (
        f"{num(n['sent'])} sent, {num(n['completed'])} completed, {num(n['failed'])} failed, "
        f"{num(n['cancelled'])} cancelled"
    )
    return text + (f", {num(n['client_errors'])} client errors" if n["client_errors"] else "")


def description(report: Report) -> str:
    """One sentence saying what was run: model, mode, sweep, requests, time, workers."""
    info, rows = report.run.info, report.rows
    loads = ", ".join(_load(r) for r in rows)
    sweep = f"{len(rows)} stage(s) at {load_header(report)} {loads}"
    parts = [f"run `{info.run_id}`"]
    if info.model:
        parts.append(f"model `{info.model}`")
    loop = "open loop (requests sent at a rate)" if info.mode == "open" else "closed loop"
    parts.append(f"{loop}, {sweep}")
    starts = [r["start_wall_s"] for r in rows if math.isfinite(r["start_wall_s"])]
    ends = [r["end_wall_s"] for r in rows if math.isfinite(r["end_wall_s"])]
    parts.append(f"requests {request_counts(report)}")
    if starts and ends:
        parts.append(f"{num(max(ends) - min(starts), 0)} s from {_stamp(min(starts))}")
    parts.append(f"{len(info.workers)} Locust worker(s)")
    parts.append(f"{info.server_instances} server instance(s)")
    return "; ".join(parts)


def _overview(report: Report) -> Section:
    knee = report.knee
    blocks: list[Block] = [
        Paragraph(description(report)),
        seed_table(report),
        Paragraph(f"{knee.reading or 'n/a'}.", "Reading"),
        Paragraph(f"{knee.conclusion or 'n/a'}.", "Conclusion"),
    ]
    if knee.notes:
        blocks.append(Bullets(tuple(knee.notes), "Caveats"))
    return Section("overview", "", tuple(blocks))


def _basis(v: Any) -> str:
    """How a verdict was reached: its rule, the samples it used, its confidence, both names."""
    names = f"source document: {v.source_name}; " if v.source_name else ""
    side = ", client-side evidence only" if v.client_side else ""
    return (
        f"{names}rule `{v.rule or 'overall'}`, {num(v.requests)} requests, "
        f"{num(v.telemetry_samples)} server samples, confidence {v.confidence}{side}"
    )


def _loads(report: Report) -> list[str]:
    """The distinct loads of the run's stages (soak stages left out), as they print."""
    labels = [load_label(r.get("concurrency"), r.get("rate")) for r in report.rows]
    kinds = [r.get("kind") for r in report.rows]
    return list(dict.fromkeys(x for x, k in zip(labels, kinds, strict=True) if k != "soak"))


def _vs_load_fits(report: Report) -> bool:
    """Whether charts against load fit: two loads at least (one load is one point)."""
    return len(_loads(report)) > 1


def _scaling(report: Report) -> Section:
    """The charts against load; with one load, the words why there are none."""
    if _vs_load_fits(report):
        return Section("scaling", "Scaling", (Chart("scaling"),))
    loads = _loads(report)
    one = f"One load ({loads[0]})" if loads else "No load stage"
    return Section(
        "scaling",
        "Scaling",
        (
            Paragraph(
                f"{one}: charts against load need stages at two loads or more; this "
                "stage's figures are in the stage table."
            ),
        ),
    )


def _verdict(report: Report) -> Section:
    v = report.overall
    return Section(
        "verdict",
        f"Verdict: {v.headline}",
        (
            Paragraph(_basis(v), "Basis"),
            Bullets(tuple(v.evidence), "Evidence"),
            Bullets(tuple(v.actions), "Actions"),
        ),
        aside=Chart("key") if _vs_load_fits(report) else None,
    )


#: The error-message table's columns (:func:`error_table`).
ERROR_HEADERS = ("kind", "failed", "share", "with this message", "most frequent message")


def error_table(report: Report) -> Table:
    """Per error kind of the run (stage windows, warm-up left out): its count, its share of the
    requests, and the message most of its failures carried with their count (numbers and ids
    that differed between requests shown as {n} / {id}: :mod:`locust_llm.error_messages`)."""
    rows = [
        [
            k.kind,
            num(k.count),
            pct(k.share, 1),
            num(k.message_count) if k.message else "n/a",
            k.message or "(no message)",
        ]
        for k in report.errors
    ]
    return _table(ERROR_HEADERS, rows, 4)


def _error_messages(report: Report) -> list[Section]:
    """The failures in the words they came with; no section when nothing failed."""
    if not report.errors:
        return []
    note = (
        "Per error kind: the message most of its failures carried (an HTTP error's body reduced "
        "to its message; numbers and ids that differed between requests shown as {n} and {id}). "
        "Share = of the requests in the stage windows. Every message is in requests.parquet "
        "(error_message)."
    )
    blocks = (Paragraph(note), error_table(report))
    return [Section("error-messages", "Errors and their messages", blocks)]


def _stage_verdicts(report: Report) -> Section:
    rows = [
        [str(r["stage"]), _load(r), sv.headline, sv.confidence, "; ".join(sv.evidence)]
        for r, sv in zip(report.rows, report.verdicts, strict=True)
    ]
    headers = ["stage", load_header(report), "verdict", "confidence", "evidence"]
    table = _table(headers, rows, 2, 3, 4)
    return Section("stage-verdicts", "Stage verdicts", (table,))


def _time_split(report: Report) -> Section:
    """Per stage: TTFT = queue + prefill + outside the engine (source), decode, and Little's law
    beside it."""
    rows = [
        [
            str(r["stage"]),
            _load(r),
            ms(r["ttft_avg_s"]),
            ms(r["queue_avg_s"]),
            ms(r["prefill_avg_s"]),
            ms(r["outside_avg_s"]),
            ms(r["decode_avg_s"]),
            ms(r["queue_little_s"]),
            r["ttft_split_source"] or "n/a",
        ]
        for r in report.rows
    ]
    lines = tuple(
        f"stage {r['stage']} (load {_load(r)}): {split_line(r)}"
        for r in report.rows
        if split_line(r)
    )
    headers = [
        "stage", load_header(report), "TTFT avg", "queue", "prefill", "outside engine",
        "decode", "queue (Little)", "source",
    ]  # fmt: skip
    return Section(
        "time-split",
        "Where the time goes (ms): TTFT = queue + prefill + outside the engine, "
        "E2E = TTFT + decode",
        (_table(headers, rows, 8), Bullets(lines, empty="no TTFT split (no TTFT measured)")),
    )


def _open_loop(report: Report) -> list[Section]:
    """Open loop: the arrivals due in the window vs the achieved rate (completions over the
    window shifted by the median latency: tables.achieved), the tail apart, and latency from
    the scheduled time beside latency from the send."""
    if report.run.info.mode != "open":
        return []
    rows = [
        [
            str(r["stage"]),
            num(r["offered_rps"], 2),
            num(r["qps"], 2),
            pct(r["achieved_ratio"]),
            num(r["completed_after_window"]),
            ms(r["latency_p99_s"]),
            ms(r["latency_sched_p99_s"]),
        ]
        for r in report.rows
    ]
    headers = [
        "stage", "arrivals due (req/s)", "achieved (req/s)", "achieved / due",
        "completed after the window", "E2E P99 from send (ms)", "E2E P99 from schedule (ms)",
    ]  # fmt: skip
    blocks: list[Block] = [_table(headers, rows)]
    counted = [r for r in report.rows if is_num(r["arrivals_drawn"])]
    if counted:
        blocks += [_table(ARRIVAL_HEADERS, [_arrival_cells(r) for r in counted]),
                   Bullets(tuple(_arrival_notes(counted)), lead="Arrivals")]  # fmt: skip
    return [Section("open-loop", "Open loop: offered and achieved", tuple(blocks))]


ARRIVAL_HEADERS = ("stage", "arrivals drawn", "sent", "never sent", "pool ran dry",
                   "stage ended first", "run stopped")  # fmt: skip


def _arrival_cells(row: dict[str, Any]) -> list[str]:
    keys = ("arrivals_drawn", "arrivals_sent", "arrivals_unsent", "unsent_pool_ran_dry",
            "unsent_stage_ended", "unsent_run_stopped")  # fmt: skip
    return [str(row["stage"]), *(num(row[k]) for k in keys)]


def _arrival_notes(rows: Sequence[dict[str, Any]]) -> list[str]:
    """What the arrival counts say, per stage that lost any (and any count that disagrees)."""
    notes = []
    for r in rows:
        where = f"stage {r['stage']} (load {_load(r)})"
        if r["arrivals_drawn"] != r["arrivals_sent"] + r["arrivals_unsent"]:
            notes.append(
                f"{where}: {num(r['arrivals_drawn'])} drawn but {num(r['arrivals_sent'])} sent "
                f"+ {num(r['arrivals_unsent'])} unsent: records missing from the run dir"
            )
        if r["unsent_pool_ran_dry"] > 0:
            notes.append(
                f"{where}: {num(r['unsent_pool_ran_dry'])} of {num(r['arrivals_drawn'])} "
                "arrivals never sent because every user was busy until the stage ended: the "
                "offered rate was not offered; raise --llm-max-users"
            )
    return notes or ["no arrival was left unsent for want of a free user"]


def _resources(report: Report) -> Section:
    """Per stage: MFU, MBU, the step bound and the admission limit that binds."""
    rows = [
        [
            str(r["stage"]),
            _load(r),
            pct(r["mfu"]),
            pct(r["mbu"]),
            r["step_bound"] or "n/a",
            f"{r['admission_limit']} {num(r['admission_limit_seqs'], 0)}"
            if r["admission_limit"]
            else "n/a",
            pct(r["batch_fill"]),
        ]
        for r in report.rows
    ]
    headers = [
        "stage", load_header(report), "MFU", "MBU", "step bound", "admission limit (seqs)",
        "peak batch / limit",
    ]  # fmt: skip
    return Section("resources", "Resources", (_table(headers, rows, 4, 5),))


def _alerts(report: Report) -> Section:
    items = tuple(a.message for a in report.alerts)
    return Section("alerts", "Alerts", (Bullets(items, empty="No alert fired.", css="alert"),))


def _detail_sections(report: Report) -> list[Section]:
    rows, head = report.rows, load_header(report)
    out = [
        Section(
            "throughput",
            "Throughput and latency",
            (
                _table(
                    [head, *THROUGHPUT_HEADERS],
                    [
                        [
                            _load(r),
                            num(r["requests"]),
                            num(r["qps"]),
                            num(r["output_tps"]),
                            num(r["total_tps"]),
                            ms(r["latency_avg_s"]),
                            ms(r["latency_p50_s"]),
                            ms(r["latency_p90_s"]),
                            ms(r["latency_p95_s"]),
                            ms(r["latency_p99_s"]),
                        ]
                        for r in rows
                    ],
                ),
            ),
        )
    ]
    floor_note = (
        f"Roofline floors for {report.floors.model.name} on {report.floors.gpu.name}."
        if report.floors
        else "No roofline floors: pass --model and --gpu."
    )
    out.append(
        Section(
            "roofline",
            "TTFT and TPOT against the roofline",
            (
                Paragraph(floor_note),
                _table(
                    [head, *ROOFLINE_HEADERS],
                    [
                        [
                            _load(r),
                            ms(r["ttft_avg_s"]),
                            ms(r["ttft_p50_s"]),
                            ms(r["ttft_p99_s"]),
                            ms(r["ttft_floor_s"], 1),
                            ms(r["tpot_avg_s"], 1),
                            ms(r["tpot_p50_s"], 1),
                            ms(r["tpot_p99_s"], 1),
                            ms(r["tpot_floor_s"], 1),
                            ms(r["itl_p99_s"], 1),
                            pct(r["model_bw_util"]),
                        ]
                        for r in rows
                    ],
                ),
            ),
        )
    )
    kinds = [k for k in FAILURE_KINDS if any((r[f"error_rate_{k}"] or 0) > 0 for r in rows)]
    open_loop = report.run.info.mode == "open"
    headers = [head, "failed", "error rate", *kinds, "goodput (req/s)", "SLO attainment"]
    if open_loop:
        headers.append("dispatch delay P99 (ms)")
    table = []
    for r in rows:
        line = [
            _load(r),
            num(r["failed"]),
            pct(r["error_rate"], 1),
            *(pct(r[f"error_rate_{k}"], 1) for k in kinds),
            num(r["goodput_rps"]),
            pct(r["slo_attainment"], 1),
        ]
        if open_loop:
            line.append(ms(r["dispatch_delay_p99_s"], 1))
        table.append(line)
    out.append(Section("errors", "Errors and goodput", (_table(headers, table),)))
    out.append(_token_section(report, head))
    resources = [
        [
            _load(r),
            pct(r["gpu_util"]),
            pct(r["gpu_util_max"]),
            pct(r["gpu_mem_util"]),
            pct(r["gpu_mem_util_max"]),
            pct(r["dram_bw_util"]),
            pct(r["kv_cache_usage"]),
            pct(r["kv_cache_usage_max"]),
            num(r["running"]),
            num(r["running_max"]),
            num(r["waiting"]),
            num(r["waiting_max"]),
            num(r["preemptions"]),
            pct(r["worker_cpu_max"]),
        ]
        for r in rows
    ]
    out.append(
        Section(
            "resources",
            "Resources",
            (
                _table(
                    [head, *RESOURCE_HEADERS],
                    resources,
                ),
            ),
        )
    )
    return out


TOKEN_HEADERS: tuple[str, ...] = (
    "input tokens avg", "output tokens avg", "input estimated", "output estimated",
    "output tokens", "server output tokens", "busy slots / decode",
)  # fmt: skip


def _token_section(report: Report, head: str) -> Section:
    """Token counts per stage: ours (and the share that are estimates) beside the server's own
    counters, and the batch limit with where it came from."""
    extra = report.run.info.extra
    note = "Estimated: share of requests whose counts are ours (the server sent no usage)."
    limit = extra.get("max_num_seqs")
    if limit:
        source = extra.get("max_num_seqs_source", "")
        note += f" Batch limit: {limit}{f' ({source})' if source else ''}."
    rows = [
        [
            _load(r),
            num(r["input_tokens_avg"]),
            num(r["output_tokens_avg"]),
            pct(r["input_tokens_estimated_ratio"]),
            pct(r["output_tokens_estimated_ratio"]),
            num(r["output_tokens_avg"] * r["completed"]),
            num(r["server_output_tokens"]),
            num(r["busy_slots_per_decode"]),
        ]
        for r in report.rows
    ]
    return Section(
        "tokens", "Token counts", (Paragraph(note), _table([head, *TOKEN_HEADERS], rows))
    )


def _soak(report: Report) -> list[Section]:
    if not report.soak:
        return []
    rows = [
        [
            str(s.stage),
            num(len(s.minutes)),
            num(s.p99_drift_pct_per_h),
            num(s.qps_drift_pct_per_h),
            s.verdict.kind,
        ]
        for s in report.soak
    ]
    headers = ["stage", "minutes", "P99 drift (%/h)", "throughput drift (%/h)", "verdict"]
    return [Section("soak", "Long-run stability", (_table(headers, rows, 4),))]


def _comparison(report: Report) -> list[Section]:
    if not report.comparison:
        return []
    headers = ["run", "instances", "peak QPS", "peak output TPS", "at load", "P99 at peak (ms)"]
    headers += ["cap", "gain", "instance ratio", "gain per instance"]
    rows = [
        [
            c.run,
            num(c.instances),
            num(c.peak_qps),
            num(c.peak_output_tps),
            c.peak_load,
            ms(c.p99_at_peak_s),
            c.cap or "n/a",
            ratio(c.gain),
            ratio(c.instance_ratio),
            ratio(c.gain_per_instance),
        ]
        for c in report.comparison
    ]
    return [Section("comparison", "Comparison (horizontal scaling)", (_table(headers, rows),))]


def _client_delay(report: Report) -> list[Section]:
    """Per stage: how long after the kernel received first/last tokens the worker read them,
    and the send delay (start stamp to the request's last byte sent) where records carry it."""
    rows = client_delay_rows(report.run.requests, report.stages, report.run.info.end_wall_s)
    if not rows:
        return []
    sends = any(r["send_delay_p50_s"] == r["send_delay_p50_s"] for r in rows)  # any not nan
    columns = [c for c in CLIENT_DELAY_COLUMNS if sends or not c.startswith("send_")]
    cells = [
        [
            _load(stage_row),
            num(r["client_delay_stamped"]),
            num(r["client_delay_first_merged"]),
            ms(r["ttft_error_bound_max_s"], 2),
        ]
        + [ms(r[c], 2) for c in columns]
        for stage_row, r in zip(report.rows, rows, strict=True)
    ]
    headers = CLIENT_DELAY_HEADERS[: 3 + len(columns)]
    table = _table([load_header(report), *headers], cells)
    title = "Client delay (kernel stamp to user-space read)"
    if sends:
        title += " and send delay (start to last byte sent)"
    return [Section("client-delay", title, (table,))]


def run_state_banner(report: Report) -> str:
    """The run's state in one line when it is not finished (interrupted, failed, or still
    'running': killed), with the stages that never ran; '' for a finished run."""
    info = report.run.info
    state = info.state
    if state == "running":
        reason = info.state_reason or "the run did not finish (killed, or still running)"
        state = "running"
    else:
        reason = info.state_reason
    return banner(state, reason, stages_not_run(info.stages_planned, len(info.stages)))


def _capacity(report: Report) -> list[Section]:
    found = capacity_report(report)
    if found is None:
        return []
    table = _table(found.headers, found.rows, *range(2, len(found.headers)))
    blocks: tuple[Block, ...] = (
        Paragraph(found.sentence, "Capacity"),
        Paragraph(found.cost, "Search"),
        Paragraph(
            "each load's percentiles over the stage's requests after its warm-up, with their "
            "95% order-statistic intervals [low, high] (inf: too few requests to bound it); a "
            "load meets an SLO when the interval's top is within it, fails when its bottom is "
            "above it, and is judged by the estimate when the interval holds the limit",
            "Method",
        ),
        table,
    )
    return [Section("capacity", "Capacity under the SLOs", blocks)]


def _run_state(report: Report) -> list[Section]:
    line = run_state_banner(report)
    if not line:
        return []
    head = line.partition(": ")[0]
    info = report.run.info
    not_run = stages_not_run(info.stages_planned, len(info.stages))
    reason = info.state_reason or "the run did not finish (killed, or still running)"
    blocks: list[Block] = [Paragraph(reason, head)]
    if info.stages_planned:
        blocks.append(Bullets(tuple(not_run), "Stages not run"))
    return [Section("run-state", head.capitalize(), tuple(blocks))]


def document(report: Report) -> Document:
    """The report as sections, in reading order (the module docstring)."""
    info = report.run.info
    sections = [
        *_run_state(report),
        _overview(report),
        *_capacity(report),
        _verdict(report),
        *_error_messages(report),
        _stage_verdicts(report),
        _time_split(report),
        _resources(report),
        *_open_loop(report),
        _alerts(report),
        _scaling(report),
        Section("telemetry", "Telemetry over time", (Chart("telemetry"),)),
        Section("histograms", "Latency histograms", (Chart("histograms"),)),
        *_detail_sections(report),
        *_client_delay(report),
        *workload_sections(report),
        *_soak(report),
        *_comparison(report),
    ]
    if report.warnings:
        sections.append(Section("warnings", "Warnings", (Bullets(tuple(report.warnings)),)))
    sources = source_lines(source_summaries(report.run.telemetry))
    if sources:
        lead = "Every GPU and server figure in the tables and charts comes from these sources"
        sections.append(
            Section("sources", "Telemetry sources", (Bullets(tuple(sources), lead=lead),))
        )
    sections.append(Section("definitions", "Definitions", (Bullets(DEFINITIONS),)))
    words = report.words  # the warnings are in the device's words already; the errors' messages
    # are the server's own words, quoted as they came (a CPU server may still say "GPU")
    kept = ("warnings", "error-messages")
    sections = [s if s.key in kept else _in_words(s, words) for s in sections]
    return Document(f"locust-llm report: {info.run_id}", tuple(sections))


def _in_words(section: Section, words: DeviceWords) -> Section:
    """A section in the device's words: no GPU claims, GPU columns and definitions left out,
    when the device is no GPU (:mod:`locust_llm.report.wording`)."""
    if words.is_gpu:
        return section
    blocks: list[Block] = []
    for block in section.blocks:
        if isinstance(block, Paragraph):
            blocks.append(Paragraph(words.say(block.text), words.say(block.lead)))
        elif isinstance(block, Bullets):
            blocks.append(
                replace(block, items=words.say_all(block.items), lead=words.say(block.lead))
            )
        elif isinstance(block, Table):
            keep = [i for i, h in enumerate(block.headers) if words.keeps_header(h)]
            blocks.append(
                Table(
                    tuple(words.say(block.headers[i]) for i in keep),
                    tuple(tuple(words.say(row[i]) for i in keep) for row in block.rows),
                    frozenset(keep.index(i) for i in block.text_columns if i in keep),
                )
            )
        else:
            blocks.append(block)
    return replace(section, title=words.say(section.title), blocks=tuple(blocks))
