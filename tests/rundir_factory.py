"""Synthetic run dirs in the contract format, for report tests and the report benchmark.

A stage is described by a :class:`StageSpec` (what the client and the telemetry would observe);
:func:`server_stage` derives one from a small closed-loop queueing + roofline-style model of a
continuous-batching server (:class:`ServerModel`): a decode step costs a fixed weight read plus a
KV read per sequence, prefill costs time per prompt token and is scheduled decode-first, the batch
is capped by max-num-seqs / KV capacity, and Little's law gives latency from throughput.
:func:`make_run` writes run.json, requests.parquet and telemetry.parquet for a list of specs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from locust_llm.metrics import RECORD_FIELDS, RequestRecord
from locust_llm.rundir.layout import REQUESTS_FILE, TELEMETRY_FILE, RunInfo, Stage, write_run_info

GIB = 1024**3
Z99 = 2.3263478740408408  # standard normal 99th percentile


@dataclass(frozen=True, kw_only=True)
class StageSpec:
    """What one stage looks like from outside: client-side numbers and mean telemetry."""

    concurrency: int
    qps: float  # completed requests per second
    e2e_mean_s: float
    e2e_p99_s: float
    ttft_share: float = 0.05  # mean TTFT / mean E2E
    input_tokens: int = 128
    output_tokens: int = 256
    errors: dict[str, float] = field(default_factory=dict)  # kind -> share of all requests
    gpu_util: float | None = None
    mem_util: float | None = None
    dram_bw: float | None = None
    kv: float | None = None
    running: float | None = None
    waiting: float | None = None
    worker_cpu: float | None = None
    preemptions_per_s: float = 0.0
    kind: str = "step"
    drift_pct_per_h: float = 0.0  # soak: E2E grows this much per hour


@dataclass(frozen=True, kw_only=True)
class ServerModel:
    """A continuous-batching server, in seconds per unit of work."""

    step_base_s: float = 0.016  # weights read once per decode step (7B fp16 on ~1 TB/s + waste)
    step_per_seq_s: float = 0.0004  # KV read per sequence per step
    prefill_s_per_token: float = 0.00006
    input_tokens: int = 128
    output_tokens: int = 256
    max_num_seqs: int = 64
    kv_tokens: float = 60000.0  # KV capacity in tokens
    mem_util: float = 0.88  # engines preallocate: near-constant
    cpu_per_rps: float = 0.02  # Locust worker CPU per request/s
    overload_penalty: float = 0.10  # throughput lost to preemption when the KV cache is full
    spread: float = 1.3  # E2E P99 / mean


def server_stage(m: ServerModel, c: int) -> StageSpec:
    """The closed-loop steady state of ``c`` users against ``m``."""
    kv_cap = int(m.kv_tokens // (m.input_tokens + m.output_tokens))
    b = max(1, min(c, m.max_num_seqs, kv_cap))
    step = m.step_base_s + m.step_per_seq_s * b
    p = m.input_tokens * m.prefill_s_per_token
    gpu_per_req = p + (m.output_tokens - 1) * step / b
    e2e0 = p + (m.output_tokens - 1) * step
    x = min(b / e2e0, 1 / gpu_per_req)
    full = c > kv_cap
    if full:
        x *= 1 - m.overload_penalty
    rho_p = x * p
    tpot = step * (1 + 0.5 * rho_p)  # prefill chunks ride on decode steps
    e2e = c / x  # Little's law
    ttft = max(p, e2e - (m.output_tokens - 1) * tpot)
    busy = min(1.0, x * gpu_per_req)
    running = min(float(c), x * (p + (m.output_tokens - 1) * tpot))
    return StageSpec(
        concurrency=c,
        qps=x,
        e2e_mean_s=e2e,
        e2e_p99_s=e2e * m.spread,
        ttft_share=ttft / e2e,
        input_tokens=m.input_tokens,
        output_tokens=m.output_tokens,
        gpu_util=0.99 * busy,
        mem_util=m.mem_util,
        dram_bw=0.85 * busy * (1 - rho_p),
        kv=min(1.0, running * (m.input_tokens + m.output_tokens / 2) / m.kv_tokens),
        running=running,
        waiting=max(0.0, c - running),
        worker_cpu=min(1.0, x * m.cpu_per_rps),
        preemptions_per_s=2.0 if full else 0.0,
    )


DECODE = ServerModel()
PREFILL = ServerModel(input_tokens=4000, output_tokens=16, prefill_s_per_token=0.0002)
SMALL_KV = ServerModel(kv_tokens=40 * 256, max_num_seqs=256)

#: The source document's example table: concurrency, QPS, avg ms, P99 ms, GPU util, mem util.
SEED_TABLE = (
    (1, 10, 100, 120, 0.30, 0.40),
    (10, 95, 105, 150, 0.85, 0.70),
    (50, 400, 125, 200, 0.95, 0.85),
    (100, 450, 222, 350, 0.98, 0.92),
    (200, 420, 476, 800, 0.99, 0.95),
)


def seed_specs(max_num_seqs: int = 128) -> list[StageSpec]:
    """Stages shaped like the seed's table (telemetry beside it from the same picture)."""
    out = []
    for c, qps, avg, p99, gpu, mem in SEED_TABLE:
        running = min(c, max_num_seqs)
        out.append(
            StageSpec(
                concurrency=c,
                qps=qps,
                e2e_mean_s=avg / 1e3,
                e2e_p99_s=p99 / 1e3,
                ttft_share=0.1,
                output_tokens=32,
                gpu_util=gpu,
                mem_util=mem,
                dram_bw=0.8 * gpu,
                kv=min(1.0, running / max_num_seqs),
                running=running,
                waiting=float(max(0, c - max_num_seqs)),
                worker_cpu=0.3,
            )
        )
    return out


def regime(name: str) -> tuple[list[StageSpec], dict]:
    """(stage specs, make_run keyword arguments) for a named regime."""
    if name == "decode":
        return [server_stage(DECODE, c) for c in (1, 16, 48)], {}
    if name == "prefill":
        return [server_stage(PREFILL, c) for c in (1, 2, 4)], {}
    if name == "oom":
        specs = [server_stage(DECODE, c) for c in (1, 16, 48)]
        specs[-1] = replace(specs[-1], errors={"oom": 0.05}, mem_util=0.97)
        return specs, {}
    if name == "low_concurrency":
        return ([server_stage(DECODE, c) for c in (1, 2, 4)], {"extra": {"max_num_seqs": 128}})
    if name == "overloaded":
        return [server_stage(SMALL_KV, c) for c in (8, 32, 128)], {}
    if name == "client_bound":
        return [server_stage(replace(DECODE, cpu_per_rps=0.19), c) for c in (1, 16, 48)], {}
    if name == "no_telemetry":
        return [server_stage(DECODE, c) for c in (1, 16, 48)], {"telemetry": False}
    if name == "seed":
        return seed_specs(), {"extra": {"max_num_seqs": 128}}
    raise ValueError(f"unknown regime {name!r}")


def _lognormal(rng: np.random.Generator, mean: float, p99: float, n: int) -> np.ndarray:
    """Lognormal samples with the given mean and 99th percentile."""
    ratio = max(p99 / mean, 1.0 + 1e-6)
    disc = Z99**2 - 2 * math.log(ratio)
    sigma = Z99 - math.sqrt(max(disc, 0.0))
    mu = math.log(mean) - sigma**2 / 2
    return rng.lognormal(mu, sigma, n)


def _records(spec: Stage, s: StageSpec, rng: np.random.Generator, workers: int) -> pd.DataFrame:
    lo, hi = spec.start_wall_s + spec.warmup_s, spec.end_wall_s
    n_ok = round(s.qps * (hi - lo))
    err_share = sum(s.errors.values())
    n_err = round(n_ok * err_share / (1 - err_share)) if err_share else 0
    n = n_ok + n_err
    start = np.sort(rng.uniform(lo, hi, n))
    e2e = _lognormal(rng, s.e2e_mean_s, s.e2e_p99_s, n)
    if s.drift_pct_per_h:
        e2e *= 1 + s.drift_pct_per_h / 100 * (start - lo) / 3600
    ok = np.ones(n, bool)
    kinds = np.full(n, "", dtype=object)
    fail = rng.permutation(n)[:n_err]
    ok[fail] = False
    names = [k for k, share in s.errors.items() for _ in range(round(n_err * share / err_share))]
    kinds[fail[: len(names)]] = names
    kinds[fail[len(names) :]] = next(iter(s.errors), "")
    ttft = e2e * s.ttft_share * rng.uniform(0.9, 1.1, n)
    ttft = np.minimum(ttft, e2e * 0.99)
    out_tok = np.full(n, s.output_tokens, dtype=np.int64)
    tpot = (e2e - ttft) / max(s.output_tokens - 1, 1)
    for arr in (ttft, tpot):
        arr[~ok] = np.nan
    frame = pd.DataFrame(
        {
            "request_id": [f"{spec.index}-{i}" for i in range(n)],
            "endpoint": "/v1/chat/completions",
            "model": "synthetic",
            "worker_id": [f"w{i % workers + 1}" for i in range(n)],
            "user_id": np.arange(n) % max(s.concurrency, 1),
            "stage": spec.index,
            "start_wall_s": start,
            "scheduled_wall_s": np.nan,
            "ok": ok,
            "status_code": np.where(ok, 200, 500),
            "error_kind": kinds,
            "error_message": "",
            "ttft_s": ttft,
            "ttfc_s": ttft,
            "e2e_s": e2e,
            "first_token_s": ttft,
            "last_token_s": np.where(ok, e2e, np.nan),
            "first_token_kernel_s": np.nan,  # a geventhttpclient run: no kernel stamps
            "last_token_kernel_s": np.nan,
            "first_token_user_s": ttft,
            "last_token_user_s": np.where(ok, e2e, np.nan),
            "tpot_s": tpot,
            "itl_mean_s": tpot,
            "itl_p50_s": tpot,
            "itl_p99_s": tpot * 1.5,
            "itl_max_s": tpot * 3,
            "chunks": np.where(ok, out_tok, 0),
            "input_tokens": s.input_tokens,
            "output_tokens": np.where(ok, out_tok, 0),
            "reasoning_tokens": 0,
            "tokens_estimated": False,
            "input_tokens_estimated": False,
        }
    )
    defaults = RequestRecord(request_id="", endpoint="").to_dict()
    for name in RECORD_FIELDS:  # fields the factory does not vary: the record's defaults
        if name not in frame:
            frame[name] = defaults[name]
    return frame[list(RECORD_FIELDS)]


def _telemetry(
    stage: Stage, s: StageSpec, rng: np.random.Generator, workers: int, interval_s: float
) -> list[pd.DataFrame]:
    t = np.arange(stage.start_wall_s, stage.end_wall_s, interval_s)
    n = t.size

    def noisy(value: float, scale: float = 0.01, clip: bool = True) -> np.ndarray:
        v = value + rng.normal(0, scale * max(abs(value), 1e-3), n)
        return np.clip(v, 0, 1) if clip else np.maximum(v, 0)

    parts = []

    def add(source: str, signal: str, gpu: str, values: np.ndarray) -> None:
        parts.append(
            pd.DataFrame(
                {"time_s": t, "source": source, "signal": signal, "gpu": gpu, "value": values}
            )
        )

    gpu_src, srv = "http://127.0.0.1:9400/metrics", "http://127.0.0.1:8000/metrics"
    if s.gpu_util is not None:
        add(gpu_src, "gpu_util", "0", noisy(s.gpu_util))
    if s.mem_util is not None:
        add(gpu_src, "mem_used_bytes", "0", noisy(s.mem_util, 0.002) * 24 * GIB)
        add(gpu_src, "mem_total_bytes", "0", np.full(n, 24.0 * GIB))
    if s.dram_bw is not None:
        add(gpu_src, "dram_bw_util", "0", noisy(s.dram_bw))
    if s.kv is not None:
        add(srv, "kv_cache_usage", "", noisy(s.kv))
    if s.running is not None:
        add(srv, "running", "", noisy(s.running, 0.02, clip=False))
    if s.waiting is not None:
        add(srv, "waiting", "", noisy(s.waiting, 0.02, clip=False))
    add(srv, "preemptions", "", (t - t[0]) * s.preemptions_per_s) if n else None
    if s.worker_cpu is not None:
        for w in range(workers):
            share = 1.0 if w == 0 else 0.6
            add(f"w{w + 1}", "worker_cpu_util", "", noisy(s.worker_cpu * share))
    return parts


def make_run(
    path: Path,
    specs: list[StageSpec],
    *,
    stage_s: float = 10.0,
    warmup_s: float = 0.0,
    telemetry: bool = True,
    interval_s: float = 1.0,
    gap: tuple[float, float] | None = None,
    workers: int = 2,
    extra: dict | None = None,
    roofline: dict | None = None,
    server_instances: int = 1,
    seed: int = 0,
    start_wall_s: float = 1_700_000_000.0,
) -> Path:
    """Write a run dir; ``gap`` = (from, to) seconds after the start with NaN telemetry."""
    rng = np.random.default_rng(seed)
    stages, t = [], start_wall_s
    for i, s in enumerate(specs):
        dur = stage_s if s.kind != "soak" else max(stage_s, 600.0)
        stages.append(
            Stage(
                index=i,
                name=f"stage-{i}",
                start_wall_s=t,
                end_wall_s=t + dur,
                concurrency=s.concurrency,
                warmup_s=warmup_s,
                kind=s.kind,
            )
        )
        t += dur
    info = RunInfo(
        run_id=path.name,
        model="synthetic",
        start_wall_s=start_wall_s,
        end_wall_s=t,
        workers=[f"w{i + 1}" for i in range(workers)],
        stages=stages,
        roofline=roofline or {},
        extra=extra or {},
        server_instances=server_instances,
    )
    write_run_info(path, info)
    reqs = pd.concat(
        [_records(st, s, rng, workers) for st, s in zip(stages, specs, strict=True)],
        ignore_index=True,
    )
    reqs.to_parquet(path / REQUESTS_FILE, index=False)
    if telemetry:
        tel = pd.concat(
            [
                p
                for st, s in zip(stages, specs, strict=True)
                for p in _telemetry(st, s, rng, workers, interval_s)
            ],
            ignore_index=True,
        )
        if gap is not None:
            rel = tel["time_s"] - start_wall_s
            tel.loc[(rel >= gap[0]) & (rel < gap[1]), "value"] = np.nan
        tel.to_parquet(path / TELEMETRY_FILE, index=False)
    return path


def counter_series(points: dict[str, list[tuple[float, str, float]]]) -> dict:
    """Telemetry series as the report's lookup holds them: signal -> (times, values, sources,
    GPU labels), from ``{signal: [(time_s, source, value), ...]}``."""
    out = {}
    for signal, rows in points.items():
        t = np.array([r[0] for r in rows], float)
        src = np.array([r[1] for r in rows], object)
        v = np.array([r[2] for r in rows], float)
        out[signal] = (t, v, src, np.array([""] * len(rows), object))
    return out
