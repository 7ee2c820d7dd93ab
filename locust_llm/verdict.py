"""The bottleneck verdict: pure rules, stage table -> ``Verdict(kind, evidence, actions)``.

Input is the per-stage table of ``locust_llm.report.tables`` as a list of mappings (one per stage,
column name -> value; NaN = no data). Output is one :class:`Verdict` per stage and one overall.
Every evidence string quotes the numbers it rests on; every action comes from the source
document's remedy lists, with vLLM flag names. No I/O, no pandas.

Per-stage rules, first match wins (thresholds are fields of the shared
:class:`locust_llm.thresholds.Thresholds`):

1. ``insufficient_data``: fewer than ``min_requests`` requests in the stage, unless every one
   failed above the error-rate threshold (a dead server): then rule 4 says ``errors``.
2. ``memory_oom``: any request failed with error kind ``oom``.
3. ``client_bound``: a Locust worker's CPU peaked at or above ``client_cpu``.
4. ``errors``: error rate above ``error_rate`` (off when it is ``None``).
5. ``insufficient_data``: no server telemetry (none of GPU utilization, DRAM bandwidth, KV-cache
   usage, running) in the stage: the cause cannot be told from client timings alone (they are
   quoted: QPS, E2E, TTFT, TPOT, and the overload test on them).
6. ``overloaded``: past the knee. Throughput gain over the next-lower load at most ``flat_gain``
   while P99 latency rose at least ``latency_climb``; or a standing queue (waiting >= 1 and >=
   half the batch) with the KV cache at ``saturated_kv`` or preempting; or, open loop, achieved
   QPS below ``open_loop_shortfall`` of the offered rate.
7. ``low_concurrency``: no queue (mean waiting below ``no_queue_waiting``; or below one request
   and below ``no_queue_share`` of the batch: requests only waiting for the next step to admit
   them) and the batch (running) at most ``low_batch_fraction`` of its limit: ``max_num_seqs``
   when known, else the KV capacity implied by running / KV-cache usage; with neither, GPU
   utilization below 50%.
8. ``prefill_bound`` / ``decode_bound``: saturated (GPU utilization >= ``saturated_gpu_util``,
   DRAM or model bandwidth utilization >= ``saturated_bw_util``, KV cache >= ``saturated_kv``,
   or a queue) and TTFT's share of E2E latency >= ``prefill_share`` (prefill) or below (decode).
9. ``healthy``: none of the above.

Overall: the first stage that is ``memory_oom`` or ``client_bound``; otherwise the verdict of the
highest-load stage with enough data (when that one is ``overloaded``, the verdict at the
recommended cap is quoted beside it); ``locust_llm.report.build`` also makes it ``client_bound``
when run.json carries Locust's own CPU warning that no stage window caught. A soak stage's drift
verdict (``unstable``) comes from ``locust_llm.report.soak``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from locust_llm.metrics import ERROR_KINDS
from locust_llm.report.fmt import is_num, load_label, ms, num, pct, ratio
from locust_llm.thresholds import Thresholds, error_rate_exceeded

KINDS: tuple[str, ...] = (
    "prefill_bound",
    "decode_bound",
    "memory_oom",
    "low_concurrency",
    "overloaded",
    "client_bound",
    "errors",
    "healthy",
    "insufficient_data",
    "unstable",  # soak stages only: latency or throughput drifts
)

SERVER_SIGNALS: tuple[str, ...] = ("gpu_util", "dram_bw_util", "kv_cache_usage", "running")

ACTIONS: dict[str, tuple[str, ...]] = {
    "prefill_bound": (
        "enable chunked prefill (--enable-chunked-prefill) and size --max-num-batched-tokens so "
        "long prompts do not block short ones",
        "make sure a FlashAttention backend is in use (O(n^2) attention dominates long prompts)",
        "add compute: tensor parallelism (--tensor-parallel-size N)",
        "reuse shared prompt prefixes (--enable-prefix-caching); cap input length "
        "(--max-model-len)",
    ),
    "decode_bound": (
        "quantize the weights (--quantization awq|gptq|fp8): fewer bytes read per token",
        "compress the KV cache (--kv-cache-dtype fp8)",
        "speculative decoding (--speculative-config) to emit several tokens per weight read",
        "if TPOT breaks its SLO, lower --max-num-seqs (batch too large); prefer GQA models and "
        "GPUs with more memory bandwidth",
    ),
    "memory_oom": (
        "quantize the weights (--quantization awq|gptq|fp8) to free memory for the KV cache",
        "raise --gpu-memory-utilization (e.g. 0.90 -> 0.95) if nothing else shares the GPU",
        "lower --max-num-batched-tokens / --max-num-seqs, cap --max-model-len",
        "compress the KV cache (--kv-cache-dtype fp8)",
    ),
    "low_concurrency": (
        "the server has headroom: offer more load (more users) before sizing hardware",
        "if production traffic is already this high, raise --max-num-seqs / "
        "--max-num-batched-tokens so the scheduler batches more",
        "check the engine runs continuous batching with PagedAttention (vLLM's default)",
    ),
    "overloaded": (
        "cap concurrency at the recommended cap; queue or shed (HTTP 429) beyond it",
        "scale out (more server instances) before load reaches this level",
    ),
    "client_bound": (
        "add load-generator CPU: more Locust worker processes (--processes N) or hosts",
        "lighten the locustfile (no heavy per-request Python work); rerun: this stage's "
        "latencies include client delay",
    ),
    "errors": ("read the failures by kind below; fix them before reading performance numbers",),
    "healthy": ("no change needed at this load",),
    "insufficient_data": (
        "scrape the server's /metrics and a GPU exporter (locust-llm gpu-exporter) during the "
        "run, or pass --prometheus URL to the report",
        "run longer stages so each holds enough requests",
    ),
    "unstable": (
        "look for leaks or growing queues: KV-cache usage, preemptions and memory over time",
        "rerun the soak at the recommended cap; scale out if the drift persists",
    ),
}

ERROR_ACTIONS: dict[str, str] = {
    "http_429": "http_429: the server or a gateway rate-limits; raise its limits or offer less",
    "timeout": "timeout: requests outlive the client timeout; lower concurrency or raise it",
    "http_5xx": "http_5xx: server errors; read the server log",
    "http_4xx": "http_4xx: rejected requests (prompt too long? wrong model name?)",
    "connect": "connect: the server refuses or drops connections (crashed? listen backlog?)",
    "stream_broken": "stream_broken: streams cut mid-answer (server restarts, proxies)",
    "bad_payload": "bad_payload: chunks not in the OpenAI shape; check the endpoint",
    "oom": "oom: see memory_oom",
}


@dataclass(frozen=True)
class Verdict:
    """A diagnosis: what limits the server, the numbers that show it, what to do about it."""

    kind: str
    evidence: tuple[str, ...]
    actions: tuple[str, ...]
    stage: int | None = None  # stage index; None for the run as a whole

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "stage": self.stage,
            "evidence": list(self.evidence),
            "actions": list(self.actions),
        }


def _v(row: Mapping[str, Any], key: str) -> float:
    value = row.get(key, math.nan)
    return float(value) if is_num(value) else math.nan


def _has(row: Mapping[str, Any], key: str) -> bool:
    return not math.isnan(_v(row, key))


def _load(row: Mapping[str, Any]) -> float:
    c = _v(row, "concurrency")
    return c if not math.isnan(c) else _v(row, "rate")


def _where(row: Mapping[str, Any]) -> str:
    return f"at load {load_label(row.get('concurrency'), row.get('rate'))}"


def _lower_neighbour(row: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> Mapping | None:
    """The stage with the next-lower load (soak stages excluded), or None."""
    load = _load(row)
    lower = [
        r
        for r in rows
        if r.get("kind") != "soak"
        and not math.isnan(_load(r))
        and _load(r) < load
        and _v(r, "completed") > 0
    ]
    return max(lower, key=_load) if lower else None


def batch_limit(row: Mapping[str, Any], max_num_seqs: int | None) -> tuple[float, str]:
    """The batch the server could run: max_num_seqs, or the KV capacity running/usage implies."""
    limits: list[tuple[float, str]] = []
    if max_num_seqs:
        limits.append((float(max_num_seqs), f"max-num-seqs {max_num_seqs}"))
    running, kv = _v(row, "running"), _v(row, "kv_cache_usage")
    if running > 0 and kv > 0:
        cap = running / kv
        limits.append((cap, f"KV capacity ~{num(cap, 0)} sequences (running / KV usage)"))
    return min(limits) if limits else (math.nan, "")


def _phase(row: Mapping[str, Any], thresholds: Thresholds) -> tuple[str, str]:
    """('prefill_bound' | 'decode_bound', evidence) from TTFT's share of E2E latency."""
    ttft, e2e = _v(row, "ttft_avg_s"), _v(row, "latency_avg_s")
    share = ttft / e2e if e2e > 0 else math.nan
    tokens = (
        f"; {num(_v(row, 'input_tokens_avg'), 0)} input / "
        f"{num(_v(row, 'output_tokens_avg'), 0)} output tokens per request"
    )
    if not math.isnan(share) and share >= thresholds.prefill_share:
        text = (
            f"TTFT avg {ms(ttft)} ms is {pct(share)} of E2E avg {ms(e2e)} ms "
            f"(>= {pct(thresholds.prefill_share)}): prefill dominates{tokens}"
        )
        floor = _v(row, "ttft_floor_s")
        if not math.isnan(floor):
            text += f"; TTFT P50 {ms(_v(row, 'ttft_p50_s'))} ms vs roofline floor {ms(floor, 1)} ms"
        return "prefill_bound", text
    text = (
        f"TTFT avg {ms(ttft)} ms is {pct(share)} of E2E avg {ms(e2e)} ms: decode dominates, "
        f"TPOT avg {ms(_v(row, 'tpot_avg_s'), 1)} ms{tokens}"
    )
    floor = _v(row, "tpot_floor_s")
    if not math.isnan(floor):
        text += f"; roofline TPOT floor at this batch {ms(floor, 1)} ms"
    return "decode_bound", text


def _saturation(row: Mapping[str, Any], thresholds: Thresholds) -> list[str]:
    """Evidence strings for each saturated resource (empty: nothing saturated)."""
    found = []
    if _v(row, "gpu_util") >= thresholds.saturated_gpu_util:
        found.append(
            f"GPU utilization {pct(_v(row, 'gpu_util'))} >= {pct(thresholds.saturated_gpu_util)}"
        )
    for key, label in (
        ("dram_bw_util", "DRAM bandwidth utilization"),
        ("model_bw_util", "model bandwidth utilization (roofline / TPOT)"),
    ):
        if _v(row, key) >= thresholds.saturated_bw_util:
            found.append(f"{label} {pct(_v(row, key))} >= {pct(thresholds.saturated_bw_util)}")
    if _v(row, "kv_cache_usage_max") >= thresholds.saturated_kv:
        found.append(f"KV cache peaked at {pct(_v(row, 'kv_cache_usage_max'))}")
    if _v(row, "waiting") >= 1:
        found.append(f"{num(_v(row, 'waiting'))} requests waiting on average")
    return found


def _overload(
    row: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], thresholds: Thresholds
) -> list[str]:
    """Evidence that the stage is past the knee (empty: it is not)."""
    found = []
    prev = _lower_neighbour(row, rows)
    if prev is not None and row.get("kind") != "soak":
        gain = _v(row, "qps") / _v(prev, "qps") if _v(prev, "qps") > 0 else math.nan
        climb = (
            _v(row, "latency_p99_s") / _v(prev, "latency_p99_s")
            if _v(prev, "latency_p99_s") > 0
            else math.nan
        )
        if gain <= thresholds.flat_gain and climb >= thresholds.latency_climb:
            found.append(
                f"from load {load_label(prev.get('concurrency'), prev.get('rate'))} to "
                f"{load_label(row.get('concurrency'), row.get('rate'))} QPS went "
                f"{num(_v(prev, 'qps'))} -> {num(_v(row, 'qps'))} ({ratio(gain)}) while P99 "
                f"latency went {ms(_v(prev, 'latency_p99_s'))} -> "
                f"{ms(_v(row, 'latency_p99_s'))} ms ({ratio(climb)})"
            )
    waiting, running = _v(row, "waiting"), _v(row, "running")
    kv_full = _v(row, "kv_cache_usage_max") >= thresholds.saturated_kv or _v(row, "preemptions") > 0
    if waiting >= 1 and waiting >= 0.5 * (running if running > 0 else 0) and kv_full:
        found.append(
            f"standing queue: {num(waiting)} waiting vs {num(running)} running, KV cache max "
            f"{pct(_v(row, 'kv_cache_usage_max'))}, {num(_v(row, 'preemptions'), 0)} preemptions"
        )
    rate, qps = _v(row, "rate"), _v(row, "qps")
    if rate > 0 and qps < thresholds.open_loop_shortfall * rate:
        found.append(
            f"achieved {num(qps, 2)} req/s of {num(rate, 2)} req/s offered ({pct(qps / rate)})"
        )
    return found


def stage_verdict(
    row: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]] = (),
    *,
    thresholds: Thresholds = Thresholds(),
    max_num_seqs: int | None = None,
) -> Verdict:
    """The verdict for one stage; ``rows`` (all stages) give the lower-load neighbour."""
    stage = int(row["stage"]) if is_num(row.get("stage")) else None
    where = _where(row)

    def verdict(kind: str, evidence: list[str], extra: Sequence[str] = ()) -> Verdict:
        return Verdict(kind, tuple(evidence), (*ACTIONS[kind], *extra), stage)

    requests = _v(row, "requests")
    all_failed = _v(row, "completed") == 0 and error_rate_exceeded(
        _v(row, "error_rate"), thresholds
    )
    if not requests >= thresholds.min_requests and not all_failed:
        return verdict(
            "insufficient_data",
            [
                f"{num(requests if not math.isnan(requests) else 0)} requests {where} "
                f"(< {thresholds.min_requests})"
            ],
        )
    oom = _v(row, "error_rate_oom")
    if oom > 0:
        evidence = [
            f"{pct(oom, 1)} of requests {where} failed with out-of-memory "
            f"({num(round(oom * requests))} of {num(requests)})"
        ]
        for key, label in (
            ("gpu_mem_util_max", "GPU memory peaked at"),
            ("kv_cache_usage_max", "KV cache peaked at"),
        ):
            if _has(row, key):
                evidence.append(f"{label} {pct(_v(row, key))}")
        return verdict("memory_oom", evidence)
    cpu = _v(row, "worker_cpu_max")
    if cpu >= thresholds.client_cpu:
        who = row.get("worker_cpu_max_id") or "a worker"
        return verdict(
            "client_bound",
            [
                f"Locust worker {who} CPU peaked at {pct(cpu)} {where} "
                f"(>= {pct(thresholds.client_cpu)}): the load generator, not the server, "
                "limits this stage"
            ],
        )
    rate, limit = _v(row, "error_rate"), thresholds.error_rate
    if limit is not None and error_rate_exceeded(rate, thresholds):
        kinds = [(k, _v(row, f"error_rate_{k}")) for k in ERROR_KINDS]
        kinds = [(k, r) for k, r in kinds if r > 0]
        detail = ", ".join(f"{k} {pct(r, 1)}" for k, r in kinds)
        return verdict(
            "errors",
            [f"error rate {pct(rate, 1)} {where} > {pct(limit)} ({detail})"],
            [ERROR_ACTIONS[k] for k, _ in kinds if k in ERROR_ACTIONS],
        )
    if not any(_has(row, s) for s in SERVER_SIGNALS):
        evidence = [
            f"no server telemetry {where} (none of {', '.join(SERVER_SIGNALS)}): "
            "the bottleneck cannot be told from client timings",
            f"client timings {where}: QPS {num(_v(row, 'qps'))}, E2E avg "
            f"{ms(_v(row, 'latency_avg_s'))} ms (P99 {ms(_v(row, 'latency_p99_s'))} ms), "
            f"TTFT avg {ms(_v(row, 'ttft_avg_s'))} ms, TPOT avg "
            f"{ms(_v(row, 'tpot_avg_s'), 1)} ms",
        ]
        overload = _overload(row, rows, thresholds)
        if overload:
            evidence.append("client timings alone: " + "; ".join(overload))
        return verdict("insufficient_data", evidence)
    phase, phase_text = _phase(row, thresholds)
    overload = _overload(row, rows, thresholds)
    if overload:
        return verdict(
            "overloaded", [*overload, f"bottleneck phase: {phase_text}"], ACTIONS[phase][:2]
        )
    waiting, running = _v(row, "waiting"), _v(row, "running")
    limit, limit_text = batch_limit(row, max_num_seqs)
    no_queue = (
        not waiting >= thresholds.no_queue_waiting  # NaN waiting: no queue reported
        or waiting < min(1.0, thresholds.no_queue_share * running)
    )
    if no_queue:
        if not math.isnan(limit) and running <= thresholds.low_batch_fraction * limit:
            return verdict(
                "low_concurrency",
                [
                    f"batch {num(running)} running {where} is {pct(running / limit)} of its limit "
                    f"({limit_text}); <= {pct(thresholds.low_batch_fraction)}",
                    f"no queue: {num(waiting)} waiting; KV cache max "
                    f"{pct(_v(row, 'kv_cache_usage_max'))}",
                    f"QPS {num(_v(row, 'qps'))}, E2E avg {ms(_v(row, 'latency_avg_s'))} ms",
                ],
            )
        if math.isnan(limit) and _v(row, "gpu_util") < 0.5:
            return verdict(
                "low_concurrency",
                [
                    f"GPU utilization {pct(_v(row, 'gpu_util'))} {where} with no queue "
                    f"({num(waiting)} waiting)"
                ],
            )
    saturated = _saturation(row, thresholds)
    if saturated:
        return verdict(phase, [*saturated, phase_text])
    return verdict(
        "healthy",
        [
            f"nothing saturated {where}: GPU utilization {pct(_v(row, 'gpu_util'))}, KV cache max "
            f"{pct(_v(row, 'kv_cache_usage_max'))}, {num(waiting)} waiting; error rate "
            f"{pct(rate, 1)}"
        ],
    )


def stage_verdicts(
    rows: Sequence[Mapping[str, Any]],
    *,
    thresholds: Thresholds = Thresholds(),
    max_num_seqs: int | None = None,
) -> list[Verdict]:
    """One verdict per stage row, in the rows' order."""
    return [stage_verdict(r, rows, thresholds=thresholds, max_num_seqs=max_num_seqs) for r in rows]


def overall_verdict(
    rows: Sequence[Mapping[str, Any]],
    verdicts: Sequence[Verdict],
    *,
    cap_stage: int | None = None,
    thresholds: Thresholds = Thresholds(),
) -> Verdict:
    """The run's verdict from its stage verdicts (see the module docstring for the rule)."""
    by_stage = dict(zip([int(r["stage"]) for r in rows], verdicts, strict=True))
    for kind in ("memory_oom", "client_bound"):
        for v in verdicts:
            if v.kind == kind:
                return Verdict(kind, v.evidence, v.actions, None)
    usable = [
        r
        for r, v in zip(rows, verdicts, strict=True)
        if v.kind != "insufficient_data" or _v(r, "requests") >= thresholds.min_requests
    ]
    if not usable:
        evidence = [e for v in verdicts for e in v.evidence] or ["the run has no stages"]
        return Verdict("insufficient_data", tuple(evidence[:3]), ACTIONS["insufficient_data"])
    top = max(usable, key=lambda r: (_load(r) if not math.isnan(_load(r)) else -1, int(r["stage"])))
    chosen = by_stage[int(top["stage"])]
    evidence = list(chosen.evidence)
    actions = list(chosen.actions)
    if chosen.kind == "overloaded" and cap_stage is not None and cap_stage in by_stage:
        at_cap = by_stage[cap_stage]
        cap_row = next(r for r in rows if int(r["stage"]) == cap_stage)
        cap_load = load_label(cap_row.get("concurrency"), cap_row.get("rate"))
        evidence.append(
            f"at the recommended cap (load {cap_load}) the verdict is "
            f"{at_cap.kind}: " + "; ".join(at_cap.evidence)
        )
        actions += [a for a in at_cap.actions if a not in actions]
    return Verdict(chosen.kind, tuple(evidence), tuple(actions), None)
