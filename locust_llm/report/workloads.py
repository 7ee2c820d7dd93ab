"""The report's workload sections: prefix cache, multi-turn sessions, trace replay, embeddings,
reasoning. Each appears only when the run has that kind of traffic.

Computed from the run's own records (the columns the main tables do not read:
``cached_tokens``, ``session_id``, ``turn``, ``trace_line``, ``batch_inputs``, ``ttfr_s``,
``ttfc_s``, ``reasoning_tokens``) and, for the server's own prefix-cache hit rate, from the
telemetry counters ``prompt_tokens_cached_total`` / ``prefix_cache_queries`` (vLLM's
``vllm:prefix_cache_{hits,queries}_total``; their increase over each stage window by the one
counter rule, :mod:`locust_llm.telemetry.counters`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from locust_llm.report.blocks import Paragraph, Section, Table
from locust_llm.report.diagnosis.thresholds import DEFAULT_THRESHOLDS
from locust_llm.report.fmt import ms, num, pct
from locust_llm.rundir.layout import REQUESTS_FILE
from locust_llm.telemetry.counters import series_increase

COLUMNS = (
    "endpoint",
    "ok",
    "error_kind",
    "error_message",
    "start_wall_s",
    "scheduled_wall_s",
    "e2e_s",
    "ttft_s",
    "ttfc_s",
    "ttfr_s",
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cached_tokens",
    "session_id",
    "turn",
    "trace_line",
    "batch_inputs",
)


def read_columns(run_dir: Path) -> pd.DataFrame:
    """The workload columns of requests.parquet that it has (older runs lack some)."""
    import pyarrow.parquet as pq

    path = Path(run_dir) / REQUESTS_FILE
    names = set(pq.read_schema(path).names)
    return pd.read_parquet(path, columns=[c for c in COLUMNS if c in names])


def _q(values: pd.Series, q: float) -> float:
    values = values.dropna()
    return float(values.quantile(q)) if len(values) else math.nan


def prefix_cache_rows(report: Any, frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Per stage: prompt and cached tokens from the answers' usage, the server's hit rate."""
    rows = []
    for stage, ix in _stages(report, frame):
        part = frame[ix & frame.ok.astype(bool)]
        known = part[part.cached_tokens >= 0] if "cached_tokens" in part else part.iloc[:0]
        series = report.telemetry.series
        hits = series_increase(series, "prompt_tokens_cached_total", *stage[1:])
        queries = series_increase(series, "prefix_cache_queries", *stage[1:])
        prompt = float(known.input_tokens.clip(lower=0).sum())
        cached = float(known.cached_tokens.sum())
        rows.append(
            {
                "stage": stage[0],
                "requests": len(part),
                "reported": len(known),
                "prompt_tokens": prompt,
                "cached_tokens": cached,
                "usage_hit_rate": cached / prompt if prompt else math.nan,
                "server_hit_rate": hits / queries if queries and queries > 0 else math.nan,
            }
        )
    return rows


def _stages(report: Any, frame: pd.DataFrame) -> list[tuple[tuple[str, float, float], pd.Series]]:
    """(name, start, end) of each stage and its rows' mask (by the report's stage assignment)."""
    stage_ix = np.asarray(report.stage_ix)
    out: list[tuple[tuple[str, float, float], pd.Series]] = []
    if len(stage_ix) != len(frame):
        return out
    for i, stage in enumerate(report.stages):
        end = stage.end_wall_s if not math.isnan(stage.end_wall_s) else math.inf
        out.append(((stage.name, stage.start_wall_s, end), pd.Series(stage_ix == i, frame.index)))
    return out


def turn_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """TTFT and prompt/cached tokens by turn index (answered turns)."""
    done = frame[(frame.session_id != "") & frame.ok.astype(bool)]
    rows = []
    for turn, part in done.groupby("turn"):
        rows.append(
            {
                "turn": int(turn),
                "requests": len(part),
                "prompt_tokens": _q(part.input_tokens, 0.5),
                "cached_tokens": _q(part.cached_tokens[part.cached_tokens >= 0], 0.5),
                "ttft_p50_s": _q(part.ttft_s, 0.5),
                "ttft_p90_s": _q(part.ttft_s, 0.9),
                "e2e_p50_s": _q(part.e2e_s, 0.5),
            }
        )
    return rows


def session_summary(frame: pd.DataFrame) -> dict[str, float]:
    """Session-level latency and throughput: per session, first send to last answer."""
    part = frame[frame.session_id != ""]
    if part.empty:
        return {}
    end = part.start_wall_s + part.e2e_s.fillna(0.0)
    g = pd.DataFrame(
        {
            "sid": part.session_id,
            "start": part.start_wall_s,
            "end": end,
            "ok": part.ok.astype(bool),
            "out": part.output_tokens,
        }
    )
    per = g.groupby("sid").agg(
        start=("start", "min"),
        end=("end", "max"),
        turns=("ok", "size"),
        failed=("ok", lambda s: int((~s).sum())),
        out=("out", "sum"),
    )
    duration = per.end - per.start
    span = float(per.end.max() - per.start.min())
    return {
        "sessions": float(len(per)),
        "turns_mean": float(per.turns.mean()),
        "with_failure": float((per.failed > 0).sum()),
        "duration_p50_s": _q(duration, 0.5),
        "duration_p90_s": _q(duration, 0.9),
        "tokens_per_s_p50": _q(per.out / duration.where(duration > 0), 0.5),
        "sessions_per_s": len(per) / span if span > 0 else math.nan,
    }


def replay_summary(frame: pd.DataFrame) -> dict[str, float]:
    """Trace replay: lines recorded, sent, not sent; dispatch delay; latency from schedule."""
    part = frame[frame.trace_line >= 0]
    if part.empty:
        return {}
    cancelled = part.error_kind.eq("cancelled")
    unsent = cancelled & part.error_message.str.contains("not sent")
    lost = cancelled & part.error_message.str.contains("lost with worker")
    sent = part[~unsent & ~lost]
    delay = sent.start_wall_s - sent.scheduled_wall_s
    from_schedule = delay + sent.e2e_s
    return {
        "lines": float(part.trace_line.nunique()),
        "records": float(len(part)),
        "sent": float(len(sent)),
        "answered": float(sent.ok.astype(bool).sum()),
        "not_sent": float(unsent.sum()),
        "lost": float(lost.sum()),
        "delay_p50_s": _q(delay, 0.5),
        "delay_p99_s": _q(delay, 0.99),
        "delay_max_s": float(delay.max()) if len(delay) else math.nan,
        "late": float((delay > DEFAULT_THRESHOLDS.replay_late_s).sum()),
        "latency_from_schedule_p50_s": _q(from_schedule, 0.5),
        "latency_from_schedule_p99_s": _q(from_schedule, 0.99),
    }


def embedding_rows(report: Any, frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Per stage: embedding requests, inputs/s, tokens/s, latency."""
    rows = []
    for (name, lo, hi), ix in _stages(report, frame):
        part = frame[ix & (frame.endpoint == "/v1/embeddings") & frame.ok.astype(bool)]
        if part.empty:
            continue
        end = min(hi, float((part.start_wall_s + part.e2e_s).max()))
        span = end - max(lo, float(part.start_wall_s.min()))
        rows.append(
            {
                "stage": name,
                "requests": len(part),
                "inputs": float(part.batch_inputs.sum()),
                "inputs_per_s": float(part.batch_inputs.sum()) / span if span > 0 else math.nan,
                "tokens_per_s": float(part.input_tokens.sum()) / span if span > 0 else math.nan,
                "latency_p50_s": _q(part.e2e_s, 0.5),
                "latency_p99_s": _q(part.e2e_s, 0.99),
            }
        )
    return rows


def reasoning_summary(frame: pd.DataFrame) -> dict[str, float]:
    """Reasoning answers: time to first reasoning / answer token, reasoning tokens apart."""
    part = frame[frame.ok.astype(bool) & (frame.ttfr_s.notna() | (frame.reasoning_tokens > 0))]
    if part.empty:
        return {}
    return {
        "requests": float(len(part)),
        "ttfr_p50_s": _q(part.ttfr_s, 0.5),
        "ttfr_p99_s": _q(part.ttfr_s, 0.99),
        "ttfc_p50_s": _q(part.ttfc_s, 0.5),
        "ttfc_p99_s": _q(part.ttfc_s, 0.99),
        "reasoning_tokens_mean": float(part.reasoning_tokens.mean()),
        "reasoning_share": float(part.reasoning_tokens.sum() / max(part.output_tokens.sum(), 1)),
    }


def sections(report: Any) -> list[Any]:
    """The workload sections of ``report`` (a ``build.Report``), in reading order."""
    try:
        frame = read_columns(report.run.path)
    except (OSError, ValueError):
        return []
    for col, default in (
        ("session_id", ""),
        ("trace_line", -1),
        ("cached_tokens", -1),
        ("batch_inputs", 1),
        ("ttfr_s", math.nan),
        ("ttfc_s", math.nan),
        ("reasoning_tokens", 0),
        ("turn", -1),
        ("error_message", ""),
    ):
        if col not in frame:
            frame[col] = default
    out: list[Section] = []

    def table(headers: list[str], rows: list[list[str]]) -> Table:
        return Table(tuple(headers), tuple(tuple(r) for r in rows))

    cache = prefix_cache_rows(report, frame)
    if any(r["reported"] or not math.isnan(r["server_hit_rate"]) for r in cache):
        rows = [
            [
                r["stage"],
                num(r["requests"]),
                num(r["prompt_tokens"]),
                num(r["cached_tokens"]),
                pct(r["usage_hit_rate"], 1),
                pct(r["server_hit_rate"], 1),
            ]
            for r in cache
        ]
        out.append(
            Section(
                "prefix_cache",
                "Prefix cache",
                (
                    Paragraph(
                        "Prompt tokens the server's prefix cache served: from each answer's "
                        "`usage.prompt_tokens_details.cached_tokens` and from the server's own "
                        "counters (`vllm:prefix_cache_hits_total` / `queries_total`) over the "
                        "stage. A high hit rate lowers TTFT without a faster GPU."
                    ),
                    table(
                        [
                            "stage",
                            "requests",
                            "prompt tokens",
                            "cached tokens",
                            "hit rate (usage)",
                            "hit rate (server)",
                        ],
                        rows,
                    ),
                ),
            )
        )
    turns = turn_rows(frame)
    if turns:
        rows = [
            [
                str(r["turn"]),
                num(r["requests"]),
                num(r["prompt_tokens"]),
                num(r["cached_tokens"]),
                ms(r["ttft_p50_s"]),
                ms(r["ttft_p90_s"]),
                ms(r["e2e_p50_s"]),
            ]
            for r in turns
        ]
        s = session_summary(frame)
        out.append(
            Section(
                "sessions",
                "Multi-turn sessions",
                (
                    Paragraph(
                        f"{num(s['sessions'])} sessions, {num(s['turns_mean'])} turns each on "
                        f"average ({num(s['with_failure'])} with a failed turn, which ends the "
                        f"session); a session took {ms(s['duration_p50_s'])} ms at P50 and "
                        f"{ms(s['duration_p90_s'])} ms at P90 from its first send to its last "
                        f"answer, at {num(s['tokens_per_s_p50'])} output tokens/s (P50); "
                        f"{num(s['sessions_per_s'], 2)} sessions/s overall."
                    ),
                    table(
                        [
                            "turn",
                            "requests",
                            "prompt tokens P50",
                            "cached tokens P50",
                            "TTFT P50 (ms)",
                            "TTFT P90 (ms)",
                            "E2E P50 (ms)",
                        ],
                        rows,
                    ),
                ),
            )
        )
    r = replay_summary(frame)
    if r:
        rows = [
            ["trace lines recorded", num(r["lines"])],
            ["sent / answered", f"{num(r['sent'])} / {num(r['answered'])}"],
            ["not sent (the run ended first)", num(r["not_sent"])],
            ["lost with a worker (sent and never reported, or never sent)", num(r["lost"])],
            [
                "dispatch delay P50 / P99 / max (ms)",
                " / ".join(
                    (ms(r["delay_p50_s"], 2), ms(r["delay_p99_s"], 2), ms(r["delay_max_s"], 1))
                ),
            ],
            [f"sent more than {ms(DEFAULT_THRESHOLDS.replay_late_s)} ms late", num(r["late"])],
            [
                "latency from the scheduled time P50 / P99 (ms)",
                f"{ms(r['latency_from_schedule_p50_s'])} / {ms(r['latency_from_schedule_p99_s'])}",
            ],
        ]
        out.append(Section("trace_replay", "Trace replay", (table(["figure", "value"], rows),)))
    emb = embedding_rows(report, frame)
    if emb:
        rows = [
            [
                e["stage"],
                num(e["requests"]),
                num(e["inputs"]),
                num(e["inputs_per_s"]),
                num(e["tokens_per_s"]),
                ms(e["latency_p50_s"]),
                ms(e["latency_p99_s"]),
            ]
            for e in emb
        ]
        out.append(
            Section(
                "embeddings",
                "Embeddings",
                (
                    table(
                        [
                            "stage",
                            "requests",
                            "inputs",
                            "inputs/s",
                            "tokens/s",
                            "latency P50 (ms)",
                            "latency P99 (ms)",
                        ],
                        rows,
                    ),
                ),
            )
        )
    reasoning = reasoning_summary(frame)
    if reasoning:
        rows = [
            ["answers with reasoning", num(reasoning["requests"])],
            [
                "time to first reasoning token P50 / P99 (ms)",
                f"{ms(reasoning['ttfr_p50_s'])} / {ms(reasoning['ttfr_p99_s'])}",
            ],
            [
                "time to first answer token P50 / P99 (ms)",
                f"{ms(reasoning['ttfc_p50_s'])} / {ms(reasoning['ttfc_p99_s'])}",
            ],
            ["reasoning tokens per answer (mean)", num(reasoning["reasoning_tokens_mean"])],
            ["reasoning share of output tokens", pct(reasoning["reasoning_share"], 1)],
        ]
        out.append(Section("reasoning", "Reasoning", (table(["figure", "value"], rows),)))
    return out
