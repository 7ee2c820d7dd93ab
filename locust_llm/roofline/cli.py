"""``locust-llm roofline``: print the theoretical floors for a model on a device.

The model is a preset key, a local Hugging Face config.json (or its folder), or a .gguf file;
the device a preset key or a description by hand (``--bandwidth --flops --memory``). Output is a
table with units in the headers, or ``--json`` with every number in base units.
"""

from __future__ import annotations

import argparse
import json
import math
import struct

from locust_llm.errors import InputError
from locust_llm.roofline import floors as roofline
from locust_llm.roofline.devices import DeviceArgs


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Flags of ``locust-llm roofline``."""
    parser.add_argument(
        "--model",
        default="mistral-7b",
        help="model preset key, path to a config.json (or its folder), a .gguf file, or a "
        "Hugging Face id (org/name) whose config.json is in the local Hugging Face cache; "
        "nothing is downloaded (default: mistral-7b)",
    )
    parser.add_argument(
        "--gpu",
        default=None,
        help="GPU preset key (default rtx4090 unless --bandwidth/--flops/--memory describe one)",
    )
    parser.add_argument("--bandwidth", help="memory bandwidth of a custom device, e.g. 40GB/s")
    parser.add_argument("--flops", help="dense peak of a custom device, e.g. 1.2TFLOPS")
    parser.add_argument("--memory", help="memory capacity of a custom device, e.g. 24GiB")
    parser.add_argument(
        "--context",
        type=int,
        default=1000,
        help="tokens of context in KV per sequence during decode (default 1000)",
    )
    parser.add_argument(
        "--batch", type=int, default=1, help="sequences decoded together (default 1)"
    )
    parser.add_argument(
        "--input-tokens",
        type=int,
        default=1024,
        help="prompt length for the prefill floor (default 1024)",
    )
    parser.add_argument(
        "--weight-bits",
        type=float,
        default=None,
        help="weight precision in bits (default: the model's, 16)",
    )
    parser.add_argument(
        "--kv-bits", type=float, default=None, help="KV-cache precision in bits (default 16)"
    )
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.9,
        help="fraction of device memory the server may use (default 0.9)",
    )
    parser.add_argument(
        "--memory-reserve",
        default="1GiB",
        help="memory per GPU kept outside weights and KV (CUDA context, activations), e.g. "
        "1GiB (default 1GiB, as the simulator)",
    )
    parser.add_argument(
        "--block-size",
        type=int,
        default=roofline.KV_BLOCK_TOKENS,
        help=f"tokens per KV block; the KV capacity is whole blocks "
        f"(default {roofline.KV_BLOCK_TOKENS}, vLLM's)",
    )
    parser.add_argument(
        "--tp",
        type=int,
        default=1,
        help="tensor-parallel degree: GPUs the model is split over (default 1)",
    )
    parser.add_argument(
        "--interconnect",
        default="nvlink",
        help="GPU link for the tensor-parallel all-reduces: "
        + ", ".join(roofline.INTERCONNECT_PRESETS)
        + " (default nvlink)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print JSON with every number in base units"
    )
    parser.add_argument("--list", action="store_true", help="list the model and GPU presets")


def _gpu_from_args(args: argparse.Namespace) -> roofline.GpuSpec:

    custom = [value or "" for value in (args.bandwidth, args.flops, args.memory)]
    gpu = args.gpu or ("" if any(custom) else "rtx4090")
    device = DeviceArgs(gpu, *custom).resolve()
    assert device is not None  # a preset or a custom device is always given here
    return device


def _list_presets() -> str:
    lines = ["models:"]
    for key, m in roofline.MODEL_PRESETS.items():
        lines.append(
            f"  {key:<14} {m.total_params / 1e9:7.2f}B params, {m.num_layers} layers, "
            f"{m.num_kv_heads} kv heads" + (f", {m.num_experts} experts" if m.num_experts else "")
        )
    lines.append("gpus:")
    for key, g in roofline.GPU_PRESETS.items():
        lines.append(
            f"  {key:<14} {g.memory_bandwidth_bytes_s / 1e9:7.0f} GB/s, "
            f"{g.flops.get('fp16', math.nan) / 1e12:7.1f} TFLOP/s fp16, "
            f"{g.memory_bytes / roofline.GiB:6.1f} GiB ({g.memory_bytes / 1e9:.1f} GB)"
        )
    return "\n".join(lines)


def format_table(r: roofline.Roofline) -> str:
    """Human table: units in the row labels."""

    def ms(x: float) -> str:
        return f"{x * 1e3:.2f}"

    rows = [
        (
            "model / gpu",
            f"{r.model} on {r.gpu} (weights {r.weight_bits:g}-bit, KV {r.kv_bits:g}-bit)",
        ),
        (
            "tensor parallel",
            "1 GPU" if r.tp == 1 else f"{r.tp} GPUs over {r.interconnect} (figures per GPU)",
        ),
        ("parameters (total)", f"{r.total_params / 1e9:.3f} B"),
        ("weights per GPU (GB)", f"{r.weights_bytes_per_gpu / 1e9:.2f}"),
        ("parameters read per decode step", f"{r.params_read_per_step / 1e9:.3f} B"),
        ("weight bytes read per step (GB)", f"{r.weight_bytes_read_per_step / 1e9:.2f}"),
        ("KV elements per token", f"{r.kv_elements_per_token:,}"),
        ("KV bytes per token (KB)", f"{r.kv_bytes_per_token / 1e3:.1f}"),
        ("KV bytes per sequence at context (MB)", f"{r.kv_bytes_per_sequence / 1e6:.1f}"),
        ("bytes read per decode step (GB)", f"{r.bytes_read_per_step / 1e9:.3f}"),
        ("decode floor = TPOT floor (ms)", ms(r.decode_step_floor_s)),
        (
            "  memory time / compute time (ms)",
            f"{ms(r.decode_memory_time_s)} / {ms(r.decode_compute_time_s)}",
        ),
        ("  all-reduces + logits gather per step (ms)", ms(r.decode_comm_time_s)),
        ("decode ceiling at this batch (tokens/s)", f"{r.decode_tokens_per_s_ceiling:,.0f}"),
        (
            "batch where decode turns compute-bound",
            "never (memory-bound at any batch)"
            if r.compute_bound_batch is None
            else f"{r.compute_bound_batch:,}",
        ),
        ("prefill floor for the input (ms)", ms(r.prefill_floor_s)),
        (
            "  compute time / weight-read time (ms)",
            f"{ms(r.prefill_compute_time_s)} / {ms(r.prefill_weight_read_time_s)}",
        ),
        ("memory reserve per GPU (GiB)", f"{r.memory_reserve_bytes / roofline.GiB:.2f}"),
        (
            "KV budget after weights and reserve (GB)",
            f"{r.kv_budget_bytes / 1e9:.2f}"
            + ("" if r.fits else f"  (weights do not fit; {r.fit_advice})"),
        ),
        ("KV capacity (tokens)", f"{r.kv_capacity_tokens:,.0f}"),
        ("KV capacity (sequences at this length)", f"{r.kv_capacity_sequences:,.1f}"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _check_numbers(args: argparse.Namespace) -> None:
    """One-line refusals of numbers the floors cannot be computed from."""
    for flag, value in (("--weight-bits", args.weight_bits), ("--kv-bits", args.kv_bits)):
        if value is not None and not (math.isfinite(value) and 0 < value <= 64):
            raise InputError(f"{flag} {value:g}: expected bits per value in (0, 64]")
    for flag, count in (
        ("--context", args.context),
        ("--batch", args.batch),
        ("--input-tokens", args.input_tokens),
    ):
        if count is not None and count < 1:
            raise InputError(f"{flag} {count}: expected a whole number >= 1")
    util = args.gpu_memory_utilization
    if not (math.isfinite(util) and 0 < util <= 1):
        raise InputError(f"--gpu-memory-utilization {util:g}: expected a fraction in (0, 1]")


def _read_model(spec: str) -> roofline.ModelSpec:
    """The model preset or file; a damaged config.json / GGUF is one line, not a traceback."""
    try:
        return roofline.get_model(spec)
    except InputError:
        raise
    except (ValueError, KeyError, IndexError, TypeError, OSError, struct.error) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"--model {spec}: cannot read it as a model ({detail})") from None


def run(args: argparse.Namespace) -> int:
    """Run ``locust-llm roofline``."""
    if args.list:
        print(_list_presets())
        return 0
    _check_numbers(args)
    model = _read_model(args.model).with_bits(args.weight_bits, args.kv_bits)
    gpu = _gpu_from_args(args)
    result = roofline.compute(
        model,
        gpu,
        roofline.Workload(
            context_tokens=args.context,
            batch=args.batch,
            input_tokens=args.input_tokens,
            gpu_memory_utilization=args.gpu_memory_utilization,
            memory_reserve_bytes=roofline.parse_quantity(
                args.memory_reserve, "memory", flag="--memory-reserve", allow_zero=True
            ),
            block_size=args.block_size,
            tp=args.tp,
            interconnect=args.interconnect,
        ),
    )
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        print(format_table(result))
    return 0
