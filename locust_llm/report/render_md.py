"""report.md: the source document's table first, then its reading and conclusion, the verdict with
evidence and actions, alerts, and the detail tables. Formats what ``build.Report`` holds; computes
nothing. "n/a" marks no data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from locust_llm.metrics import FAILURE_KINDS
from locust_llm.report.build import Report
from locust_llm.report.fmt import load_label, ms, num, pct, ratio


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _load(row: dict[str, Any]) -> str:
    return load_label(row.get("concurrency"), row.get("rate"))


def _load_header(report: Report) -> str:
    return "rate (req/s)" if report.run.info.mode == "open" else "concurrency"


def seed_table(report: Report) -> str:
    """concurrency | QPS | avg latency (ms) | P99 (ms) | GPU util | GPU mem util."""
    headers = [
        _load_header(report),
        "QPS",
        "avg latency (ms)",
        "P99 (ms)",
        "GPU util",
        "GPU mem util",
    ]
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
    return md_table(headers, rows)


def _bullets(items: Sequence[str]) -> str:
    return "\n".join(f"- {i}" for i in items) if items else "- none"


Section = tuple[str, str, list[str], list[list[str]]]  # title, note, headers, rows


def _token_section(report: Report, head: str) -> Section:
    """Token counts per stage: ours (and how many are estimates) beside the server's counters."""
    extra = report.run.info.extra
    limit = extra.get("max_num_seqs")
    note = "Estimated: share of requests whose counts are ours (the server sent no usage)."
    if limit:
        source = extra.get("max_num_seqs_source", "")
        note += f" Batch limit: {limit}{f' ({source})' if source else ''}."
    headers = [head, "input tokens avg", "output tokens avg", "input estimated",
               "output estimated", "output tokens", "server output tokens",
               "busy slots / decode"]  # fmt: skip
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
    return ("Token counts", note, headers, rows)


def detail_sections(report: Report) -> list[Section]:
    """The detail tables as data, shared by the markdown and HTML renderers."""
    rows, head = report.rows, _load_header(report)
    out: list[Section] = [
        (
            "Throughput and latency",
            "",
            [
                head,
                "requests",
                "QPS",
                "output TPS",
                "total TPS",
                "avg (ms)",
                "P50 (ms)",
                "P90 (ms)",
                "P95 (ms)",
                "P99 (ms)",
            ],
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
        )
    ]
    floor_note = (
        f"Roofline floors for {report.floors.model.name} on {report.floors.gpu.name}."
        if report.floors
        else "No roofline floors: pass --model and --gpu."
    )
    out += [
        (
            "TTFT and TPOT against the roofline",
            floor_note,
            [
                head,
                "TTFT avg (ms)",
                "TTFT P50 (ms)",
                "TTFT P99 (ms)",
                "TTFT floor (ms)",
                "TPOT avg (ms)",
                "TPOT P50 (ms)",
                "TPOT P99 (ms)",
                "TPOT floor (ms)",
                "ITL P99 (ms)",
                "model BW util",
            ],
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
        )
    ]
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
    out += [("Errors and goodput", "", headers, table)]
    out += [_token_section(report, head)]
    out += [
        (
            "Resources",
            "",
            [
                head,
                "GPU util",
                "GPU util max",
                "GPU mem",
                "GPU mem max",
                "DRAM BW util",
                "KV cache",
                "KV cache max",
                "running",
                "running max",
                "waiting",
                "waiting max",
                "preemptions",
                "worker CPU max",
            ],
            [
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
            ],
        )
    ]
    return out


def render_markdown(report: Report) -> str:
    """The whole report.md text."""
    info = report.run.info
    meta = [
        f"run `{info.run_id}`",
        f"mode {info.mode}",
        f"{len(info.workers)} workers",
        f"{info.server_instances} server instance(s)",
    ]
    if info.model:
        meta.insert(1, f"model `{info.model}`")
    parts = [f"# locust-llm report: {info.run_id}", ", ".join(meta), seed_table(report)]
    knee = report.knee
    parts.append(f"**Reading:** {knee.reading or 'n/a'}.")
    parts.append(f"**Conclusion:** {knee.conclusion or 'n/a'}.")
    if knee.notes:
        parts.append(_bullets(knee.notes))
    v = report.overall
    parts += [
        f"## Verdict: {v.kind}",
        "Evidence:",
        _bullets(v.evidence),
        "Actions:",
        _bullets(v.actions),
    ]
    parts += [
        "## Stage verdicts",
        md_table(
            ["stage", _load_header(report), "verdict", "evidence"],
            [
                [str(r["stage"]), _load(r), sv.kind, "; ".join(sv.evidence)]
                for r, sv in zip(report.rows, report.verdicts, strict=True)
            ],
        ),
    ]
    parts += [
        "## Alerts",
        _bullets([a.message for a in report.alerts]) if report.alerts else "No alert fired.",
    ]
    for title, note, headers, rows in detail_sections(report):
        parts += [f"## {title}", *([note] if note else []), md_table(headers, rows)]
    if report.soak:
        parts += [
            "## Long-run stability",
            md_table(
                ["stage", "minutes", "P99 drift (%/h)", "throughput drift (%/h)", "verdict"],
                [
                    [
                        str(s.stage),
                        num(len(s.minutes)),
                        num(s.p99_drift_pct_per_h),
                        num(s.qps_drift_pct_per_h),
                        s.verdict.kind,
                    ]
                    for s in report.soak
                ],
            ),
        ]
    if report.comparison:
        parts += [
            "## Comparison (horizontal scaling)",
            md_table(
                [
                    "run",
                    "instances",
                    "peak QPS",
                    "peak output TPS",
                    "at load",
                    "P99 at peak (ms)",
                    "cap",
                    "gain",
                    "instance ratio",
                    "gain per instance",
                ],
                [
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
                ],
            ),
        ]
    if report.warnings:
        parts += ["## Warnings", _bullets(report.warnings)]
    parts += [
        "## Definitions",
        _bullets(
            [
                "QPS = completed requests / stage duration (warm-up excluded); "
                "TPS = output tokens / duration; total TPS adds input tokens",
                "latency = end-to-end (request sent -> end of stream); "
                "TTFT = first generated token; "
                "TPOT = (last token - first token) / (output tokens - 1); "
                "percentiles exact, linear interpolation",
                "error rate = failed / all; "
                "goodput = completed requests meeting every SLO / duration",
                "model BW util = roofline memory time of a decode step at the observed batch and "
                "context / mean TPOT",
                "n/a = no data (never 0)",
            ]
        ),
    ]
    return "\n\n".join(parts) + "\n"
