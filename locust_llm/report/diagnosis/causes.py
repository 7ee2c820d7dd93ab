"""The verdict's vocabulary, declared once: every verdict kind and every cause (pure data).

A verdict has two names. Its **kind** (:data:`KINDS`) is the source document's bottleneck
vocabulary (prefill / decode / OOM / low concurrency) plus the kinds the report adds
(overloaded, client-bound, errors, healthy, insufficient data, unstable). Its **cause**
(:data:`CAUSES`) is the limiting resource and the mechanism by which it limits. The causes are
also the simulator's ground-truth labels (:mod:`locust_llm.sim.labels` derives its labels and
their verdict kinds from here), so the simulator's traces can judge the verdict; the actions
(:mod:`locust_llm.report.diagnosis.actions`) and the rules page (``docs/rules.md``) are keyed
by these names. Imports nothing from the package.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    """A verdict kind: what the stage's bottleneck is, in the words a reader looks for."""

    name: str
    meaning: str  # one line
    source_name: str = ""  # the source document's bottleneck, where the kind alone names one


@dataclass(frozen=True, kw_only=True)
class Cause:
    """A limiting resource and mechanism; also a ground-truth label of the simulator."""

    name: str
    kind: str  # the verdict kind a correct diagnosis of this cause gives
    resource: str  # the limiting resource as people read it (the verdict's headline)
    gate: str  # where it limits: "admission" (requests wait to enter the batch), "load" or "step"
    mechanism: str  # how that resource limits the server
    meaning: str  # one line
    source_name: str  # the source document's bottleneck


_KINDS: tuple[Kind, ...] = (
    Kind("prefill_bound", "prompt processing (prefill) sets the latency and throughput"),
    Kind("decode_bound", "token generation (decode steps) sets the latency and throughput"),
    Kind("memory_oom", "requests failed with out-of-memory", "OOM / memory"),
    Kind(
        "low_concurrency",
        "the server has headroom: more load still adds throughput",
        "low concurrency",
    ),
    Kind("overloaded", "past the knee: requests queue and throughput no longer grows"),
    Kind("client_bound", "the load generator, not the server, limits the stage"),
    Kind("errors", "the error rate is above its threshold"),
    Kind("healthy", "server signals show nothing saturated"),
    Kind("insufficient_data", "too few requests or server signals to tell the bottleneck"),
    Kind("unstable", "soak stages only: latency or throughput drifts over time"),
)

_CAUSES: tuple[Cause, ...] = (
    Cause(
        name="kv_capacity_admission",
        kind="overloaded",
        resource="KV capacity",
        gate="admission",
        mechanism="requests wait for KV-cache blocks (or are preempted for them)",
        meaning="the KV cache is full: new sequences wait for space, past it only queue time grows",
        source_name="OOM / memory",
    ),
    Cause(
        name="batch_limit_admission",
        kind="overloaded",
        resource="batch slots",
        gate="admission",
        mechanism="requests wait for a slot under --max-num-seqs / the server's slots",
        meaning="the batch is at its limit while KV space is left: requests wait for a batch slot",
        source_name="low concurrency (batch limit)",
    ),
    Cause(
        name="under_loaded",
        kind="low_concurrency",
        resource="none (under-loaded)",
        gate="load",
        mechanism="too little load to keep the device busy",
        meaning="the device idles between steps: more load would still add throughput",
        source_name="low concurrency",
    ),
    Cause(
        name="prefill_interference",
        kind="prefill_bound",
        resource="compute (prefill chunks in decode steps)",
        gate="step",
        mechanism="prompt chunks share the decode steps and set their compute time",
        meaning="other requests' prompts slow every decode step: decoding outlasts TTFT",
        source_name="prefill",
    ),
    Cause(
        name="compute_bound_prefill",
        kind="prefill_bound",
        resource="compute (prefill)",
        gate="step",
        mechanism="the prompt tokens' FLOPs set the compute-bound steps",
        meaning="prompts are most of the tokens computed and TTFT is the longer phase",
        source_name="prefill",
    ),
    Cause(
        name="compute_bound_decode",
        kind="decode_bound",
        resource="compute (decode)",
        gate="step",
        mechanism="a decode batch past the roofline's ridge is compute-bound",
        meaning="the decode batch is large enough that its FLOPs, not its bytes, set each step",
        source_name="decode",
    ),
    Cause(
        name="bandwidth_bound_decode",
        kind="decode_bound",
        resource="memory bandwidth (decode)",
        gate="step",
        mechanism="reading weights and KV cache from memory sets each decode step",
        meaning="decode steps are memory-bound: every token reads the weights once more",
        source_name="decode",
    ),
    Cause(
        name="host_overhead",
        kind="decode_bound",
        resource="host time per step (scheduling, launches)",
        gate="step",
        mechanism="the engine's per-step and per-sequence host work outlasts the device's",
        meaning="neither compute nor memory sets the steps: the host's work per step does",
        source_name="decode",
    ),
)

#: Every verdict kind by name, in the report's order.
KIND_TABLE: dict[str, Kind] = {k.name: k for k in _KINDS}
KINDS: tuple[str, ...] = tuple(KIND_TABLE)

#: Every cause by name, in the order of the simulator's ground-truth label rules.
CAUSES: dict[str, Cause] = {c.name: c for c in _CAUSES}

#: cause -> the verdict kind a correct diagnosis gives.
CAUSE_KINDS: dict[str, str] = {c.name: c.kind for c in _CAUSES}

#: The causes that set the step time (what the resource model's step bound names).
STEP_CAUSES: tuple[str, ...] = tuple(c.name for c in _CAUSES if c.gate == "step")


def source_name(kind: str, cause: str = "") -> str:
    """The source document's name for a verdict's bottleneck (its cause's, else its kind's),
    or ""."""
    if cause in CAUSES:
        return CAUSES[cause].source_name
    return KIND_TABLE[kind].source_name if kind in KIND_TABLE else ""
