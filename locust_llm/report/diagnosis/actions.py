"""What to do about each diagnosed cause, and why it helps (pure data + one formatter).

Every verdict kind and every cause (the limiting resource and mechanism), both declared in
:mod:`locust_llm.report.diagnosis.causes`, has its actions here, and nothing else does
(``tests/test_causes.py``); each action says why it helps that cause. Actions never advise the
change that made the problem: a compute-bound or interference verdict is not told to quantize
(bandwidth is not what limits), an OOM is not told to lower ``--max-num-batched-tokens`` (a
too-small token budget is itself a cause of failed requests). Where the server's current flag
value is known it is quoted (:func:`with_values`). The flags are vLLM's;
:mod:`locust_llm.report.diagnosis.engines` puts them in the words of the engine a run identified.
"""

from __future__ import annotations

from collections.abc import Mapping

#: cause -> actions, each "what: why it helps".
CAUSE_ACTIONS: dict[str, tuple[str, ...]] = {
    "kv_capacity_admission": (
        "cap concurrency at the recommended cap: past it requests only wait for KV space "
        "(queue time grows, throughput does not)",
        "compress the KV cache (--kv-cache-dtype fp8): half the bytes per token, about twice the "
        "sequences admitted",
        "give the KV cache more memory: raise --gpu-memory-utilization{gpu_memory_utilization} "
        "if nothing else shares the GPU, quantize the weights (--quantization awq|gptq|fp8), or "
        "split the model (--tensor-parallel-size N) so each GPU holds fewer weights",
        "shorter contexts admit more sequences: cap --max-model-len or the output length",
    ),
    "batch_limit_admission": (
        "raise the batch limit (--max-num-seqs{max_num_seqs}): the batch is full while KV "
        "space is left, so requests wait for a slot",
        "or cap concurrency at the recommended cap and scale out: beyond the slots requests only "
        "queue",
    ),
    "under_loaded": (
        "offer more load (more users or a higher rate): throughput still grows with load, the "
        "server has headroom",
        "raising --max-num-seqs{max_num_seqs} or --max-num-batched-tokens will not help until "
        "load fills the batch; if production traffic is this low, a smaller or shared GPU "
        "serves it at this latency",
    ),
    "compute_bound_prefill": (
        "reuse shared prompt prefixes (--enable-prefix-caching): cached tokens need no compute",
        "add compute: tensor parallelism (--tensor-parallel-size N) or a GPU with more FLOP/s; "
        "FP8 weights use the faster FP8 tensor cores",
        "where chunked prefill is off, turn it on (--enable-chunked-prefill) so one long "
        "prompt does not stall the others' decode steps",
    ),
    "prefill_interference": (
        "lower --max-num-batched-tokens{max_num_batched_tokens}: each decode step carries fewer "
        "prefill tokens, so TPOT falls (TTFT rises a little)",
        "separate prefill from decode (disaggregated prefill, or prompt-heavy traffic on its "
        "own instances)",
        "reuse shared prompt prefixes (--enable-prefix-caching): fewer prefill tokens per step",
        "not quantization or speculative decoding: the steps are compute-bound, not bandwidth-"
        "bound",
    ),
    "compute_bound_decode": (
        "the decode batch is past the roofline's ridge: lower --max-num-seqs{max_num_seqs} if "
        "TPOT breaks its SLO (smaller steps), else this is the throughput ceiling",
        "add compute: tensor parallelism or a GPU with more FLOP/s; FP8 weights use FP8 "
        "tensor cores",
    ),
    "bandwidth_bound_decode": (
        "quantize the weights (--quantization awq|gptq|fp8): fewer bytes read per decode step",
        "compress the KV cache (--kv-cache-dtype fp8): fewer KV bytes read per step",
        "speculative decoding (--speculative-config): several tokens per weight read",
        "a larger batch amortises each weight read (raise --max-num-seqs while KV space lasts); "
        "a GPU with more memory bandwidth",
    ),
    "host_overhead": (
        "keep the decode steps in CUDA graphs (drop --enforce-eager): one launch per step, "
        "not one per kernel",
        "a faster host CPU, or fewer processes beside the engine: the steps wait on the "
        "host's work (scheduling, launches, sampling), not on the device",
        "amortise the fixed per-step work over more sequences: raise --max-num-seqs"
        "{max_num_seqs} while KV space lasts",
        "not quantization, a larger GPU or more tensor parallelism: neither compute nor memory "
        "bandwidth sets the steps",
    ),
}

#: verdict kind -> actions, for kinds that are not a resource (and the fallback of one).
KIND_ACTIONS: dict[str, tuple[str, ...]] = {
    "prefill_bound": CAUSE_ACTIONS["compute_bound_prefill"],
    "decode_bound": CAUSE_ACTIONS["bandwidth_bound_decode"],
    "low_concurrency": CAUSE_ACTIONS["under_loaded"],
    "memory_oom": (
        "free memory for the KV cache: quantize the weights (--quantization awq|gptq|fp8) or "
        "compress the KV cache (--kv-cache-dtype fp8)",
        "raise --gpu-memory-utilization{gpu_memory_utilization} (e.g. 0.90 -> 0.95) if nothing "
        "else shares the GPU",
        "admit fewer or shorter sequences: lower --max-num-seqs{max_num_seqs}, cap --max-model-len",
        "without chunked prefill (--enable-chunked-prefill off), a --max-num-batched-tokens"
        "{max_num_batched_tokens} below the longest prompt fails the longer prompts: it must be "
        "at least the longest prompt (with chunked prefill, vLLM V1's default, prompts are split "
        "across steps and it need not be)",
    ),
    "overloaded": (
        "cap load at the recommended cap; queue or shed (HTTP 429) beyond it",
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
        "give the model and device (--model, --gpu or --bandwidth/--flops/--memory) for the "
        "resource model",
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

#: ``insufficient_data`` for a stage in which no request ended: telemetry, the resource model
#: and longer stages are beside the point (nothing was measured); what stopped the requests is.
NO_REQUEST_ACTIONS: tuple[str, ...] = (
    "no request of this stage ended: the run's output and locust.log say why (the server "
    "unreachable or --host wrong, or the run stopped before the stage's requests)",
)

#: ``prefill_interference`` read from the client's inter-token gaps (no resource model): the
#: stalls are whole prompts computed in one step, so chunking them comes first, then the cause's
#: own actions (:data:`CAUSE_ACTIONS`).
STALL_ACTIONS: tuple[str, ...] = (
    "where chunked prefill is off, turn it on (--enable-chunked-prefill) with a "
    "--max-num-batched-tokens{max_num_batched_tokens} a few decode batches wide: prompts are "
    "then computed a chunk a step beside the decoding sequences, not whole in one long step "
    "that every decoding sequence waits for",
)

#: What to do about a failure kind once its message is known (the message replaces the
#: guesses of :data:`ERROR_ACTIONS`, which stay for failures that carried none).
ERROR_ADVICE: dict[str, str] = {
    "http_429": "raise the server's or gateway's limits, or offer less",
    "timeout": "lower concurrency or raise the client timeout",
    "http_5xx": "the server's log has the rest",
    "http_4xx": "the server refused the requests: change what it names",
    "connect": "check the server is up and takes this many connections",
    "stream_broken": "look for server restarts or proxies that cut streams",
    "bad_payload": "check the endpoint and the API the user class speaks",
    "oom": "see memory_oom",
}


def error_action(kind: str, message: str = "", said: int = 0, count: int = 0) -> str | None:
    """The action line of a failure kind: its most frequent ``message`` (``said`` of the
    kind's ``count`` failures carried it) and what to do, else the kind's hint; None for a kind
    without one."""
    if message and kind in ERROR_ADVICE:
        return f'{kind}: "{message}" ({said} of {count}); {ERROR_ADVICE[kind]}'
    return ERROR_ACTIONS.get(kind)


#: server flags an action may quote: {name} placeholders filled by :func:`with_values`.
FLAGS: tuple[str, ...] = (
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "total_slots",
)


def with_values(actions: tuple[str, ...], server: Mapping[str, object]) -> tuple[str, ...]:
    """``actions`` with each ``{flag}`` placeholder replaced by " (now V)" when ``server``
    says V, else removed."""
    fill = {
        flag: f" (now {server[flag]})" if server.get(flag) not in (None, "") else ""
        for flag in FLAGS
    }
    return tuple(a.format(**fill) for a in actions)
