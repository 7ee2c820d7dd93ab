"""Verdict accuracy against the simulator's ground truth, in virtual time.

A seeded random matrix of runs (model presets incl. MoE, GPUs, tensor-parallel degree, prompt
and output length distributions, closed and open loop, loads from far below to far above
capacity, KV budgets small enough to OOM or preempt) is played on the simulator's engine in
virtual time (:mod:`locust_llm.sim.virtual`), written as a real run dir and read by the report
(:func:`locust_llm.report.build.build_report`), exactly as ``locust-llm report`` reads it. The
engine's own steps and requests are recorded beside it (``step_record`` / ``request_times``,
the same lines ``--step-trace`` / ``--trace`` write) and :func:`locust_llm.sim.labels.ground_truth`
labels every stage window. Per stage it compares:

- the verdict's cause (the limiting resource and mechanism) with the ground-truth label;
- the named phase (prefill / decode / admission) against the trace's time split: a
  ``prefill`` cause when the requests spent longer decoding than waiting for their first
  token, with a queue-free TTFT, is a contradiction, and so is a ``decode`` cause on a stage
  whose TTFT was mostly queue;
- the report's TTFT split (queue, prefill) with the trace's means.

Every stage whose window holds ``MIN_REQUESTS`` requests sent is judged, whatever its verdict:
one that names no resource there (an abstention) is a miss. Fewer sent: left out and counted.
Accuracy is given for the cause, for kind and cause together, per ground-truth class and per
confidence level (what ``high`` / ``medium`` / ``low`` are worth).

``python bench/verdict_accuracy.py [--runs N] [--seed S[,S..]] [--out FILE] [--dump FILE]``
writes ``bench/results/verdict_accuracy.md`` (command, machine, date, confusion matrix, misses);
without ``--seed`` it draws three seeds fresh and writes them in the command, which reruns them.
``--dump`` writes every stage as one JSON line: the verdict, the truth's shares and the row's
resource model side by side (what the fitting figures of docs/report.md were read from).
:func:`run_matrix` with a small ``runs`` is the regression test's fixed subset
(``tests/test_verdict_accuracy.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from busy_host import busy_host, load_average

from locust_llm.report.build import build_report
from locust_llm.report.diagnosis.thresholds import Thresholds, error_rate_exceeded
from locust_llm.report.load import load_run
from locust_llm.roofline.floors import get_gpu, get_model
from locust_llm.sim import virtual
from locust_llm.sim.config import SimConfig
from locust_llm.sim.engine import Engine, RequestTooLarge, StepResult, kv_blocks_for
from locust_llm.sim.labels import LABELS, ground_truth, ttft_split_of_arrivals
from locust_llm.sim.trace import request_times, step_record
from locust_llm.workloads.stages import StagePlan

ROOT = Path(__file__).resolve().parent.parent
RESULT = ROOT / "bench" / "results" / "verdict_accuracy.md"
MIN_REQUESTS = 10
BASE_WALL_S = 1_000_000.0  # virtual runs start here, so engine time + this = wall time

#: (model, GPU, tp) combinations that fit; MoE included.
DEPLOYMENTS: tuple[tuple[str, str, int], ...] = (
    ("mistral-7b", "rtx4090", 1),
    ("mistral-7b", "l4", 1),
    ("llama-3.1-8b", "a100-80gb", 1),
    ("llama-3.1-8b", "h100-sxm", 1),
    ("qwen2.5-7b", "l40s", 1),
    ("qwen2.5-0.5b", "a10", 1),
    ("llama-3.1-70b", "h100-sxm", 4),
    ("llama-3.1-70b", "a100-80gb", 2),
    ("mixtral-8x7b", "h100-sxm", 2),
    ("mixtral-8x7b", "h200", 1),
    ("qwen2.5-72b", "h200", 2),
    ("llama-3.1-70b", "h100-sxm", 8),
    ("qwen2.5-72b", "a100-80gb", 8),
)
#: prompt lengths, up to 32k tokens (the long ones capped below --max-model-len)
INPUT_LENS = ("128", "uniform:64:512", "1024", "lognormal:2000:0.6", "4096",
              "uniform:8192:16384", "uniform:16384:32000")  # fmt: skip
#: with the prefix cache on, half the cases send prompts that share prefixes (the cache serves
#: them) and half distinct prompts (it serves nothing)
SHARED_PREFIXES = ("shared-prefix:groups=1,prefix=1024,suffix=64",
                   "shared-prefix:groups=4,prefix=2048,suffix=256",
                   "shared-prefix:groups=16,prefix=512,suffix=512")  # fmt: skip
OUTPUT_LENS = ("32", "uniform:64:256", "256", "lognormal:400:0.5")


class RecordingEngine(Engine):
    """The engine, keeping each step's trace line and each ended request's times."""

    steps_seen: list[dict[str, Any]]
    requests_seen: list[dict[str, Any]]

    def add(self, *args: Any, **kw: Any) -> Any:
        """The engine's own refusals (a request that cannot fit alone), as the real server's
        trace writes them: outcome ``rejected``."""
        try:
            return super().add(*args, **kw)
        except RequestTooLarge:
            arrival = kw.get("arrival_s")
            self.requests_seen.append(
                {"arrival": BASE_WALL_S + (self.clock_s if arrival is None else arrival),
                 "outcome": "rejected"}
            )  # fmt: skip
            raise

    def step(self, start_s: float | None = None) -> StepResult:
        if not hasattr(self, "steps_seen"):
            self.steps_seen, self.requests_seen = [], []
        result = super().step(start_s)
        self.steps_seen.append(step_record(result, clock_offset_s=BASE_WALL_S))
        for req in (*result.finished, *result.failed):
            self.requests_seen.append(
                {
                    **request_times(req, clock_offset_s=BASE_WALL_S),
                    "outcome": req.outcome,
                    "tokens_sent": req.generated,
                    "prompt_tokens": req.prompt_tokens,
                    "cached_tokens": req.cached_tokens,
                }
            )
        return result


@contextmanager
def recording_engine() -> Iterator[list[RecordingEngine]]:
    """Make :func:`virtual.simulate` build a :class:`RecordingEngine` (yields the built ones)."""
    built: list[RecordingEngine] = []
    original = virtual.Engine

    def make(*args: Any, **kw: Any) -> RecordingEngine:
        engine = RecordingEngine(*args, **kw)
        engine.steps_seen, engine.requests_seen = [], []
        built.append(engine)
        return engine

    virtual.Engine = make  # type: ignore[assignment,misc]
    try:
        yield built
    finally:
        virtual.Engine = original  # type: ignore[misc]


def traced_report(
    config: SimConfig, workload: virtual.VirtualWorkload, run_dir: Path
) -> tuple[Any, RecordingEngine]:
    """Play ``workload`` on virtual time, write it as a run dir at ``run_dir`` and read the
    report of it as ``locust-llm report`` does; with the engine whose steps and requests were
    recorded (the ground truth's traces)."""
    with recording_engine() as built:
        run = virtual.simulate(config, workload, start_wall_s=BASE_WALL_S)
    report = build_report(
        load_run(virtual.write_run_dir(run, run_dir)), model=config.model, gpu=config.gpu
    )
    return report, built[-1]


def stage_window(row: Any) -> tuple[float, float]:
    """A stage row's window ``[lo, hi)`` in wall time."""
    hi = float(row["end_wall_s"])
    return hi - float(row["duration_s"]), hi


def sent_in_window(requests: Any, lo: float, hi: float) -> int:
    """Requests the server saw arrive in ``[lo, hi)`` (the traces' request lines): a stage is
    judged when at least :data:`MIN_REQUESTS` did."""
    return sum(1 for r in requests if lo <= float(r.get("arrival") or math.nan) < hi)


def stage_truth(engine: RecordingEngine, row: Any) -> Any:
    """The ground truth of a stage row's window, from the engine's recorded traces."""
    lo, hi = stage_window(row)
    return ground_truth(engine.steps_seen, engine.requests_seen, start_s=lo, end_s=hi)


@dataclass(frozen=True)
class Case:
    """One random run of the matrix."""

    index: int
    config: SimConfig
    workload: virtual.VirtualWorkload

    def describe(self) -> str:
        c, w = self.config, self.workload
        loads = ",".join(
            f"{s.rate:g}/s" if s.rate is not None else str(s.concurrency) for s in w.stages
        )
        extra = " oom" if c.oom else ""
        extra += f" blocks={c.num_gpu_blocks_override}" if c.num_gpu_blocks_override else ""
        extra += " cache=on" if c.enable_prefix_caching else ""
        prompts = f"in={w.dataset}" if w.dataset else f"in={w.input_len}"
        return (
            f"{c.model}/{c.gpu}/tp{c.tp} {prompts} out={w.max_tokens} "
            f"seqs={c.max_num_seqs} mbt={c.max_num_batched_tokens}{extra} loads={loads}"
        )


def make_case(index: int, rng: random.Random) -> Case:
    """A random configuration: deployment, lengths, limits and a load sweep."""
    model, gpu, tp = rng.choice(DEPLOYMENTS)
    config = SimConfig(
        model=model,
        gpu=gpu,
        tp=tp,
        max_num_seqs=rng.choice((8, 32, 64, 128, 256)),
        max_num_batched_tokens=rng.choice((2048, 8192, 16384)),
        enable_prefix_caching=rng.random() < 0.5,
        seed=rng.randrange(1 << 30),
    )
    if rng.random() < 0.2:  # a small KV budget: admission by KV capacity, preemptions or OOM
        config = replace(config, num_gpu_blocks_override=rng.choice((64, 256, 1024)))
        config = replace(config, oom=rng.random() < 0.3)
    # as an operator does when vLLM refuses to start (its KV cache cannot hold one sequence of
    # the default --max-model-len): --max-model-len lowered to what the cache holds
    holds = kv_blocks_for(replace(config, max_model_len=1), get_model(model), get_gpu(gpu))
    config = replace(config, max_model_len=min(config.max_model_len, holds * config.block_size))
    input_len, max_tokens = rng.choice(INPUT_LENS), rng.choice(OUTPUT_LENS)
    shared = config.enable_prefix_caching and rng.random() < 0.5
    dataset = rng.choice(SHARED_PREFIXES) if shared else ""
    open_loop = rng.random() < 0.35
    if open_loop:
        top = rng.choice((1.0, 4.0, 16.0, 64.0))
        rates = sorted({round(top * f, 3) for f in (0.05, 0.25, 1.0, 4.0)})
        stages = tuple(StagePlan(rate=r, duration_s=20.0) for r in rates)
    else:
        top = rng.choice((8, 32, 128, 512))
        users = sorted({max(1, round(top * f)) for f in (1 / 32, 1 / 8, 1 / 2, 1, 2)})
        stages = tuple(
            StagePlan(concurrency=u, requests=max(20, 2 * u), duration_s=40.0) for u in users
        )
    workload = virtual.VirtualWorkload(
        stages=stages,
        input_len=input_len,
        max_tokens=max_tokens,
        dataset=dataset,
        ignore_eos=rng.random() < 0.5,
        seed=rng.randrange(1 << 30),
        stop_timeout_s=5.0,
        scrape_interval_s=float(VIRTUAL_SCRAPE_S),
    )
    return Case(index, config, workload)


#: Telemetry scrape interval of the virtual runs (virtual seconds). A closed-loop stage of the
#: matrix is a few dozen requests (0.5-3 s at the faster configurations): the server's phase
#: sums split a stage's TTFT only when scrapes fall inside it, as in the end-to-end runs below.
VIRTUAL_SCRAPE_S = "0.25"


@dataclass(frozen=True)
class StageResult:
    """One judged stage: ground truth against the report."""

    case: int
    stage: int
    label: str
    cause: str
    kind: str
    judged: bool
    truth_kind: str  # the ground truth's verdict kind (the source document's vocabulary)
    why_not: str
    contradiction: str
    queue_err: float  # |report queue share of TTFT - trace queue share|
    prefill_err: float
    description: str
    confidence: str = ""  # the verdict's confidence (high / medium / low)
    rule: str = ""  # the verdict rule that decided
    seed: int = -1  # the matrix's seed (-1: an end-to-end run)
    # the ground truth's shares and times, the report row's :data:`DUMPED` columns (``--dump``;
    # not compared, so a result stays hashable)
    truth: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    row: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


def _phase_contradiction(cause: str, truth: Any) -> str:
    """The named phase against the trace's time split ("" when consistent)."""
    ttft = truth.ttft_queue_s + truth.ttft_prefill_s
    if not (ttft > 0 and truth.decode_s > 0):
        return ""
    queue_share = truth.ttft_queue_s / ttft
    if cause in ("compute_bound_prefill",) and truth.decode_s > 2 * ttft:
        return f"prefill named, but decode {truth.decode_s:.3f}s > 2 x TTFT {ttft:.3f}s"
    if cause.endswith("_decode") and queue_share > 0.8 and ttft > truth.decode_s:
        return f"decode named, but TTFT {ttft:.3f}s is {queue_share:.0%} queue and > decode"
    return ""


def run_case(case: Case, work: Path, withhold_phases: bool = False) -> list[StageResult]:
    """Play one case, build its report, judge each stage (``withhold_phases``: the server's
    phase sums left out of the telemetry, as from a server that exports none: the report's
    time split is then its model's)."""
    try:
        with recording_engine() as built:
            run = virtual.simulate(case.config, case.workload, start_wall_s=BASE_WALL_S)
    except Exception as exc:  # a config the simulator refuses: reported, not judged
        return [
            StageResult(case.index, -1, "", "", "", False, "", f"refused: {exc}", "", math.nan,
                        math.nan, case.describe())
        ]  # fmt: skip
    engine = built[-1]
    if withhold_phases:
        kept = [row for row in run.telemetry if not row[2].startswith("phase_")]
        run = replace(run, telemetry=kept)
    run_dir = virtual.write_run_dir(run, work / f"case{case.index}")
    report = build_report(load_run(run_dir), model=case.config.model, gpu=case.config.gpu)
    return judge(report, engine.steps_seen, engine.requests_seen, case.index, case.describe())


#: What each confidence level should be worth (issue 26: monotone, measured here).
CONFIDENCE_TARGETS: dict[str, str] = {"high": ">= 95%", "medium": ">= 80%", "low": "none"}

#: Verdict kinds judged beside the causes: the stage failed, and the traces say so.
FAILURE_NAMES: tuple[str, ...] = ("memory_oom", "errors")
NAMES: tuple[str, ...] = (*LABELS, *FAILURE_NAMES)


def failure_truth(requests: list[dict], lo: float, hi: float) -> str:
    """``memory_oom`` when a request that arrived in ``[lo, hi)`` ended out of memory;
    ``errors`` when the share the server failed (an injected fault ended it, or it was
    rejected) is above the report's error-rate threshold; else "" (the label decides)."""
    arrived = [r for r in requests if lo <= float(r.get("arrival") or math.nan) < hi]
    if any(r.get("outcome") == "oom" for r in arrived):
        return "memory_oom"
    failed = sum(
        1 for r in arrived if str(r.get("outcome", "")).startswith("fault:")
        or r.get("outcome") == "rejected"
    )  # fmt: skip
    return "errors" if arrived and error_rate_exceeded(failed / len(arrived), Thresholds()) else ""


def _truth_kind(label: str, truth: Any) -> str:
    """The verdict kind the ground truth calls for: a failure's own name, else the traces'."""
    return label if label in FAILURE_NAMES else str(truth.verdict_kind)


def named(verdict: Any) -> str:
    """What the verdict names: its cause, or its kind when the stage failed."""
    return verdict.cause or (verdict.kind if verdict.kind in FAILURE_NAMES else "")


#: The report row's columns ``--dump`` writes beside the truth (the verdict's inputs).
DUMPED: tuple[str, ...] = (
    "concurrency", "rate", "requests", "ttft_avg_s", "queue_avg_s", "decode_avg_s",
    "tpot_avg_s", "itl_p50_s", "decode_stall_share", "prefill_token_share",
    "compute_time_share", "memory_time_share", "host_time_share", "prompt_step_share",
    "first_token_step_share", "step_bound", "decode_step_bound", "mfu", "mbu",
    "input_tokens_avg", "cached_tokens_avg", "output_tokens_avg", "served_ttft_avg_s",
    "served_decode_avg_s", "served_tpot_avg_s", "running", "running_busy", "waiting",
    "kv_cache_usage_max",
)  # fmt: skip


def _plain(value: Any) -> Any:
    """A row cell or a truth's field as JSON holds it (NaN as null; a mapping field by field)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) else None


def judge(
    report: Any, steps: list[dict], requests: list[dict], case: int, description: str
) -> list[StageResult]:
    """Each stage of ``report`` against the ground truth of the traces."""
    out = []
    for row, verdict in zip(report.rows, report.verdicts, strict=True):
        lo, hi = stage_window(row)
        truth = ground_truth(steps, requests, start_s=lo, end_s=hi)
        label = failure_truth(requests, lo, hi) or truth.label
        # judged: every stage that sent enough requests (the server's arrivals in the window),
        # whatever the verdict says; a verdict that names no resource there is a miss (an
        # abstention), never left out of the denominator
        sent = sent_in_window(requests, lo, hi)
        judged, why = True, ""
        if sent < MIN_REQUESTS:
            judged, why = False, f"{sent} requests sent in the window"
        # the split of the same requests the row describes (those sent in the window: the
        # trace's arrivals in it), as shares of TTFT (the client's TTFT adds its own time)
        split = ttft_split_of_arrivals(requests, lo, hi)
        ttft = split.queue_s + split.prefill_s
        ours = float(row["ttft_avg_s"])
        q_err = math.nan
        if ttft > 0 and ours > 0:
            q_err = abs(float(row["queue_avg_s"]) / ours - split.queue_s / ttft)
        out.append(
            StageResult(
                case=case,
                stage=int(row["stage"]),
                label=label,
                cause=named(verdict),
                kind=verdict.kind,
                judged=judged,
                truth_kind=_truth_kind(label, truth),
                why_not=why,
                contradiction=_phase_contradiction(verdict.cause, truth) if judged else "",
                queue_err=q_err,
                prefill_err=q_err,  # queue + prefill = TTFT on both sides
                description=description,
                confidence=verdict.confidence,
                rule=verdict.rule,
                truth=_plain(truth.as_dict()),
                row={k: _plain(row.get(k)) for k in DUMPED},
            )
        )
    return out


#: 1-minute load averages sampled before and after each end-to-end run.
E2E_LOAD_AVERAGES: list[float] = []
BUSY_NOTE = "beside processes spinning on the cores: `--e2e-busy`"

#: End-to-end configurations: (sim flags, run flags), each a short sweep through the real client.
E2E_SIMS: tuple[tuple[str, ...], ...] = (
    ("--model", "qwen2.5-0.5b", "--gpu", "a10", "--max-num-seqs", "4"),
    ("--model", "qwen2.5-0.5b", "--gpu", "a10", "--max-num-seqs", "64"),
    ("--model", "mistral-7b", "--gpu", "h100-sxm", "--max-num-seqs", "16"),
    ("--model", "mistral-7b", "--gpu", "h100-sxm", "--num-gpu-blocks-override", "64"),
    ("--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--max-num-batched-tokens", "2048"),
    # seeded faults: 10% answered 500 (truth: errors), 8% cut after 4 tokens (errors), 5%
    # stalled 0.3 s after the first token but finished (not failures: truth is the resource)
    ("--model", "qwen2.5-0.5b", "--gpu", "a10", "--max-num-seqs", "64", "--fault", "http500:0.1"),
    ("--model", "mistral-7b", "--gpu", "h100-sxm", "--max-num-seqs", "16",
     "--fault", "disconnect:0.08:4"),
    ("--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--fault", "stall:0.05:0.3"),
)  # fmt: skip
#: Telemetry scrape interval of the end-to-end runs: their stages last a few seconds, and the
#: verdict uses no server signal with fewer than 3 samples in a stage (a user's stages are
#: longer; a 1 s interval would leave these to client-side evidence only).
E2E_SCRAPE_S = "0.25"
E2E_LOADS: tuple[tuple[str, ...], ...] = (
    ("--concurrency", "2,8", "--stage-requests", "12,40"),
    ("--concurrency", "4,24", "--stage-requests", "16,60"),
    ("--rate", "2,12", "--stage-duration", "5"),
    ("--concurrency", "1,16", "--stage-requests", "10,48"),
)
E2E_LENGTHS: tuple[tuple[str, ...], ...] = (
    ("--input-len", "64", "--max-tokens", "uniform:16,48"),
    ("--input-len", "1024", "--max-tokens", "16"),
)


def e2e_case(index: int, rng: random.Random) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(sim flags, run flags) of end-to-end run ``index``."""
    sim = rng.choice(E2E_SIMS)
    return sim, (*rng.choice(E2E_LOADS), *rng.choice(E2E_LENGTHS))


def run_e2e(index: int, sim: tuple[str, ...], load: tuple[str, ...], work: Path) -> list:
    """One real run: ``locust-llm sim`` with its traces, ``locust-llm run`` through the real
    client (Locust), the report, each stage judged against the traces' ground truth."""
    import subprocess

    from locust_llm.launch.sweep import simulator
    from locust_llm.sim.trace import read_trace

    trace, steps = work / f"e2e{index}.trace", work / f"e2e{index}.steps"
    run_dir = work / f"e2e{index}"
    flags = [*sim, "--seed", str(index), "--trace", str(trace), "--step-trace", str(steps)]
    with simulator(flags, work / f"e2e{index}.log") as url:
        out = subprocess.run(
            [sys.executable, "-m", "locust_llm.cli", "run", "--host", url, *load, "--workers",
             "0", "--out", str(run_dir), "--quiet", "--stop-timeout", "5",
             "--llm-scrape-interval", E2E_SCRAPE_S],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    if out.returncode not in (0, 3):
        return [StageResult(index, -1, "", "", "", False, "", f"run failed: {out.stderr[-200:]}",
                            "", math.nan, math.nan, " ".join((*sim, *load)))]  # fmt: skip
    model, gpu = sim[1], sim[3]
    report = build_report(load_run(run_dir), model=model, gpu=gpu)
    return judge(report, read_trace(steps), read_trace(trace), index, " ".join((*sim, *load)))


def run_matrix(runs: int, seed: int = 0, withhold_phases: bool = False) -> list[StageResult]:
    """Every stage of ``runs`` random cases drawn from ``seed``."""
    rng = random.Random(seed)
    cases = [make_case(i, rng) for i in range(runs)]
    results: list[StageResult] = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            results += run_case(case, Path(tmp), withhold_phases)
    return [replace(r, seed=seed) for r in results]


def write_dump(results: list[StageResult], path: Path) -> None:
    """Every stage of ``results`` as a JSON line (``--dump``)."""
    with path.open("w") as out:
        for result in results:
            out.write(json.dumps(asdict(result), sort_keys=True) + "\n")


def read_dump(path: Path) -> list[StageResult]:
    """The stages a ``--dump`` file holds (:func:`write_dump`), as they were scored."""
    return [StageResult(**json.loads(line)) for line in path.read_text().splitlines()]


def summary(results: list[StageResult]) -> dict[str, Any]:
    """Accuracy, contradictions and TTFT split errors over the judged stages."""
    judged = [r for r in results if r.judged]
    right = [r for r in judged if r.cause == r.label]
    kind_right = [r for r in right if r.kind == r.truth_kind]
    split = [r for r in judged if math.isfinite(r.queue_err)]
    within = [r for r in split if r.queue_err <= 0.10 and r.prefill_err <= 0.10]
    by_class = Counter(r.label for r in judged)
    right_by_class = Counter(r.label for r in right)
    by_level = Counter(r.confidence for r in judged)
    right_by_level = Counter(r.confidence for r in kind_right)
    kind_right_by_class = Counter(r.label for r in kind_right)
    return {
        "stages": len(results),
        "judged": len(judged),
        "right": len(right),
        "abstained": sum(1 for r in judged if not r.cause),
        "accuracy": len(right) / len(judged) if judged else math.nan,
        "kind_and_cause": len(kind_right) / len(judged) if judged else math.nan,
        "per_class": {c: (right_by_class[c], n) for c, n in sorted(by_class.items())},
        "kind_per_class": {c: (kind_right_by_class[c], n) for c, n in sorted(by_class.items())},
        "kind_right": len(kind_right),
        # kind and cause right, per confidence level (what each level is worth)
        "per_confidence": {
            level: (right_by_level[level], by_level[level])
            for level in ("high", "medium", "low")
            if by_level[level]
        },
        "contradictions": sum(1 for r in judged if r.contradiction),
        "split_within_10pct": len(within) / len(split) if split else math.nan,
        "split_stages": len(split),
    }


def confusion(results: list[StageResult]) -> list[str]:
    """A markdown confusion matrix: ground-truth label (rows) x named cause (columns)."""
    judged = [r for r in results if r.judged]
    counts = Counter((r.label, r.cause) for r in judged)
    failures = [n for n in FAILURE_NAMES if any(n in (r.label, r.cause) for r in judged)]
    causes = [*LABELS, *failures]
    lines = [
        "| truth \\ verdict | " + " | ".join(causes) + " |",
        "|---|" + "---:|" * len(causes),
    ]
    for label in causes:
        cells = [str(counts.get((label, c), 0)) for c in causes]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def seed_table(by_seed: dict[int, list[StageResult]]) -> list[str]:
    """A markdown table, one column per seed and one for all of them together: kind and cause
    right overall, per class (with each class's stage count) and per confidence level,
    abstentions counted as misses."""
    sums: dict[Any, dict[str, Any]] = {seed: summary(results) for seed, results in by_seed.items()}
    sums["all"] = summary([r for results in by_seed.values() for r in results])

    def cell(pair: tuple[int, int] | None) -> str:
        return f"{pair[0]} / {pair[1]} = {pair[0] / pair[1]:.1%}" if pair and pair[1] else "-"

    classes = sorted({c for s in sums.values() for c in s["kind_per_class"]})
    levels = [lv for lv in ("high", "medium", "low") if any(lv in s["per_confidence"] for s in
                                                             sums.values())]  # fmt: skip
    lines = [
        "| measure | "
        + " | ".join(f"seed {seed}" if seed != "all" else "all seeds" for seed in sums)
        + " | target |",
        "|---|" + "---:|" * len(sums) + "---:|",
        "| kind and cause right | "
        + " | ".join(cell((s["kind_right"], s["judged"])) for s in sums.values())
        + " | >= 95% |",
        "| abstentions (counted as misses) | "
        + " | ".join(str(s["abstained"]) for s in sums.values())
        + " | |",
    ]
    lines += [
        f"| class `{c}` | "
        + " | ".join(cell(s["kind_per_class"].get(c)) for s in sums.values())
        + " | >= 90% |"
        for c in classes
    ]
    lines += [
        f"| confidence `{lv}` | "
        + " | ".join(cell(s["per_confidence"].get(lv)) for s in sums.values())
        + f" | {CONFIDENCE_TARGETS[lv]} |"
        for lv in levels
    ]
    return lines


def write_markdown(
    results: list[StageResult],
    command: str,
    seconds: float,
    out: Path,
    e2e: list[StageResult] | None = None,
    model_split: list[StageResult] | None = None,
    by_seed: dict[int, list[StageResult]] | None = None,
) -> None:
    s = summary(results)
    skipped = Counter(r.why_not.split(":")[0].split(" names")[0] for r in results if not r.judged)
    misses = [r for r in results if r.judged and (r.cause != r.label or r.kind != r.truth_kind)][
        :25
    ]
    lines = [
        "# Verdict accuracy against the simulator's ground truth",
        "",
        f"Machine: `nproc` = 2, {platform.machine()}, Python {platform.python_version()}, shared "
        f"with other jobs. Date: {time.strftime('%Y-%m-%d', time.gmtime())}. This file took "
        f"{seconds:.0f} s to measure.",
        "",
        "```",
        command,
        "```",
        "",
        f"{s['stages']} stages, {s['judged']} judged: every stage whose window holds >= "
        f"{MIN_REQUESTS} requests sent (the server's arrivals), whatever its verdict; a verdict "
        f"that names no resource there is a miss, an abstention ({s['abstained']} here), never "
        "left out; failures (`memory_oom`, `errors`) are judged against the traces' outcomes. "
        "Target: >= 95% name the right limiting resource and the right kind (the source "
        "document's vocabulary: prefill_bound, decode_bound, overloaded, low_concurrency ..., "
        "against the kind the traces call for); no contradicted phase; TTFT split within 10% of "
        "the trace's. Each confidence level's row is the share of its verdicts with kind and "
        "cause right (issue 26: high >= 95%, medium >= 80%).",
        "",
        "| measure | value | target |",
        "|---|---:|---:|",
        f"| right limiting resource (abstentions counted as misses) | {s['right']} / "
        f"{s['judged']} = {s['accuracy']:.1%} | >= 95% |",
        f"| right kind and cause (abstentions counted as misses) | {s['kind_right']} / "
        f"{s['judged']} = {s['kind_and_cause']:.1%} | >= 95% |",
        *(
            f"| class `{c}`: right cause; kind and cause | {k} / {n} = {k / n:.1%}; "
            f"{s['kind_per_class'][c][0]} / {n} = {s['kind_per_class'][c][0] / n:.1%} | >= 90% |"
            for c, (k, n) in s["per_class"].items()
        ),
        *(
            f"| confidence `{level}`: kind and cause right | {k} / {n} = {k / n:.1%} | "
            f"{CONFIDENCE_TARGETS[level]} |"
            for level, (k, n) in s["per_confidence"].items()
        ),
        f"| phase contradicting the trace's time split | {s['contradictions']} | 0 |",
        f"| TTFT split (queue and prefill) within 10% of TTFT | {s['split_within_10pct']:.1%} "
        f"of {s['split_stages']} | 100% |",
        "",
        "Confusion matrix (rows: ground-truth label, columns: the verdict's cause):",
        "",
        *confusion(results),
        "",
        "Stages not judged: "
        + (", ".join(f"{k} ({v})" for k, v in skipped.most_common()) or "none")
        + ".",
        "",
        "First misses, of the cause or the kind (case, stage, truth (its kind) -> verdict "
        "(its kind, rule, confidence), configuration):",
        "",
        *(
            f"- case {r.case} stage {r.stage}: {r.label} ({r.truth_kind}) -> {r.cause} "
            f"({r.kind}, {r.rule}, {r.confidence}); {r.description}"
            for r in misses
        ),
        "",
    ]
    if not results:  # --runs 0: the end-to-end runs alone, under the header and the command
        lines = lines[: lines.index("```", lines.index("```") + 1) + 2]
    if by_seed and len(by_seed) > 1:
        lines += [
            "## Every seed of the command",
            "",
            "The tables above are the first seed's; each seed here is its own matrix of "
            "random cases, and the last column pools them (kind and cause right, abstentions "
            "counted as misses):",
            "",
            *seed_table(by_seed),
            "",
        ]
    if model_split:
        m = summary(model_split)
        lines += [
            "## The time split's model, without the server's phase sums",
            "",
            f"The first {len({r.case for r in model_split})} cases again, with the server's "
            "phase sums left out of the telemetry (as from a server that exports none, such as "
            "llama.cpp): the report splits TTFT by its model (roofline prefill at an efficiency "
            "calibrated on the lowest load). TTFT split within 10% of the trace's: "
            f"{m['split_within_10pct']:.1%} of {m['split_stages']} stages; right limiting "
            f"resource {m['right']} / {m['judged']} = {m['accuracy']:.1%}, "
            f"{m['contradictions']} phase contradictions.",
            "",
        ]
    if e2e:
        t = summary(e2e)
        server_limits = [r for r in e2e if r.judged and r.label not in ("errors",)]
        client = [r for r in server_limits if r.kind == "client_bound"]
        loads = E2E_LOAD_AVERAGES or [math.nan]
        loaded = [
            f"Host 1-minute load average {min(loads):.1f}-{max(loads):.1f} on "
            f"{os.cpu_count()} cores during these runs"
            + (f" ({BUSY_NOTE})" if "--e2e-busy" in command else "")
            + f"; `client_bound` headlines on stages whose truth is a server limit: "
            f"**{len(client)} / {len(server_limits)}** (target 0).",
            "",
        ]
        lines += [
            "## End to end through the real client",
            "",
            *loaded,
            f"{len({r.case for r in e2e})} runs of `locust-llm sim --trace --step-trace` + "
            "`locust-llm run` (Locust, one process, telemetry every "
            f"{E2E_SCRAPE_S} s) + the report, each stage judged against the traces; the "
            "simulator's `--max-num-seqs` is not given to the run (the report reads it from "
            "the gauges, or not at all), and some runs carry seeded faults (`--fault`): "
            f"{t['stages']} stages, {t['judged']} judged, right limiting resource "
            f"{t['right']} / {t['judged']} = {t['accuracy']:.1%}, {t['contradictions']} phase "
            f"contradictions, TTFT split within 10%: {t['split_within_10pct']:.1%}.",
            "",
            *confusion(e2e),
            "",
            *(
                f"- run {r.case} stage {r.stage}: {r.label} -> {r.cause} ({r.kind}); "
                f"{r.description}"
                for r in e2e
                if r.judged and r.cause != r.label
            ),
            *(f"- run {r.case}: {r.why_not}" for r in e2e if r.stage < 0),
            "",
        ]
    out.write_text("\n".join(lines))


def fresh_seeds(count: int = 3) -> list[int]:
    """``count`` matrix seeds from the operating system's entropy (each run a matrix no rule was
    chosen on)."""
    draw = random.SystemRandom()
    return [draw.randrange(1_000_000) for _ in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=80)
    parser.add_argument(
        "--seed",
        default="",
        help="the matrix's seed; several, comma-separated: one matrix each (default: three "
        "drawn fresh, printed and written in the command, so no case can be tuned to)",
    )
    parser.add_argument("--e2e", type=int, default=0, help="end-to-end runs (real client)")
    parser.add_argument(
        "--e2e-busy", type=int, default=0,
        help="processes spinning on the cores beside the end-to-end runs (a loaded host)",
    )  # fmt: skip
    parser.add_argument(
        "--model-split", type=int, default=0,
        help="cases run again without the server's phase sums (the time split's model)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument(
        "--dump", type=Path, default=None,
        help="also write every stage of every seed as a JSON line to this file",
    )  # fmt: skip
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    if not args.seed:
        args.seed = ",".join(str(s) for s in fresh_seeds())
        print(f"seeds drawn fresh: {args.seed}", flush=True)
    seeds = [int(x) for x in str(args.seed).split(",")]
    by_seed = {seed: run_matrix(args.runs, seed) for seed in seeds}
    results = by_seed[seeds[0]]
    command = f".venv/bin/python bench/verdict_accuracy.py --runs {args.runs} --seed {args.seed}"
    model_split: list[StageResult] = []
    if args.model_split:
        command += f" --model-split {args.model_split}"
        model_split = run_matrix(args.model_split, seeds[0], withhold_phases=True)
    e2e: list[StageResult] = []
    if args.e2e:
        command += f" --e2e {args.e2e}" + (f" --e2e-busy {args.e2e_busy}" if args.e2e_busy else "")
        rng = random.Random(seeds[0])
        with tempfile.TemporaryDirectory() as tmp, busy_host(args.e2e_busy):
            for i in range(args.e2e):
                sim, load = e2e_case(i, rng)
                E2E_LOAD_AVERAGES.append(load_average())
                e2e += run_e2e(i, sim, load, Path(tmp))
                E2E_LOAD_AVERAGES.append(load_average())
                print(f"e2e {i}: {summary(e2e)}", flush=True)
    if args.out != RESULT:
        command += f" --out {args.out}"
    write_markdown(results, command, time.perf_counter() - t0, args.out, e2e, model_split, by_seed)
    if args.dump is not None:
        write_dump([r for seeded in by_seed.values() for r in seeded], args.dump)
    for seed, seeded in by_seed.items():
        print(seed, summary(seeded))
    print(summary(e2e) if e2e else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
