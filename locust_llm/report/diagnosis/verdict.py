"""The bottleneck verdict: an ordered registry of small rules, stage row -> :class:`Verdict`.

Input is the per-stage table of :mod:`locust_llm.report.tables` as mappings (one per stage,
column -> value; NaN = no data), with the time split (:mod:`locust_llm.report.diagnosis.decompose`)
and
the resource model (:mod:`locust_llm.report.diagnosis.resources`). Pure: no I/O, no pandas.

A verdict has two names: ``kind``, the source document's bottleneck vocabulary (prefill /
decode / OOM / low concurrency, plus overloaded, client-bound, errors, insufficient data), and
``cause``, the limiting resource and mechanism; both are declared once in
:mod:`locust_llm.report.diagnosis.causes` (whose causes are also the simulator's ground-truth
labels, so its traces can judge the verdict). It states the requests and telemetry samples it
used and a confidence: ``high`` (server telemetry and the roofline), ``medium`` (one of them),
``low`` (client-side evidence only, which it says).

Rules (:data:`RULES`), first match wins; each is a :class:`VerdictRule` whose ``check`` returns a
:class:`Finding` or None (thresholds: :class:`locust_llm.report.diagnosis.thresholds.Thresholds`).
Each rule declares what triggers it, the kinds and causes it may name and the thresholds it
reads; ``docs/rules.md`` lists them in order, generated from these rule objects
(:mod:`locust_llm.report.diagnosis.rules_doc`).

Server signals with fewer than ``min_telemetry_samples`` samples in the stage are not used:
missing signals are never read as "not saturated".

Overall: the first ``memory_oom`` or ``client_bound`` stage; otherwise the verdict of the
highest-load stage with enough data (when ``overloaded``, the verdict at the recommended cap is
quoted beside it). A soak stage's drift verdict (``unstable``) comes from
:mod:`locust_llm.report.soak`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from locust_llm.metrics import ERROR_KINDS
from locust_llm.registry import Registry
from locust_llm.report.diagnosis.actions import (
    CAUSE_ACTIONS,
    KIND_ACTIONS,
    NO_REQUEST_ACTIONS,
    STALL_ACTIONS,
    error_action,
    with_values,
)
from locust_llm.report.diagnosis.causes import CAUSE_KINDS, CAUSES, STEP_CAUSES, source_name
from locust_llm.report.diagnosis.client_delay import host_contended, late_first_reads
from locust_llm.report.diagnosis.confidence import (
    KV_BESIDE_BUDGET,
    STALLS_UNBENCHED,
    Doubt,
    host_margin,
    prefill_ratio,
    probed_device,
    queue_margin,
    step_margin,
)
from locust_llm.report.diagnosis.confidence import level as confidence_level
from locust_llm.report.diagnosis.decompose import computed_prompt_tokens, split_line
from locust_llm.report.diagnosis.engines import engine_of, in_engine_words
from locust_llm.report.diagnosis.knee import (
    achieved_share,
    falls_short,
    no_headroom,
    stage_scaling,
)
from locust_llm.report.diagnosis.lag import lagged
from locust_llm.report.diagnosis.resources import prompts_per_s, recompute_tokens_per_s
from locust_llm.report.diagnosis.thresholds import Thresholds, error_rate_exceeded
from locust_llm.report.fmt import column as _v
from locust_llm.report.fmt import is_num, load_label, ms, num, pct, ratio

SERVER_SIGNALS: tuple[str, ...] = ("gpu_util", "dram_bw_util", "kv_cache_usage", "running")

#: kind -> its actions, flag placeholders left empty (soak and build quote them directly).
ACTIONS: dict[str, tuple[str, ...]] = {k: with_values(v, {}) for k, v in KIND_ACTIONS.items()}


@dataclass(frozen=True)
class Verdict:
    """A diagnosis: what limits the server, the numbers that show it, what to do about it."""

    kind: str
    evidence: tuple[str, ...]
    actions: tuple[str, ...]
    stage: int | None = None  # stage index; None for the run as a whole
    cause: str = ""  # a CAUSES key; "" when the rule names no resource
    rule: str = ""
    requests: int = 0
    telemetry_samples: int = 0
    confidence: str = "low"
    client_side: bool = False  # decided without server signals

    @property
    def resource(self) -> str:
        """The limiting resource as people read it ("KV capacity"), or ""."""
        return CAUSES[self.cause].resource if self.cause in CAUSES else ""

    @property
    def headline(self) -> str:
        """``overloaded: KV capacity`` / ``decode_bound: memory bandwidth (decode)`` / kind."""
        return f"{self.kind}: {self.resource}" if self.resource else self.kind

    @property
    def source_name(self) -> str:
        """The source document's name for this bottleneck, or ""."""
        return source_name(self.kind, self.cause)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "cause": self.cause,
            "resource": self.resource,
            "source_bottleneck": self.source_name,
            "rule": self.rule,
            "stage": self.stage,
            "requests": self.requests,
            "telemetry_samples": self.telemetry_samples,
            "confidence": self.confidence,
            "client_side": self.client_side,
            "evidence": list(self.evidence),
            "actions": list(self.actions),
        }


# -- what a rule sees -------------------------------------------------------------------------


def _load(row: Mapping[str, Any]) -> float:
    c = _v(row, "concurrency")
    return c if not math.isnan(c) else _v(row, "rate")


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


@dataclass(frozen=True)
class Context:
    """One stage as the rules see it: its row, all rows, the thresholds, the server's flags."""

    row: Mapping[str, Any]
    rows: Sequence[Mapping[str, Any]]
    thresholds: Thresholds
    server: Mapping[str, Any] = field(default_factory=dict)

    def v(self, key: str) -> float:
        """A numeric column (NaN when missing)."""
        return _v(self.row, key)

    def server_v(self, key: str) -> float:
        """A server signal, NaN when it is missing or rests on too few samples."""
        if not self.telemetry_ok:
            return math.nan
        return self.v(key)

    @property
    def telemetry_ok(self) -> bool:
        samples = self.v("server_samples")
        if math.isnan(samples):  # a table without the count: trust what is there
            return any(not math.isnan(self.v(s)) for s in SERVER_SIGNALS)
        return samples >= self.thresholds.min_telemetry_samples

    @property
    def where(self) -> str:
        return f"at load {load_label(self.row.get('concurrency'), self.row.get('rate'))}"

    @property
    def lower(self) -> Mapping[str, Any] | None:
        return _lower_neighbour(self.row, self.rows)

    def scaling(self) -> tuple[str, str]:
        """How the stage answered its load (:func:`~locust_llm.report.diagnosis.knee.
        stage_scaling`: the classes of the steps that reached it and left it, ``linear``,
        ``flattening``, ``flat``, ``falling``, ``moe`` or ""): the row's, as the report filled
        them, else classified here the same way."""
        into, onward = self.row.get("scaling"), self.row.get("scaling_next")
        if isinstance(into, str) and isinstance(onward, str):
            return into, onward
        stage = self.row.get("stage")
        key = int(stage) if is_num(stage) else 0
        return stage_scaling(self.rows, self.thresholds).get(key, ("", ""))

    def headroom_refused(self, idle: bool = False) -> str:
        """Why the stage has no headroom by its steps (the reading's words), or "". ``idle``:
        the device was seen idle, so the step to the next load does not take its headroom
        (:func:`~locust_llm.report.diagnosis.knee.no_headroom`)."""
        return no_headroom(*self.scaling(), onward=not idle)

    def max_num_seqs(self) -> float:
        value = self.server.get("max_num_seqs")
        return float(value) if is_num(value) and value > 0 else math.nan

    def slots(self) -> float:
        value = self.server.get("total_slots")
        return float(value) if is_num(value) and value > 0 else math.nan


@dataclass(frozen=True)
class Finding:
    """What a rule found: the kind, the cause, the evidence and extra actions."""

    kind: str
    evidence: tuple[str, ...]
    cause: str = ""
    extra_actions: tuple[str, ...] = ()
    client_side: bool = False
    actions: tuple[str, ...] = ()  # given: these instead of the kind's or cause's own
    requests: float = math.nan  # the requests it rests on, when not the stage's answered ones
    doubts: tuple[Doubt, ...] = ()  # what the rule itself knows lowers its confidence


@dataclass(frozen=True)
class VerdictRule:
    """One verdict rule: ``check(context)`` -> a :class:`Finding`, or None to pass on.

    ``doc`` says what triggers it (threshold names in backticks), ``kinds`` and ``causes`` what
    its findings may name, ``reads`` the :class:`Thresholds` fields it reads (``docs/rules.md``
    is generated from these: :mod:`locust_llm.report.diagnosis.rules_doc`)."""

    name: str
    doc: str
    check: Callable[[Context], Finding | None]
    kinds: tuple[str, ...] = ()
    causes: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()


RULES: Registry[VerdictRule] = Registry("verdict rule")


def rule(
    name: str,
    doc: str,
    *,
    kinds: tuple[str, ...],
    causes: tuple[str, ...] = (),
    reads: tuple[str, ...] = (),
) -> Callable[[Callable[[Context], Finding | None]], VerdictRule]:
    """Register the decorated check as the next rule in order."""

    def wrap(check: Callable[[Context], Finding | None]) -> VerdictRule:
        return RULES.register(name, VerdictRule(name, doc, check, kinds, causes, reads))

    return wrap


#: The thresholds :func:`_step_cause` reads.
_STEP_READS: tuple[str, ...] = (
    "interference_prefill_share",
    "interference_step_share",
    "compute_prefill_share",
)
#: The thresholds :func:`_queued` reads (with the server signals' sample count).
_QUEUE_READS: tuple[str, ...] = (
    "no_queue_waiting",
    "queue_stood_share",
    "kv_preemptions_per_request",
    "saturated_kv",
    "queue_share",
    "queue_min_steps",
    "standing_queue_share",
    "cache_note_share",
    "min_telemetry_samples",
)


# -- shared evidence --------------------------------------------------------------------------


def _gain(ctx: Context) -> tuple[float, float, Mapping[str, Any] | None]:
    """(throughput gain, load ratio) over the lower-load stage, and that stage."""
    prev = ctx.lower
    if prev is None or ctx.row.get("kind") == "soak":
        return math.nan, math.nan, None
    gain = ctx.v("qps") / _v(prev, "qps") if _v(prev, "qps") > 0 else math.nan
    return gain, _load(ctx.row) / _load(prev), prev


def _split_text(ctx: Context) -> str:
    return split_line(ctx.row)


def _queue_share(ctx: Context) -> float:
    """Queue time / TTFT; 0 when the queue time is within ``queue_min_steps`` decode steps
    (waiting for the step under way is not an admission queue)."""
    ttft, queue = ctx.v("ttft_avg_s"), ctx.v("queue_avg_s")
    if queue <= ctx.thresholds.queue_min_steps * ctx.v("tpot_avg_s"):
        return 0.0
    return queue / ttft if ttft > 0 else math.nan


def _queue_stood(ctx: Context) -> bool:
    """Requests waited in at least ``queue_stood_share`` of the stage's samples of the waiting
    gauge (unknown: True). A queue in a third of the steps is bursts of arrivals or of
    preemptions, not an admission limit: the steps are."""
    share, least = ctx.server_v("waiting_share"), ctx.thresholds.queue_stood_share
    return math.isnan(share) or share >= least


def _standing_queue(ctx: Context) -> bool:
    """Its definition: at least one request waiting on average, at least
    ``standing_queue_share`` of the batch, and waiting in at least ``queue_stood_share`` of
    the samples (a queue that stood, not a burst)."""
    waiting, running = ctx.server_v("waiting"), ctx.server_v("running")
    share = ctx.thresholds.standing_queue_share
    stood = _queue_stood(ctx)
    return stood and waiting >= 1 and waiting >= share * (running if running > 0 else 0)


def _queued(ctx: Context) -> bool:
    """Requests wait for admission: a standing queue; a KV cache that preempted while the
    waiting gauge saw at least one request wait (only a cache out of blocks preempts, and a
    preempted sequence waits to resume: its wait shows in its tokens, not in TTFT); or, unless
    the waiting gauge says nothing waits, queue time at least ``queue_share`` of TTFT. Never
    when the waiting gauge saw requests wait in less than ``queue_stood_share`` of its samples
    (:func:`_queue_stood`)."""
    th = ctx.thresholds
    preemptions = ctx.server_v("preemptions")
    preempted = preemptions > 0 and ctx.server_v("waiting_max") >= 1
    if (
        preempted
        and ctx.server_v("kv_cache_usage_max") >= th.saturated_kv
        and preemptions >= th.kv_preemptions_per_request * ctx.v("requests")
    ):
        # a cache out of blocks preempted again and again at full usage while requests
        # waited: its wait shows in the preempted sequences' tokens, not in TTFT nor in a
        # queue that stands (a real vLLM with an 8 MiB cache: 6 preemptions for 8 requests,
        # 1-2 waiting in a third of the samples, TTFT untouched: tests/test_vllm_regimes.py)
        return True
    if not _queue_stood(ctx):
        return False
    if _standing_queue(ctx):
        return True
    if preempted:
        return True
    if ctx.server_v("waiting") < ctx.thresholds.no_queue_waiting:
        return False
    return _queue_share(ctx) >= ctx.thresholds.queue_share


def _resources_text(ctx: Context) -> str:
    mfu, mbu = ctx.v("mfu"), ctx.v("mbu")
    if math.isnan(mfu + mbu):
        return ""
    share = ctx.v("prefill_token_share")
    again = (
        ", prompts recomputed after preemptions included"
        if (recompute_tokens_per_s(ctx.row) > 0)
        else ""
    )
    return (
        f"resource model {ctx.where}: MFU {pct(mfu)}, MBU {pct(mbu)}; compute sets "
        f"~{pct(ctx.v('compute_time_share'))} of the busy time -> steps "
        f"{ctx.row.get('step_bound')}-bound; prompt tokens {pct(share)} of tokens computed "
        f"({num(ctx.v('input_tokens_avg'), 0)} in / {num(ctx.v('output_tokens_avg'), 0)} out"
        f"{_cache_text(ctx)}{again})"
    )


def _cache_text(ctx: Context) -> str:
    """What the prefix cache served of the prompts, when it matters (``cache_note_share``),
    or ""."""
    n_in, cached = ctx.v("input_tokens_avg"), ctx.v("cached_tokens_avg")
    if not (n_in > 0 and cached >= ctx.thresholds.cache_note_share * n_in):
        return ""
    return f"; {num(cached, 0)} of the {num(n_in, 0)} from the prefix cache ({pct(cached / n_in)})"


def _decode_and_ttft(ctx: Context) -> tuple[float, float]:
    """(mean decode time, mean TTFT) of the requests the server served in the stage's window
    (``served_decode_avg_s``, ``served_ttft_avg_s``: the finishes and first tokens that fell in
    the window, what its steps worked on), else, where too few fell in it, of the stage's own
    requests (those sent in it). Behind a queue that grows, the requests sent in a stage wait
    stages for their first token, and their TTFT says how long the queue grew, not what the
    steps in the window were spending their time on."""
    decode, ttft = ctx.v("served_decode_avg_s"), ctx.v("served_ttft_avg_s")
    if not (decode > 0 and ttft > 0):
        decode, ttft = ctx.v("decode_avg_s"), ctx.v("ttft_avg_s")
    return decode, ttft


def _decode_longer(ctx: Context) -> bool:
    """Whether decoding is the longer part of a request (:func:`_decode_and_ttft`)."""
    decode, ttft = _decode_and_ttft(ctx)
    return decode > ttft


def _step_cause(ctx: Context) -> str:
    """The cause the resource model's step bound names, or ""."""
    bound = ctx.row.get("step_bound")
    if bound == "memory":
        return "bandwidth_bound_decode"
    if bound == "host":
        return "host_overhead"
    if bound != "compute":
        return ""
    th = ctx.thresholds
    share = ctx.v("prefill_token_share")
    decode_longer = _decode_longer(ctx)
    # prompt chunks set the decode steps' time: prompts are most of the compute, or decode
    # steps alone would be memory-bound while many of them carry prompt work
    chunks = ctx.row.get("decode_step_bound") == "memory" and (
        ctx.v("prompt_step_share") >= th.interference_step_share
    )
    if decode_longer and (share >= th.interference_prefill_share or chunks):
        return "prefill_interference"
    if share >= th.compute_prefill_share and not decode_longer:
        return "compute_bound_prefill"
    return "compute_bound_decode"


# -- the rules, in order ------------------------------------------------------------------------


def _cut_off(ctx: Context) -> tuple[float, float, float]:
    """(sent, cut off, median seconds in flight when cut off) of the stage's requests."""
    sent = ctx.v("sent")
    if math.isnan(sent):  # a table without the count
        sent = ctx.v("requests") + (ctx.v("cancelled") if ctx.v("cancelled") > 0 else 0.0)
    return sent, ctx.v("cut_off"), ctx.v("cut_off_wait_p50_s")


def _cut_off_text(ctx: Context) -> str:
    """ "N requests sent at load L: M completed, K cut off (...) after X s in flight (median)"."""
    sent, cut, wait = _cut_off(ctx)
    cancelled = ctx.v("cancelled") if ctx.v("cancelled") > 0 else 0.0
    timeouts = cut - cancelled
    how = [f"{num(cancelled)} cancelled at the stage's or the run's end"] if cancelled else []
    how += [f"{num(timeouts)} timed out"] if timeouts > 0 else []
    return (
        f"{num(sent)} requests sent {ctx.where}: {num(ctx.v('completed'))} completed, "
        f"{num(cut)} cut off ({', '.join(how)}) after {num(wait, 1)} s in flight (median)"
    )


@rule(
    "cut_off",
    "requests cut off (cancelled at the stage's or the run's end, or timed out) are at least "
    "`cut_off_share` of those sent and at least `min_requests`, and the server fell behind: "
    "they had been in flight at least `latency_climb` x the P99 latency of the next-lower "
    "load, or the server held a standing queue (waiting >= 1 and >= `standing_queue_share` "
    "of the batch, in at least `queue_stood_share` of the samples). Overloaded, whatever few "
    "completed: the cause is what stopped admission or the step bound, where known; when no "
    "admission gate stopped them (the step's token budget, or the step bound alone), the step "
    "bound's own kind (`prefill_bound`, `decode_bound`) with the cut-off as its evidence (not "
    "for a stage with out-of-memory errors, other failures than timeouts above `error_rate`, "
    "or a busy client: those rules judge it)",
    kinds=("overloaded", "prefill_bound", "decode_bound"),
    causes=(
        "kv_capacity_admission",
        "batch_limit_admission",
        *STEP_CAUSES,
    ),
    reads=(
        "cut_off_share",
        "min_requests",
        "error_rate",
        "latency_climb",
        "standing_queue_share",
        "queue_stood_share",
        "client_cpu",
        "min_telemetry_samples",
        "cache_note_share",
        "budget_fill",
        "slot_fill",
        "batch_mean_fill",
        "saturated_kv",
        "prefill_saturated",
        "budget_prompt_fill",
        *_STEP_READS,
    ),
)
def _cut(ctx: Context) -> Finding | None:
    th = ctx.thresholds
    sent, cut, wait = _cut_off(ctx)
    if not (cut >= th.min_requests and cut >= th.cut_off_share * sent):
        return None
    if ctx.v("error_rate_oom") > 0 or ctx.v("worker_cpu_max") >= th.client_cpu:
        return None
    failed = ctx.v("failed") - (cut - (ctx.v("cancelled") if ctx.v("cancelled") > 0 else 0.0))
    if failed > 0 and error_rate_exceeded(failed / ctx.v("requests"), th):
        return None  # the server failed requests, other than by timing out: the errors rule
    behind = []
    prev = ctx.lower
    if prev is not None and wait >= th.latency_climb * _v(prev, "latency_p99_s"):
        behind.append(
            f"at load {load_label(prev.get('concurrency'), prev.get('rate'))} requests took "
            f"{num(_v(prev, 'latency_p99_s'), 1)} s (P99): the server fell behind"
        )
    if _standing_queue(ctx):
        behind.append(
            f"standing queue: {num(ctx.server_v('waiting'))} waiting vs "
            f"{num(ctx.server_v('running'))} running on average"
        )
    if not behind:
        return None
    cause, blocker = _admission_blocker(ctx) if ctx.telemetry_ok else ("", "")
    cause = cause or _step_cause(ctx)
    evidence = [_cut_off_text(ctx), *behind, blocker]
    # no admission gate stopped them: the steps' bound is the limit, named by its own kind
    # (prompts queued for prefill compute are prefill_bound), the cut-off the evidence
    return Finding(
        CAUSE_KINDS[cause] if cause in STEP_CAUSES else "overloaded",
        tuple(e for e in evidence if e),
        cause,
        client_side=not ctx.telemetry_ok,
        requests=sent,
    )


@rule(
    "too_few_requests",
    "fewer than `min_requests` requests in the stage, unless none completed and the error rate "
    "is above `error_rate` (a dead server: the `errors` rule says so)",
    kinds=("insufficient_data",),
    reads=("min_requests", "error_rate"),
)
def _too_few(ctx: Context) -> Finding | None:
    requests = ctx.v("requests")
    if requests >= ctx.thresholds.min_requests:
        return None
    if ctx.v("completed") == 0 and error_rate_exceeded(ctx.v("error_rate"), ctx.thresholds):
        return None  # a dead server: the errors rule says so
    n = num(requests if not math.isnan(requests) else 0)
    evidence = [f"{n} requests {ctx.where} (< {ctx.thresholds.min_requests})"]
    cut = ctx.v("cut_off")
    if cut > 0:  # cut off, but too few of them, or with no sign the server fell behind
        few = cut < ctx.thresholds.min_requests
        why = "too few to judge" if few else "no sign the server fell behind"
        evidence.append(f"{_cut_off_text(ctx)}: {why}")
    # no request ended and none was cut off: what stopped them is in the run's output
    none = not requests > 0 and not cut > 0
    return Finding("insufficient_data", tuple(evidence), actions=NO_REQUEST_ACTIONS if none else ())


@rule(
    "oom",
    "a request failed with error kind `oom` (out of memory; the server's most frequent "
    "message quoted)",
    kinds=("memory_oom",),
)
def _oom(ctx: Context) -> Finding | None:
    oom, requests = ctx.v("error_rate_oom"), ctx.v("requests")
    if not oom > 0:
        return None
    evidence = [
        f"{pct(oom, 1)} of requests {ctx.where} failed with out-of-memory "
        f"({num(round(oom * requests))} of {num(requests)})"
    ]
    said = (ctx.row.get("error_messages") or {}).get("oom")  # report/messages.py
    if said and said.message:
        evidence.append(f'the server said "{said.message}" ({said.message_count} of {said.count})')
    for key, label in (
        ("gpu_mem_util_max", "GPU memory peaked at"),
        ("kv_cache_usage_max", "KV cache peaked at"),
    ):
        if not math.isnan(ctx.v(key)):
            evidence.append(f"{label} {pct(ctx.v(key))}")
    actions = KIND_ACTIONS["memory_oom"]
    if ctx.server.get("enable_chunked_prefill") is True:  # the budget advice is for whole prompts
        actions = tuple(a for a in actions if "--max-num-batched-tokens" not in a)
    return Finding("memory_oom", tuple(evidence), actions=actions)


def _typical_delay(ctx: Context, p99: float) -> float:
    """The stage's median first-token client delay, or its p99 where the median is unknown."""
    median = ctx.v("client_delay_first_p50_s")
    return median if median == median else p99


@rule(
    "client_cpu",
    "a Locust worker's CPU peaked at `client_cpu` or more; or (kernel-stamp transport) the "
    "first-token client delay p99 reached `client_delay_bound_s` for at least "
    "`client_delay_min_late` requests and its median `client_delay_share` of the stage's TTFT "
    "P50, so that the typical request's TTFT is mostly the delay (smaller, or a few late "
    "reads, it is a measurement caveat in the report's warnings, not the stage's limit), "
    "with no standing queue on the server (waiting >= 1 and >= `standing_queue_share` of the "
    "batch in at least `queue_stood_share` of the samples; with one, the server is offered "
    "more than it takes: the stage is the server's), and the worker not kept from a core by "
    "other processes (its CPU demand, time running or waiting for a core, at `client_cpu` "
    "while it got less: the host's cores were taken, a caveat on the timings with a quieter "
    "host as the action, and the stage keeps the server's verdict)",
    kinds=("client_bound",),
    reads=(
        "client_cpu",
        "client_delay_bound_s",
        "client_delay_min_late",
        "client_delay_share",
        "standing_queue_share",
        "queue_stood_share",
        "min_telemetry_samples",
    ),
)
def _client(ctx: Context) -> Finding | None:
    cpu = ctx.v("worker_cpu_max")
    reads = late_first_reads(ctx.row, ctx.thresholds)  # kernel-stamp transport: client_delay.py
    delay, late = reads or (math.nan, math.nan)
    if host_contended(ctx.row, ctx.thresholds):
        # other processes took the worker's core: its late reads are the host's, more workers
        # would not help; the report's warnings say so (client_delay.contention_caveats)
        return None
    if (
        not cpu >= ctx.thresholds.client_cpu
        and reads is not None
        # the delay dominates what it inflates: the typical request's, not a few late reads
        # (a host's hiccup: 2 reads 116 ms late beside a 210 ms TTFT P50, the median 1 ms);
        # unknown TTFT or median: judged on the delay alone
        and not _typical_delay(ctx, delay) < ctx.thresholds.client_delay_share * ctx.v("ttft_p50_s")
        # a standing queue on the server: it is offered more than it takes, so late reads
        # blur the timings (the report's client delay table) but do not limit the stage
        and not _standing_queue(ctx)
    ):
        count = f", {num(late)} requests" if late == late else ""
        return Finding(
            "client_bound",
            (
                f"the worker read first tokens up to {ms(delay, 1)} ms after the kernel "
                f"received them (p99 {ctx.where}, "
                f">= {ms(ctx.thresholds.client_delay_bound_s)} ms{count}): "
                "the load generator falls behind its streams",
            ),
        )
    if not cpu >= ctx.thresholds.client_cpu:
        return None
    who = ctx.row.get("worker_cpu_max_id") or "a worker"
    return Finding(
        "client_bound",
        (
            f"Locust worker {who} CPU peaked at {pct(cpu)} {ctx.where} "
            f"(>= {pct(ctx.thresholds.client_cpu)}): the load generator, not the server, "
            "limits this stage",
        ),
    )


@rule(
    "errors",
    "error rate above `error_rate` (the error kinds listed; per kind its most frequent "
    "message with what to do, or a hint when the failures carried none)",
    kinds=("errors",),
    reads=("error_rate",),
)
def _errors(ctx: Context) -> Finding | None:
    rate, limit = ctx.v("error_rate"), ctx.thresholds.error_rate
    if limit is None or not error_rate_exceeded(rate, ctx.thresholds):
        return None
    kinds = [(k, ctx.v(f"error_rate_{k}")) for k in ERROR_KINDS]
    kinds = [(k, r) for k, r in kinds if r > 0]
    detail = ", ".join(f"{k} {pct(r, 1)}" for k, r in kinds)
    said = ctx.row.get("error_messages") or {}  # kind -> KindMessages (report/messages.py)
    actions = []
    for kind, _ in kinds:
        found = said.get(kind)
        action = (
            error_action(kind, found.message, found.message_count, found.count)
            if found
            else error_action(kind)
        )
        if action:
            actions.append(action)
    return Finding(
        "errors",
        (f"error rate {pct(rate, 1)} {ctx.where} > {pct(limit)} ({detail})",),
        extra_actions=tuple(actions),
    )


def _kv_full(ctx: Context) -> bool:
    """The KV cache cannot take one more sequence: usage at ``saturated_kv``, or within one
    sequence's share of the capacity, or a preemption."""
    kv_max, pre = ctx.server_v("kv_cache_usage_max"), ctx.server_v("preemptions")
    seqs = ctx.v("kv_capacity_seqs")
    room = 1.0 - 1.0 / seqs if seqs >= 1 else ctx.thresholds.saturated_kv
    return kv_max >= min(ctx.thresholds.saturated_kv, room) or pre > 0


def _slots_bind(ctx: Context, limit: float) -> bool:
    """The batch limit holds requests back: more were asked for than it allows (closed loop:
    more users than slots; else running + waiting beyond it) and the batch reached it or
    requests wait (the caller has ruled the token budget and the KV cache out, and a
    scheduler admits by nothing else; the gauge is read after a step's finished sequences
    left, so it sits below the limit by those); in open loop, with requests waiting on average
    (a peak of arrivals is no standing queue). Without a running gauge (client-side): more
    users than slots and the TTFT mostly queue."""
    running_max = ctx.server_v("running_max")
    demand = ctx.v("concurrency")
    if math.isnan(running_max):
        return demand > limit and _queue_share(ctx) >= ctx.thresholds.queue_share
    waiting = ctx.server_v("waiting")
    if math.isnan(demand):  # open loop: a standing queue, not one peak of arrivals
        demand = running_max + ctx.server_v("waiting_max")
        return demand > limit and waiting >= 1
    return demand > limit and (running_max >= ctx.thresholds.slot_fill * limit or waiting >= 1)


def _admission_blocker(ctx: Context) -> tuple[str, str]:
    """(cause, evidence) of what holds the queued requests back; ("", "") when unknown.

    In order: prompts queue for the step's token budget (prefill compute); the batch limit,
    when the KV cache holds at least that many sequences (the scheduler tests the batch limit
    before it asks for KV blocks, so where both bind, the batch limit stops admission), unless
    the KV cache preempted and the mean batch stayed below ``slot_fill`` of the limit (the KV
    cache ran out first); prompts' compute filling the busy time (the token budget, tested
    before KV blocks: :func:`_prompt_compute_text`); the KV cache; a batch that stays at one
    plateau while load grows."""
    th = ctx.thresholds
    kv_max, pre = ctx.server_v("kv_cache_usage_max"), ctx.server_v("preemptions")
    running_max = ctx.server_v("running_max")
    budget = _token_budget_text(ctx)
    if budget:
        return _budget_cause(ctx), budget
    preempted = pre > 0 and _kv_full(ctx)
    running = ctx.server_v("running")
    for limit, label in ((ctx.max_num_seqs(), "max-num-seqs"), (ctx.slots(), "server slots")):
        if limit > ctx.v("kv_capacity_seqs") or not _slots_bind(ctx, limit):
            continue
        if preempted and not running >= th.slot_fill * limit:
            continue  # the KV cache ran out and kept the batch below its limit: KV binds
        if running < th.batch_mean_fill * limit and _step_cause(ctx) in _PREFILL:
            # a limit that binds keeps the batch near it; prompts' compute setting the steps
            # with the mean batch well below it: the token budget stops admission first
            continue
        source = ctx.server.get("max_num_seqs_source") if label == "max-num-seqs" else ""
        if (
            _prompt_saturated(ctx)
            and str(source).startswith("running gauge")
            and not ctx.server_v("waiting_capacity_max") > 0
        ):
            # the plateau is the prefill's: the steps' bound names it (unless the server says
            # requests waited for capacity, as vLLM does: its capacity counts the batch, the KV
            # cache and the token budget alike, and a budget it filled was named above)
            return "", ""
        said = f" ({source})" if source else ""
        if math.isnan(running_max):
            return "batch_limit_admission", (
                f"{num(ctx.v('concurrency'))} users for {label} {num(limit)}{said} and TTFT "
                f"{pct(_queue_share(ctx))} queue: requests wait for a batch slot (client-side)"
            )
        return "batch_limit_admission", (
            f"batch peaked at {num(running_max)} running of {label} {num(limit)}{said} with the "
            f"KV cache at {pct(kv_max)}: requests wait for a batch slot"
        )
    compute = _prompt_compute_text(ctx)
    if compute:  # the batch limit does not bind: the token budget is tested next
        return _step_cause(ctx), compute
    if _kv_full(ctx):
        return "kv_capacity_admission", (
            f"KV cache peaked at {pct(kv_max)} ({num(pre, 0)} preemptions): sequences wait for "
            f"KV space; ~{num(ctx.v('kv_capacity_seqs'), 0)} sequences fit at the observed "
            "context"
        )
    prev = ctx.lower
    if prev is not None and running_max > 0 and math.isnan(kv_max):
        prev_max = _v(prev, "running_max")
        if prev_max >= th.slot_fill * running_max and _load(ctx.row) > _load(prev):
            return "batch_limit_admission", (
                f"the batch stays at {num(running_max)} running while load grows "
                f"({load_label(prev.get('concurrency'), prev.get('rate'))} -> "
                f"{load_label(ctx.row.get('concurrency'), ctx.row.get('rate'))}) and no KV "
                "signal: a slot or batch limit of about that size"
            )
    return "", ""


def _prompt_compute_text(ctx: Context) -> str:
    """Evidence that prompts queue for prefill compute where the KV cache binds beside it, or
    "": a token budget is set, the steps are compute-bound on prompts, and either prompts'
    compute fills ``prefill_saturated`` of the busy time (every step is as long as its prompt
    chunks and more KV space admits nothing sooner; the mean TPOT under-counts the tokens of
    the long, budget-filled steps, so the ``budget_fill`` test can miss it) or one prompt's
    computed tokens come to ``budget_prompt_fill`` of the budget (its chunks fill the budget of
    the steps that compute it, so in those long steps the budget holds the queue)."""
    budget = ctx.server.get("max_num_batched_tokens")
    if not is_num(budget):
        return ""
    th = ctx.thresholds
    if _prompt_saturated(ctx):
        return (
            f"{_resources_text(ctx)}; prompts' compute sets "
            f"{pct(ctx.v('compute_time_share'))} of the busy time (>= "
            f"{pct(th.prefill_saturated)}): prompts queue for prefill compute, not for KV space"
        )
    prompt = computed_prompt_tokens(ctx.row)
    if not (_step_cause(ctx) in _PREFILL and prompt >= th.budget_prompt_fill * budget):
        return ""
    return (
        f"{_resources_text(ctx)}; a prompt computes {num(prompt, 0)} tokens on average, "
        f"{pct(prompt / budget)} of the {num(budget)}-token budget (--max-num-batched-tokens): "
        "its chunks fill the budget of the steps that compute it, so prompts queue for prefill "
        "compute, not for KV space"
    )


def _prompt_saturated(ctx: Context) -> bool:
    """Prompts' compute fills the busy time (``compute_time_share`` at ``prefill_saturated``,
    compute-bound on prompts): a flat running gauge is then what a token budget spent on
    prompts every step produces too, so an observed (not declared) plateau is not taken for
    a batch limit."""
    share = ctx.v("compute_time_share")
    return share >= ctx.thresholds.prefill_saturated and _step_cause(ctx) in (
        "compute_bound_prefill",
        "prefill_interference",
    )


def _token_budget_text(ctx: Context) -> str:
    """Evidence that prompts queue for the step's token budget (prefill compute), or "".

    With the server's own count of the tokens its steps computed (vLLM's
    ``iteration_tokens_total``: ``server_step_tokens``), the budget binds where its mean step
    fills ``budget_fill`` of ``--max-num-batched-tokens``, whatever the resource model says (a
    CPU engine has none). Without it, the steps must be compute-bound on prompts and the
    tokens of one step estimated from the client (the prompt tokens arriving per step, those
    recomputed after preemptions included, plus one per decoding sequence) fill
    ``budget_fill`` of the budget."""
    budget = ctx.server.get("max_num_batched_tokens")
    if not is_num(budget):
        return ""
    counted = ctx.server_v("server_step_tokens")
    if counted > 0:
        if not counted >= ctx.thresholds.budget_fill * budget:
            return ""
        return (
            f"the engine's steps computed {num(counted, 0)} tokens each on average (its "
            f"iteration-token counters) of a {num(budget)}-token budget "
            "(--max-num-batched-tokens): prompts queue for the step's token budget"
        )
    if _step_cause(ctx) not in ("compute_bound_prefill", "prefill_interference"):
        return ""
    prompt_rate = prompts_per_s(ctx.row) * computed_prompt_tokens(ctx.row)
    prompt_rate += recompute_tokens_per_s(ctx.row)
    prompts = prompt_rate * ctx.v("tpot_avg_s")
    running = ctx.server_v("running")
    per_step = prompts + (running if running > 0 else 0.0)
    if not per_step >= ctx.thresholds.budget_fill * budget:
        return ""
    return (
        f"{_resources_text(ctx)}; ~{num(per_step, 0)} tokens per step ({num(prompts, 0)} of "
        f"them prompt tokens) of a {num(budget)}-token budget (--max-num-batched-tokens): "
        "prompts queue for prefill compute"
    )


def _budget_cause(ctx: Context) -> str:
    """The cause of a queue for the token budget: the resource model's prefill cause where it
    names one; else, with the budget's steps full of prompt chunks, prompts' compute: it
    interferes with decoding where decoding is the longer part of a request (TTFT < decode
    time), else it is the prefill's own bound."""
    cause = _step_cause(ctx)
    if cause in ("compute_bound_prefill", "prefill_interference"):
        return cause
    if _decode_longer(ctx):
        return "prefill_interference"
    return "compute_bound_prefill"


@rule(
    "admission",
    "requests wait for admission, in at least `queue_stood_share` of the waiting gauge's "
    "samples (a queue that stood, not a burst): queue time at least `queue_share` of TTFT and "
    "longer than "
    "`queue_min_steps` decode steps (unless the waiting gauge reads below `no_queue_waiting`), "
    "a standing queue (waiting >= 1 and >= half the batch), or a KV cache that preempted while "
    "at least one request waited (preempted sequences wait to resume; TTFT does not show it). The "
    "cause, in the order a scheduler tests its admission gates: the step's token budget "
    "(compute-bound steps whose tokens per step fill `budget_fill` of "
    "--max-num-batched-tokens: the step bound's cause and kind, `prefill_bound`, not "
    "`overloaded`: prompts queue for prefill compute); "
    "`batch_limit_admission` when demand exceeds max-num-seqs or the server's slots (given, "
    "probed, or read from a flat running gauge) and the "
    "batch reached `slot_fill` of it or requests wait (without a running gauge: more users than "
    "slots and TTFT at least `queue_share` queue, client-side), with the KV cache holding that "
    "many sequences (not when the KV cache preempted while the mean batch stayed below `slot_fill` "
    "of the limit, nor when the step bound names a prefill cause while the mean batch stays "
    "below `batch_mean_fill` of the limit: the token budget stops admission first, nor for a "
    "plateau read off the running gauge when prompts' compute fills "
    "`prefill_saturated` of the busy time, unless the server said requests waited for capacity, "
    "as vLLM's waiting-by-reason gauge does); the step bound's prefill cause again when a token "
    "budget is set and prompts' compute fills `prefill_saturated` of the busy time, or a "
    "prompt's computed tokens come to `budget_prompt_fill` of the budget under a prefill step "
    "cause; "
    "`kv_capacity_admission` when the KV cache peaked "
    "at `saturated_kv` (or within one sequence of full) or preempted; else, with no KV "
    "signal, a batch that stays at one plateau (`slot_fill`) while load grows. A batch limit "
    "read off the running gauge, with no token budget known and prompts taking "
    "`plateau_prefill_steps` decode steps or more to prefill, is named two confidence levels "
    "lower (a budget flattens the batch alike)",
    kinds=("overloaded", "prefill_bound"),
    causes=(
        "kv_capacity_admission",
        "batch_limit_admission",
        "compute_bound_prefill",
        "prefill_interference",
    ),
    reads=(
        *_QUEUE_READS,
        "budget_fill",
        "slot_fill",
        "batch_mean_fill",
        "saturated_kv",
        "prefill_saturated",
        "budget_prompt_fill",
        *_STEP_READS,
        "plateau_prefill_steps",
    ),
)
def _admission(ctx: Context) -> Finding | None:
    share = _queue_share(ctx)
    if not _queued(ctx):
        return None
    cause, blocker = _admission_blocker(ctx)
    if not cause:
        return None  # a queue without a binding admission limit: the steps are the limit
    # prompts queue for the step's token budget under compute-bound steps: the steps' bound
    # is the limit (prefill_bound), not an admission gate
    kind = CAUSE_KINDS[cause] if cause in STEP_CAUSES else "overloaded"
    queue = "standing queue" if _standing_queue(ctx) else "queue"
    evidence = [
        _split_text(ctx) + f": queue is {pct(share)} of TTFT",
        f"{queue}: {num(ctx.server_v('waiting'))} waiting (at most "
        f"{num(ctx.server_v('waiting_max'), 0)}) vs {num(ctx.server_v('running'))} running on "
        "average",
        blocker,
    ]
    return Finding(
        kind,
        tuple(e for e in evidence if e),
        cause,
        client_side=not ctx.telemetry_ok,
        doubts=_plateau_doubts(ctx) if cause == "batch_limit_admission" else (),
    )


def _plateau_doubts(ctx: Context) -> tuple[Doubt, ...]:
    """Two levels off a batch limit read off the running gauge's plateau while no token budget
    is known and each prompt takes ``plateau_prefill_steps`` decode steps or more to prefill:
    prompts chunked over many steps of a budget hold later prompts back and flatten the batch
    just as a slot limit does, and vLLM exports neither its budget nor its batch limit (its
    waiting-by-reason gauge counts both as ``capacity``)."""
    source = str(ctx.server.get("max_num_seqs_source") or "")
    if not source.startswith("running gauge") or is_num(ctx.server.get("max_num_batched_tokens")):
        return ()
    prefill, tpot = ctx.v("prefill_avg_s"), ctx.v("tpot_avg_s")
    if not prefill >= ctx.thresholds.plateau_prefill_steps * tpot:
        return ()
    return (
        Doubt(
            2,
            f"each prompt takes {num(prefill / tpot, 0)} decode steps to prefill ({ms(prefill)} "
            f"ms at a TPOT of {ms(tpot, 1)} ms) and no token budget is known: a budget holds "
            "prompts back and flattens the batch as a slot limit does; give "
            "--llm-server-max-num-batched-tokens and --llm-server-max-num-seqs",
            where="the batch limit read off the running gauge",
        ),
    )


def _prompt_stall_text(ctx: Context) -> str:
    """Evidence that steps computing prompts stall decoding, read from the client's
    inter-token gaps where the resource model names no step bound (a CPU engine, no device
    given), or "": decode time beyond each request's median gap (``decode_stall_share``) at
    ``stall_share``, the ITL tail at ``stall_itl_ratio`` x the median gap, and the prompts of
    the stage able to account for ``stall_explained`` of it (each prompt's prefill, less one
    decode step, is a wait for every sequence decoding beside it: prompts/s x that), so that
    gaps the prompts cannot explain (a stalled client, a noisy host) are not called theirs."""
    th = ctx.thresholds
    stall, p50, p99 = ctx.v("decode_stall_share"), ctx.v("itl_p50_s"), ctx.v("itl_p99_s")
    if _step_cause(ctx) or not stall >= th.stall_share or not p99 >= th.stall_itl_ratio * p50:
        return ""
    if not _decode_longer(ctx):
        return ""  # decoding is not the longer part of a request: the stalls are not its limit
    prefill = ctx.v("prefill_avg_s")
    if not prefill > 0:
        prefill = ctx.v("ttft_avg_s")
    rate = prompts_per_s(ctx.row)
    explained = rate * max(prefill - p50, 0.0)
    if not explained >= th.stall_explained * stall:
        return ""
    return (
        f"{pct(stall)} of decode time is spent in gaps beyond each request's median "
        f"(ITL P50 {ms(p50, 1)} ms, P99 {ms(p99, 1)} ms, TPOT avg "
        f"{ms(ctx.v('tpot_avg_s'), 1)} ms): steps that compute prompts stall every decoding "
        f"sequence; {num(rate)} prompts/s with {ms(prefill)} ms of prefill each account for "
        f"{pct(explained)} of the decode time"
    )


@rule(
    "prompt_stalls",
    "no resource model names the step bound, and the client's inter-token gaps show prompts "
    "stalling decoding: decode time beyond each request's median gap at `stall_share` or more "
    "(`decode_stall_share`), ITL P99 at least `stall_itl_ratio` x the median gap, decoding "
    "the longer phase, and prompts/s x (prefill - median gap) at least `stall_explained` of "
    "the stall share: `prefill_interference`, chunked prefill first among the actions",
    kinds=("prefill_bound",),
    causes=("prefill_interference",),
    reads=(
        *_STEP_READS,
        "stall_share",
        "stall_itl_ratio",
        "stall_explained",
        "min_telemetry_samples",
    ),
)
def _stalls(ctx: Context) -> Finding | None:
    stalls = _prompt_stall_text(ctx)
    if not stalls:
        return None
    evidence = [stalls, _split_text(ctx)]
    return Finding(
        "prefill_bound",
        tuple(e for e in evidence if e),
        "prefill_interference",
        actions=(*STALL_ACTIONS, *CAUSE_ACTIONS["prefill_interference"]),
        client_side=not ctx.telemetry_ok,
        doubts=(STALLS_UNBENCHED,),
    )


@rule(
    "under_loaded",
    "no admission queue and the GPU busy less than `busy_share`; without a busy signal, "
    "throughput still scaling (gain over the lower stage at least `linear_efficiency` of the "
    "load ratio's): client-side, its cause the step bound. Never on a stage reached by a step "
    "that flattens (gain below `linear_efficiency` of proportional), stays flat or falls "
    "(within `flat_band` of 1, or below): the reading calls it near the limit or overload; "
    "nor, unless its GPU was seen idle, on one whose step to the next load does so",
    kinds=("low_concurrency",),
    causes=("under_loaded", *STEP_CAUSES),
    reads=(*_QUEUE_READS, "busy_share", "linear_efficiency", "flat_band", *_STEP_READS),
)
def _under(ctx: Context) -> Finding | None:
    th = ctx.thresholds
    busy = ctx.server_v("gpu_util")
    if _queued(ctx) or ctx.headroom_refused(idle=busy < th.busy_share):
        return None
    if not math.isnan(busy):
        if busy >= th.busy_share:
            return None
        return Finding(
            "low_concurrency",
            (
                f"GPU busy {pct(busy)} {ctx.where} (< {pct(th.busy_share)}) with no admission "
                f"queue ({num(ctx.server_v('waiting'))} waiting)",
                f"QPS {num(ctx.v('qps'))}, E2E avg {ms(ctx.v('latency_avg_s'))} ms",
            ),
            "under_loaded",
        )
    gain, load_ratio, prev = _gain(ctx)
    if prev is None or ctx.scaling()[0] not in ("linear", "moe"):
        return None
    # throughput scales, but whether the device idles is unknown: the step bound, where the
    # resource model gives one, names what each step waits on
    evidence = [
        f"no GPU busy signal {ctx.where}; client-side: throughput still scales, QPS "
        f"{num(_v(prev, 'qps'))} -> {num(ctx.v('qps'))} ({ratio(gain)}) for load "
        f"{ratio(load_ratio)}",
        _resources_text(ctx),
        _split_text(ctx),  # where the time goes, as the step-bound finding says it
    ]
    return Finding(
        "low_concurrency",
        tuple(e for e in evidence if e),
        _step_cause(ctx) or "under_loaded",
        client_side=True,
    )


@rule(
    "small_batch",
    "no queue and the batch at most `low_batch_fraction` of its limit (max-num-seqs, the "
    "server's slots or the KV capacity): the device is busy with memory-bound decode steps "
    "(`decode_bound`, memory bandwidth: the steps read the weights, so memory is not idle; "
    "`host_overhead` where the host's work sets the steps), "
    "but more load still adds throughput, each step reading the weights once for more "
    "sequences: the headroom is in the evidence and the first action. `low_concurrency` only "
    "where the resource model names no step bound. Not where compute sets the step time (a "
    "larger batch adds compute, not throughput), nor on a stage reached by, or leading to, a "
    "step that flattens, stays flat or falls (as `under_loaded`)",
    kinds=("decode_bound", "low_concurrency"),
    causes=("bandwidth_bound_decode", "host_overhead"),
    reads=(*_QUEUE_READS, "low_batch_fraction", "linear_efficiency", "flat_band"),
)
def _small(ctx: Context) -> Finding | None:
    if ctx.headroom_refused() or ctx.row.get("step_bound") == "compute":
        return None  # throughput stopped answering load, or compute sets the step time
    small = _small_batch(ctx)
    if not small:
        return None
    evidence = [small, _resources_text(ctx), _split_text(ctx)]
    busy = ctx.server_v("gpu_util")
    if not math.isnan(busy):
        evidence.append(f"GPU busy {pct(busy)}: busy, but more load would still add throughput")
    cause = _step_cause(ctx)
    if not cause:  # nothing says what the steps wait on: the headroom is the finding
        return Finding("low_concurrency", tuple(e for e in evidence if e))
    # the steps are memory-bound: the device is busy reading the weights (decode_bound), and
    # a larger batch reads them once for more sequences (the headroom: the first action)
    return Finding(
        CAUSE_KINDS[cause],
        tuple(e for e in evidence if e),
        cause,
        actions=(CAUSE_ACTIONS["under_loaded"][0], *CAUSE_ACTIONS[cause]),
    )


@rule(
    "step_bound",
    "the resource model names what sets the step time. Compute-bound steps (compute's share "
    "of the busy time at the resource model's compute-bound line, see Resources in "
    "docs/report.md): "
    "`prefill_interference` when decoding outlasts TTFT (the requests served in the stage's "
    "window: first tokens and finishes that fell in it) and prompt chunks set the decode "
    "steps' time (prompt tokens at least `interference_prefill_share` of the tokens computed, "
    "or a decode-only step would be memory-bound while at least `interference_step_share` of "
    "the steps carry prompt work); `compute_bound_prefill` when prompt tokens are at least "
    "half and TTFT is the longer phase; else `compute_bound_decode`. Memory-bound steps (the "
    "memory term at least the host's time): `bandwidth_bound_decode`; else `host_overhead` "
    "(the engine's per-step host work outlasts the memory term: neither compute nor memory "
    "bandwidth is named)",
    kinds=("prefill_bound", "decode_bound"),
    causes=STEP_CAUSES,
    reads=(*_STEP_READS, "cache_note_share", "min_telemetry_samples"),
)
def _step(ctx: Context) -> Finding | None:
    cause = _step_cause(ctx)
    if not cause:
        return None
    evidence = [_resources_text(ctx), _split_text(ctx)]
    decode, ttft = _decode_and_ttft(ctx)
    served = ctx.v("served_decode_avg_s") > 0 and ctx.v("served_ttft_avg_s") > 0
    whose = "per request served in the window" if served else "per request"
    evidence.append(
        f"decode {ms(decode)} ms vs TTFT {ms(ttft)} ms {whose}; TPOT avg "
        f"{ms(ctx.v('tpot_avg_s'), 1)} ms (floor {ms(ctx.v('tpot_floor_s'), 1)} ms), ITL P99 "
        f"{ms(ctx.v('itl_p99_s'), 1)} ms"
    )
    busy = ctx.server_v("gpu_util")
    if not math.isnan(busy):
        evidence.append(f"GPU busy {pct(busy)}")
    return Finding(
        CAUSE_KINDS[cause],
        tuple(e for e in evidence if e),
        cause,
        client_side=not ctx.telemetry_ok,
    )


def _small_batch(ctx: Context) -> str:
    """Evidence that the batch is at most ``low_batch_fraction`` of its limit with no queue."""
    if _queued(ctx):
        return ""
    running = ctx.server_v("running")
    limits = [
        (ctx.max_num_seqs(), "max-num-seqs"),
        (ctx.slots(), "server slots"),
        (ctx.v("kv_capacity_seqs"), "KV capacity at the observed context"),
    ]
    known = [(v, name) for v, name in limits if v > 0]
    if not known or not running > 0:
        return ""
    limit, name = min(known)
    if running > ctx.thresholds.low_batch_fraction * limit:
        return ""
    return (
        f"batch {num(running)} running {ctx.where} is {pct(running / limit)} of its limit "
        f"({name} {num(limit, 0)}), <= {pct(ctx.thresholds.low_batch_fraction)}; no queue: "
        f"{num(ctx.server_v('waiting'))} waiting: the server has headroom"
    )


def _saturation(ctx: Context) -> list[str]:
    th, found = ctx.thresholds, []
    if ctx.server_v("gpu_util") >= th.saturated_gpu_util:
        found.append(
            f"GPU utilization {pct(ctx.server_v('gpu_util'))} >= {pct(th.saturated_gpu_util)}"
        )
    if ctx.server_v("dram_bw_util") >= th.saturated_bw_util:
        found.append(f"DRAM bandwidth utilization {pct(ctx.server_v('dram_bw_util'))}")
    if ctx.server_v("kv_cache_usage_max") >= th.saturated_kv:
        found.append(f"KV cache peaked at {pct(ctx.server_v('kv_cache_usage_max'))}")
    if ctx.server_v("waiting") >= 1:
        found.append(f"{num(ctx.server_v('waiting'))} requests waiting on average")
    return found


@rule(
    "phase_share",
    "no roofline: saturated (GPU utilization at `saturated_gpu_util`, DRAM bandwidth at "
    "`saturated_bw_util`, the KV cache at `saturated_kv`, or requests waiting), and TTFT's "
    "share of E2E at `prefill_share` or more (prefill) or less (decode)",
    kinds=("prefill_bound", "decode_bound"),
    reads=(
        "saturated_gpu_util",
        "saturated_bw_util",
        "saturated_kv",
        "prefill_share",
        "min_telemetry_samples",
    ),
)
def _phase(ctx: Context) -> Finding | None:
    saturated = _saturation(ctx)
    if not saturated:
        return None
    ttft, e2e = ctx.v("ttft_avg_s"), ctx.v("latency_avg_s")
    share = ttft / e2e if e2e > 0 else math.nan
    prefill = share >= ctx.thresholds.prefill_share
    text = (
        f"TTFT avg {ms(ttft)} ms is {pct(share)} of E2E avg {ms(e2e)} ms: "
        f"{'prefill' if prefill else 'decode'} dominates (no roofline: give --model and a "
        f"device for the resource model); TPOT avg {ms(ctx.v('tpot_avg_s'), 1)} ms"
    )
    return Finding("prefill_bound" if prefill else "decode_bound", (*saturated, text))


@rule(
    "past_knee",
    "throughput flat (gain over the lower stage at most `flat_gain`) while P99 latency climbs "
    "(at least `latency_climb`), or an open loop achieving less than `open_loop_shortfall` of "
    "the arrivals due in its window, and more than one request short (the window's requests "
    "completed over it shifted by their latency); the cause is the step bound where known",
    kinds=("overloaded",),
    causes=STEP_CAUSES,
    reads=(
        "flat_gain",
        "latency_climb",
        "open_loop_shortfall",
        *_STEP_READS,
        "min_telemetry_samples",
    ),
)
def _knee(ctx: Context) -> Finding | None:
    th, found = ctx.thresholds, []
    gain, _, prev = _gain(ctx)
    if prev is not None:
        climb = (
            ctx.v("latency_p99_s") / _v(prev, "latency_p99_s")
            if _v(prev, "latency_p99_s") > 0
            else math.nan
        )
        if gain <= th.flat_gain and climb >= th.latency_climb:
            found.append(
                f"from load {load_label(prev.get('concurrency'), prev.get('rate'))} to "
                f"{load_label(ctx.row.get('concurrency'), ctx.row.get('rate'))} QPS went "
                f"{num(_v(prev, 'qps'))} -> {num(ctx.v('qps'))} ({ratio(gain)}) while P99 "
                f"latency went {ms(_v(prev, 'latency_p99_s'))} -> "
                f"{ms(ctx.v('latency_p99_s'))} ms ({ratio(climb)})"
            )
    share = achieved_share(ctx.row)
    if falls_short(ctx.row, th.open_loop_shortfall):
        due = ctx.v("offered_rps") if ctx.v("offered_rps") >= 0 else ctx.v("rate")
        found.append(
            f"achieved {num(ctx.v('qps'), 2)} req/s of the {num(due, 2)} req/s due in the "
            f"window ({pct(share)})"
        )
    if not found:
        return None
    split = _split_text(ctx)
    return Finding(
        "overloaded",
        tuple([*found, *([split] if split else [])]),
        _step_cause(ctx),
        client_side=not ctx.telemetry_ok,
    )


@rule(
    "nothing_saturated",
    "server signals (at least `min_telemetry_samples` samples in the stage) show nothing "
    "saturated; without them: insufficient data",
    kinds=("healthy", "insufficient_data"),
    reads=("min_telemetry_samples",),
)
def _nothing(ctx: Context) -> Finding | None:
    if ctx.telemetry_ok:
        return Finding(
            "healthy",
            (
                f"nothing saturated {ctx.where}: GPU utilization "
                f"{pct(ctx.server_v('gpu_util'))}, KV cache max "
                f"{pct(ctx.server_v('kv_cache_usage_max'))}, {num(ctx.server_v('waiting'))} "
                f"waiting; error rate {pct(ctx.v('error_rate'), 1)}",
            ),
        )
    samples = ctx.v("server_samples")
    missing = (
        f"only {num(samples, 0)} server telemetry samples {ctx.where} (< "
        f"{ctx.thresholds.min_telemetry_samples})"
        if samples > 0
        else f"no server telemetry {ctx.where} (none of {', '.join(SERVER_SIGNALS)})"
    )
    return Finding(
        "insufficient_data",
        (
            f"{missing}: the bottleneck cannot be told from client timings",
            f"client timings {ctx.where}: QPS {num(ctx.v('qps'))}, E2E avg "
            f"{ms(ctx.v('latency_avg_s'))} ms (P99 {ms(ctx.v('latency_p99_s'))} ms), TTFT avg "
            f"{ms(ctx.v('ttft_avg_s'))} ms, TPOT avg {ms(ctx.v('tpot_avg_s'), 1)} ms",
        ),
        client_side=True,
    )


# -- running the rules ------------------------------------------------------------------------


def _client_side_note(samples: float, thresholds: Thresholds) -> str:
    """Why a verdict rests on the client's evidence: no server signal in the stage, or too few
    samples of one to use."""
    if not samples > 0:
        return (
            "no server signals in this stage (0 server samples: nothing scraped, or nothing the "
            "server exports that locust-llm reads): decided on client-side evidence"
        )
    if samples >= thresholds.min_telemetry_samples:
        return (
            f"{num(samples, 0)} server samples in this stage, but not of the signal this rule "
            "reads (GPU busy, or the running gauge): decided on client-side evidence"
        )
    return (
        f"only {num(samples, 0)} server sample{'s' if samples != 1 else ''} in this stage "
        f"(server signals are used from {thresholds.min_telemetry_samples}): decided on "
        "client-side evidence"
    )


#: The thresholds the confidence of every finding reads (besides the rule's own).
CONFIDENCE_READS: tuple[str, ...] = (
    "confident_requests",
    "confidence_margin",
    "confidence_margin_tight",
    "confidence_ratio",
    "confidence_ratio_tight",
    "compute_bound_share",
    "queue_stood_share",
    "client_delay_bound_s",
    "client_delay_min_late",
    "sim_lag_mean_s",
    "sim_late_share",
)


def _requests(ctx: Context, finding: Finding) -> float:
    """The requests a finding rests on: its own count, else the stage's answered requests."""
    return finding.requests if not math.isnan(finding.requests) else ctx.v("requests")


def _confidence(ctx: Context, finding: Finding, stated: Sequence[Doubt]) -> str:
    """``low`` on client-side evidence; else ``high`` lowered by the doubts the verdict states
    (``stated``: the margins of the test that named its cause, :func:`_margins`, and the
    finding's own) and by those of the evidence's kind
    (:mod:`~locust_llm.report.diagnosis.confidence`): no resource model nor server time split,
    fewer than ``confident_requests`` requests, delay in the timings that is not the server's
    (:func:`_timing_caveats`)."""
    if finding.client_side or not ctx.telemetry_ok:
        return "low"
    doubts = list(stated)
    has_model = not math.isnan(ctx.v("mfu"))
    if not (has_model or ctx.row.get("ttft_split_source") == "server"):
        doubts.append(Doubt(1))
    if _requests(ctx, finding) < ctx.thresholds.confident_requests:
        doubts.append(Doubt(1))
    if finding.kind != "client_bound" and _timing_caveats(ctx):
        doubts.append(Doubt(1))
    return confidence_level(doubts)


def _margins(ctx: Context, cause: str) -> list[Doubt]:
    """What puts the finding on the margins of the tests that named its cause: the step bound
    (compute's share of the busy time near ``compute_bound_share``), a prefill cause's decode
    against TTFT, an admission cause's queue (requests waiting in a share of the samples near
    ``queue_stood_share``), the KV cache named beside a token budget spent on prompts
    (:mod:`~locust_llm.report.diagnosis.confidence`). The benchmark measures what each
    confidence level is worth (bench/results/verdict_accuracy.md)."""
    th, found = ctx.thresholds, []
    if cause in STEP_CAUSES:
        found.append(step_margin(ctx.v("compute_time_share"), th))
        probed = str(ctx.server.get("device_probed") or "")
        found.append(probed_device(probed) if probed else None)
    if cause in ("bandwidth_bound_decode", "host_overhead"):
        found.append(host_margin(ctx.v("memory_time_share"), ctx.v("host_time_share"), th))
    if cause in _PREFILL:
        found.append(prefill_ratio(*_decode_and_ttft(ctx), th))
    if CAUSES.get(cause) is not None and CAUSES[cause].gate == "admission":
        found.append(queue_margin(ctx.server_v("waiting_share"), th))
        budget = is_num(ctx.server.get("max_num_batched_tokens"))
        if cause == "kv_capacity_admission" and budget and _step_cause(ctx) in _PREFILL:
            # the scheduler tests the token budget before KV blocks: with prompts' compute
            # setting the steps, the budget is spent in many of them beside the full cache
            found.append(KV_BESIDE_BUDGET)
    return [d for d in found if d is not None]


_PREFILL: tuple[str, ...] = ("prefill_interference", "compute_bound_prefill")


def _timing_caveats(ctx: Context) -> list[str]:
    """Delay in the stage's timings that is not the server's: a simulated server that fell
    behind its real-time schedule (:mod:`~locust_llm.report.diagnosis.lag`), first tokens the
    worker read late (:func:`~locust_llm.report.diagnosis.client_delay.late_first_reads`)."""
    out = []
    lag, late = ctx.v("sim_lag_mean_s"), ctx.v("sim_late_share")
    if lagged(lag if lag == lag else 0.0, late if late == late else 0.0):
        out.append(
            f"the simulated server fell behind its schedule {ctx.where} (mean step lag "
            f"{ms(lag, 1)} ms, {pct(late)} of its steps late): its timings include host delay, "
            "so the confidence is one level lower"
        )
    reads = late_first_reads(ctx.row, ctx.thresholds)
    if reads is not None:
        out.append(
            f"the worker read first tokens up to {ms(reads[0], 1)} ms late {ctx.where}: the "
            "client's timings include that delay, so the confidence is one level lower"
        )
    return out


def stage_verdict(
    row: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]] = (),
    *,
    thresholds: Thresholds = Thresholds(),
    max_num_seqs: int | None = None,
    server: Mapping[str, Any] | None = None,
) -> Verdict:
    """The verdict for one stage: the first rule of :data:`RULES` that finds something."""
    flags = dict(server or {})
    if max_num_seqs:
        flags.setdefault("max_num_seqs", max_num_seqs)
    ctx = Context(row, rows or (row,), thresholds, flags)
    stage = int(row["stage"]) if is_num(row.get("stage")) else None
    for r in RULES:
        found = r.check(ctx)
        if found is None:
            continue
        actions = found.actions or CAUSE_ACTIONS.get(found.cause) or KIND_ACTIONS[found.kind]
        if found.kind == "low_concurrency":
            actions = CAUSE_ACTIONS["under_loaded"]
        if found.kind == "overloaded" and found.cause:
            actions = (*KIND_ACTIONS["overloaded"][:1], *actions)
        evidence = found.evidence
        samples = ctx.v("server_samples")
        if found.client_side:
            evidence = (*evidence, _client_side_note(samples, thresholds))
        if found.kind != "client_bound":
            evidence = (*evidence, *_timing_caveats(ctx))
        doubts = (*_margins(ctx, found.cause), *found.doubts)
        evidence = (*evidence, *(d.evidence for d in doubts))
        return Verdict(
            kind=found.kind,
            evidence=evidence,
            actions=(
                *in_engine_words(
                    with_values(tuple(dict.fromkeys(actions)), flags), engine_of(flags)
                ),
                *found.extra_actions,
            ),
            stage=stage,
            cause=found.cause,
            rule=r.name,
            requests=int(_requests(ctx, found)) if not math.isnan(_requests(ctx, found)) else 0,
            telemetry_samples=int(samples) if not math.isnan(samples) else 0,
            confidence=_confidence(ctx, found, doubts),
            client_side=found.client_side,
        )
    raise AssertionError("the last rule always finds")  # pragma: no cover


def stage_verdicts(
    rows: Sequence[Mapping[str, Any]],
    *,
    thresholds: Thresholds = Thresholds(),
    max_num_seqs: int | None = None,
    server: Mapping[str, Any] | None = None,
) -> list[Verdict]:
    """One verdict per stage row, in the rows' order."""
    return [
        stage_verdict(r, rows, thresholds=thresholds, max_num_seqs=max_num_seqs, server=server)
        for r in rows
    ]


def _as_overall(v: Verdict, evidence: Sequence[str], actions: Sequence[str]) -> Verdict:
    return Verdict(
        v.kind, tuple(evidence), tuple(actions), None, v.cause, v.rule, v.requests,
        v.telemetry_samples, v.confidence, v.client_side,
    )  # fmt: skip


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
                return _as_overall(v, v.evidence, v.actions)
    usable = [
        r
        for r, v in zip(rows, verdicts, strict=True)
        if v.kind != "insufficient_data" or _v(r, "requests") >= thresholds.min_requests
    ]
    if not usable:
        evidence = [e for v in verdicts for e in v.evidence] or ["the run has no stages"]
        said = tuple(dict.fromkeys(a for v in verdicts for a in v.actions))  # the stages' own
        return Verdict(
            "insufficient_data", tuple(evidence[:3]), said or ACTIONS["insufficient_data"]
        )
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
            f"{at_cap.headline}: " + "; ".join(at_cap.evidence)
        )
        actions += [a for a in at_cap.actions if a not in actions]
    return _as_overall(chosen, evidence, actions)
