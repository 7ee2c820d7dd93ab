"""``locust-llm sim``: start the simulated OpenAI-compatible server from flags and/or TOML.

Settings come from the defaults, then ``--config FILE`` (TOML, keys = SimConfig field names),
then the flags given on the command line. With ``--port 0`` the first stdout line is the URL
the server listens on (flushed), so scripts and tests can read it. Stops on SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any

from locust_llm.sim.config import SimConfig, config_from_mapping, load_toml

#: flag -> (SimConfig field, type, help). Defaults live in SimConfig only.
_FLAGS: dict[str, tuple[str, Any, str]] = {
    "--model": ("model", str, "roofline preset or config.json/.gguf path"),
    "--gpu": ("gpu", str, "roofline GPU preset (one GPU; --tp of them)"),
    "--bandwidth": (
        "bandwidth",
        str,
        "a device given by hand instead of --gpu: its memory "
        "bandwidth, e.g. 40GB/s (with --flops and --memory)",
    ),
    "--flops": ("flops", str, "that device's dense peak, e.g. 1.2TFLOPS"),
    "--memory": ("memory", str, "that device's memory, e.g. 64GiB"),
    "--tokenizer": (
        "tokenizer",
        str,
        "a local Hugging Face tokenizer folder: prompts counted "
        "(and their blocks hashed) by its tokens and chat template, as the engine "
        "counts them",
    ),
    "--tp": ("tp", int, "tensor-parallel degree: GPUs the weights and KV are split over"),
    "--interconnect": (
        "interconnect",
        str,
        "GPU link of the all-reduces: nvlink, nvlink3, pcie, infiniband, ...",
    ),
    "--pp": ("pp", int, "pipeline-parallel degree: stages the layers are split over"),
    "--pp-interconnect": (
        "pp_interconnect",
        str,
        "link between pipeline stages (default: --interconnect; infiniband between nodes)",
    ),
    "--engine": (
        "engine",
        str,
        "engine profile: host time per step and per sequence, steps per schedule, API server "
        "and (de)tokenization time (vllm-v1, vllm-v0, vllm-v0-multistep, sglang, tgi, llamacpp)",
    ),
    "--decode-steps-per-schedule": (
        "decode_steps_per_schedule",
        int,
        "decode steps per scheduling decision (0 = the engine profile's)",
    ),
    "--served-model-name": ("served_model_name", str, "model name clients use"),
    "--bind": ("host", str, "address to listen on (127.0.0.1; 0.0.0.0 to expose)"),
    "--port": ("port", int, "port (0 = any free port; the URL is printed first)"),
    "--max-num-seqs": ("max_num_seqs", int, "most sequences in a batch"),
    "--max-num-batched-tokens": ("max_num_batched_tokens", int, "token budget per step"),
    "--block-size": ("block_size", int, "tokens per KV block"),
    "--max-model-len": ("max_model_len", int, "longest prompt + output allowed"),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float, "share of memory used"),
    "--num-gpu-blocks-override": ("num_gpu_blocks_override", int, "fixed KV budget in blocks"),
    "--bandwidth-efficiency": ("bandwidth_efficiency", float, "achieved/peak bandwidth"),
    "--compute-efficiency": ("compute_efficiency", float, "achieved/peak FLOP/s"),
    "--output-len": ("output_len", str, "EOS-ended output lengths, e.g. lognormal:256:0.5"),
    "--tokens-per-chunk": ("tokens_per_chunk", int, "tokens per streamed chunk"),
    "--reasoning-tokens": (
        "reasoning_tokens",
        int,
        "chat answers open with N reasoning tokens (delta.reasoning_content, counted in "
        "usage.completion_tokens_details.reasoning_tokens), as a reasoning model's do",
    ),
    "--trace": ("trace_path", str, "write one JSON line per request to FILE"),
    "--step-trace": ("step_trace_path", str, "write one JSON line per engine step to FILE"),
    "--listen-backlog": ("listen_backlog", int, "pending connects the kernel may queue"),
    "--seed": ("seed", int, "seed of lengths, text and faults"),
}


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the ``sim`` flags (every default comes from SimConfig or the TOML file)."""
    parser.add_argument("--config", metavar="FILE", help="TOML file of settings (flags win)")
    for flag, (name, kind, help_text) in _FLAGS.items():
        default = getattr(SimConfig(), name)
        parser.add_argument(
            flag, dest=name, type=kind, default=None, help=f"{help_text} (default {default!r})"
        )
    parser.add_argument(
        "--step-overhead-ms",
        type=float,
        default=None,
        help="fixed cost per step in ms (default: the engine profile's, 2 for vllm-v1)",
    )
    parser.add_argument(
        "--step-overhead-per-seq-us",
        type=float,
        default=None,
        help="host time per sequence in a step, in µs (default: the engine profile's, 80 for "
        "vllm-v1)",
    )
    parser.add_argument(
        "--tp-step-overhead-us",
        type=float,
        default=None,
        help="host and synchronisation time per step for each tensor-parallel GPU beyond the "
        "first, in µs (default: the engine profile's)",
    )
    parser.add_argument(
        "--api-server-ms",
        type=float,
        default=None,
        help="API server time per request before the engine sees it, in ms (default: the "
        "engine profile's)",
    )
    parser.add_argument(
        "--detokenize-us-per-token",
        type=float,
        default=None,
        help="time from a token's step end to the socket, in µs per token (default: the "
        "engine profile's)",
    )
    parser.add_argument(
        "--no-chunked-prefill", action="store_true", default=None, help="prefill whole prompts only"
    )
    parser.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="reuse the KV of cached prompt prefixes, as vLLM (default on; "
        "--no-enable-prefix-caching turns it off)",
    )
    parser.add_argument(
        "--zero-cost",
        action="store_true",
        default=None,
        help="steps cost only the overhead (benchmarks the HTTP front)",
    )
    parser.add_argument(
        "--oom",
        action="store_true",
        default=None,
        help="fail requests with a CUDA out-of-memory 500 instead of preempting",
    )
    parser.add_argument(
        "--fault",
        action="append",
        dest="faults",
        metavar="KIND:RATE[:ARG]",
        help="inject a fault (repeatable): http500, http503, http429, "
        "disconnect, malformed, stall, slow_first_byte",
    )


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """Defaults < TOML file < flags given."""
    values: dict[str, Any] = load_toml(args.config) if getattr(args, "config", None) else {}
    for name, _, _ in _FLAGS.values():
        if getattr(args, name, None) is not None:
            values[name] = getattr(args, name)
    if getattr(args, "step_overhead_ms", None) is not None:
        values["step_overhead_s"] = args.step_overhead_ms / 1000.0
    if getattr(args, "step_overhead_per_seq_us", None) is not None:
        values["step_overhead_per_seq_s"] = args.step_overhead_per_seq_us / 1e6
    if getattr(args, "tp_step_overhead_us", None) is not None:
        values["tp_step_overhead_s"] = args.tp_step_overhead_us / 1e6
    if getattr(args, "api_server_ms", None) is not None:
        values["api_server_s"] = args.api_server_ms / 1000.0
    if getattr(args, "detokenize_us_per_token", None) is not None:
        values["detokenize_s_per_token"] = args.detokenize_us_per_token / 1e6
    if getattr(args, "no_chunked_prefill", None):
        values["enable_chunked_prefill"] = False
    if getattr(args, "enable_prefix_caching", None) is not None:
        values["enable_prefix_caching"] = args.enable_prefix_caching
    for flag in ("zero_cost", "oom"):
        if getattr(args, flag, None):
            values[flag] = True
    if getattr(args, "faults", None):
        values["faults"] = tuple(args.faults)
    return config_from_mapping(values)


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted."""
    config = config_from_args(args)
    asyncio.run(_serve(config))
    return 0


async def _serve(config: SimConfig) -> None:
    from locust_llm.sim.server import SimServer

    server = SimServer(config)
    await server.start()
    print(server.url, flush=True)
    app = server.app
    print(
        f"simulating {app.engine.model.name} on "
        + (f"{app.engine.gpu_count} x " if app.engine.gpu_count > 1 else "")
        + f"{app.engine.gpu.name}"
        + (f" ({app.engine.pp} pipeline stages)" if app.engine.pp > 1 else "")
        + ": "
        f"{app.engine.total_blocks} KV blocks ({app.engine.capacity_tokens} tokens), "
        f"model name {app.model_name!r}",
        file=sys.stderr,
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop()
