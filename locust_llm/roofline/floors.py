"""Theoretical floors of LLM serving: bytes and FLOPs per step over bandwidth and peak FLOP/s.

Decode reads every weight it uses once per step plus the KV cache of every sequence in the batch;
arithmetic units are far faster than memory, so a decode step cannot take less than
(bytes read) / (memory bandwidth). Prefill does ~2 FLOPs per parameter per token plus attention,
so its floor is the larger of compute time and weight-read time. The simulator (``locust_llm.sim``)
steps its engine with :func:`step_cost`, the same accounting, and the report divides the floor by
measured TPOT to get model bandwidth utilization.

Pure: no I/O except :func:`model_from_config` / :func:`model_from_gguf`, which read a local file.

Accounting (stated once, used everywhere):

- parameters are derived from shapes: attention q/k/v/o (+ q/k/v bias for qwen2), gated MLP
  (3 matrices: gate, up, down), RMSNorm vectors, router, input embedding, LM head (tied or not);
- per decode step the input embedding is not read whole: one row per sequence. The LM head is
  read whole (it is the embedding when tied). MoE layers read only the experts the batch
  activates: with uniform routing a batch of ``b`` tokens touches
  ``E * (1 - (1 - k/E) ** b)`` distinct experts in expectation, at most ``E``;
- KV bytes per token of context = layers x 2 (K and V) x kv_heads x head_dim x kv_bits / 8;
- FLOPs = 2 x active parameters x tokens + attention (QK^T and AV: 4 x heads x head_dim per
  token per layer per context token attended; causal prefill attends to half the chunk); the LM
  head's 2 x vocab x hidden only at the one position per sequence whose logits are sampled (a
  prefill chunk's other positions never reach it, as in vLLM's ``logits_indices``).
"""

from __future__ import annotations

import difflib
import itertools
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from locust_llm.errors import InputError
from locust_llm.roofline import hf_cache

# --------------------------------------------------------------------------------------------
# Specs


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """Shapes of a decoder-only transformer. Parameter counts are derived, never typed in."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int  # query heads
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # dense MLP width (per expert for MoE unless moe_intermediate_size)
    vocab_size: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False  # qwen2 family
    num_experts: int = 0  # 0 = dense MLP
    experts_per_token: int = 0
    num_shared_experts: int = 0
    moe_intermediate_size: int = 0  # 0 = intermediate_size
    weight_bits: float = 16.0
    kv_bits: float = 16.0

    # ---- parameter counts -------------------------------------------------------------------
    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def attention_params_per_layer(self) -> int:
        q = self.hidden_size * self.num_heads * self.head_dim
        kv = 2 * self.hidden_size * self.num_kv_heads * self.head_dim
        o = self.num_heads * self.head_dim * self.hidden_size
        bias = (self.num_heads + 2 * self.num_kv_heads) * self.head_dim if self.qkv_bias else 0
        return q + kv + o + bias

    @property
    def expert_params(self) -> int:
        """One gated MLP of the MoE width (one expert)."""
        width = self.moe_intermediate_size or self.intermediate_size
        return 3 * self.hidden_size * width

    @property
    def dense_mlp_params_per_layer(self) -> int:
        """MLP weights every token reads: the dense MLP, or the router + shared experts."""
        if self.num_experts == 0:
            return 3 * self.hidden_size * self.intermediate_size
        return self.hidden_size * self.num_experts + self.num_shared_experts * self.expert_params

    @property
    def norm_params_per_layer(self) -> int:
        return 2 * self.hidden_size

    @property
    def always_read_params(self) -> int:
        """Parameters read by every decode step whatever the batch (no embedding, no experts)."""
        per_layer = (
            self.attention_params_per_layer
            + self.dense_mlp_params_per_layer
            + self.norm_params_per_layer
        )
        lm_head = self.vocab_size * self.hidden_size  # read whole, tied or not
        return self.num_layers * per_layer + self.hidden_size + lm_head

    @property
    def total_params(self) -> int:
        experts = self.num_layers * self.num_experts * self.expert_params
        per_layer = (
            self.attention_params_per_layer
            + self.dense_mlp_params_per_layer
            + self.norm_params_per_layer
        )
        return (
            self.embedding_params
            + self.num_layers * per_layer
            + experts
            + self.hidden_size
            + self.lm_head_params
        )

    def active_experts(self, tokens: int) -> float:
        """Expected distinct routed experts per layer touched by ``tokens`` tokens (uniform)."""
        if self.num_experts == 0 or tokens <= 0:
            return 0.0
        k, e = self.experts_per_token, self.num_experts
        return min(float(e), e * (1.0 - (1.0 - k / e) ** tokens))

    def params_read(self, batch: int) -> float:
        """Weights (in parameters) one decode step over ``batch`` sequences reads."""
        experts = self.num_layers * self.active_experts(batch) * self.expert_params
        return self.always_read_params + experts + batch * self.hidden_size

    def params_per_token(self) -> int:
        """Parameters one token is multiplied through (2 FLOPs each), the embedding excluded."""
        experts = self.num_layers * self.experts_per_token * self.expert_params
        return self.always_read_params + experts

    # ---- bytes ----------------------------------------------------------------------------
    @property
    def weight_bytes_per_param(self) -> float:
        return self.weight_bits / 8.0

    @property
    def weights_bytes(self) -> float:
        return self.total_params * self.weight_bytes_per_param

    @property
    def kv_elements_per_token(self) -> int:
        return self.num_layers * 2 * self.num_kv_heads * self.head_dim

    @property
    def kv_bytes_per_token(self) -> float:
        return self.kv_elements_per_token * self.kv_bits / 8.0

    def with_bits(
        self, weight_bits: float | None = None, kv_bits: float | None = None
    ) -> ModelSpec:
        """A copy quantized to other weight / KV-cache bit widths."""
        return replace(
            self,
            weight_bits=self.weight_bits if weight_bits is None else float(weight_bits),
            kv_bits=self.kv_bits if kv_bits is None else float(kv_bits),
        )

    def sharded(self, tp: int) -> ModelSpec:
        """One GPU's shard under tensor parallelism of degree ``tp`` (Megatron-style, as vLLM).

        Query heads, the MLP (each expert's) width and the vocabulary (embedding and LM head)
        split over ``tp`` GPUs; KV heads split too, or are replicated when ``tp`` exceeds them
        (each GPU keeps one); norms and the MoE router are replicated. The shard's parameter,
        byte and FLOP counts are then one GPU's. ``tp`` must divide the query heads, and the KV
        heads must divide ``tp`` or be divisible by it (vLLM's rule).
        """
        check_tp(self, tp)
        if tp == 1:
            return self
        return replace(
            self,
            name=f"{self.name}/tp{tp}",
            num_heads=self.num_heads // tp,
            num_kv_heads=max(1, self.num_kv_heads // tp),
            intermediate_size=-(-self.intermediate_size // tp),
            moe_intermediate_size=-(-(self.moe_intermediate_size or self.intermediate_size) // tp)
            if self.num_experts
            else 0,
            vocab_size=-(-self.vocab_size // tp),
        )


def check_tp(model: ModelSpec, tp: int) -> None:
    """InputError unless ``tp`` is a valid tensor-parallel degree for ``model``."""
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        raise InputError(f"--tp must be an integer >= 1, got {tp!r}")
    if model.num_heads % tp:
        divisors = [d for d in range(1, model.num_heads + 1) if model.num_heads % d == 0]
        raise InputError(
            f"--tp {tp}: {model.name} has {model.num_heads} attention heads, which {tp} GPUs "
            f"cannot split evenly; use one of {', '.join(map(str, divisors[:8]))}"
        )
    kv = model.num_kv_heads
    if kv % tp and tp % kv:
        raise InputError(
            f"--tp {tp}: {model.name} has {kv} KV heads; the degree must divide them or be a "
            "multiple of them"
        )


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """A device's ceilings. FLOP/s are dense (no sparsity) tensor rates per precision."""

    name: str
    memory_bandwidth_bytes_s: float
    flops: dict[str, float] = field(default_factory=dict)  # precision -> dense FLOP/s
    memory_bytes: float = math.nan
    source: str = ""  # where the numbers come from
    tdp_watts: float = math.nan
    idle_watts: float = math.nan

    def peak_flops(self, weight_bits: float = 16.0) -> float:
        """The dense rate that applies to weights of ``weight_bits`` (fp16/bf16 for >8 bits).

        8-bit weights use the fp8 (else int8) rate; narrower weights are dequantized to 16-bit
        math on most kernels, so they use the fp16 rate. Devices without that precision fall
        back to fp16.
        """
        base = self.flops.get("fp16") or self.flops.get("bf16") or next(iter(self.flops.values()))
        if weight_bits == 8:
            return self.flops.get("fp8") or self.flops.get("int8") or base
        return base


# --------------------------------------------------------------------------------------------
# Presets. Shapes from each model's published config.json; device numbers from the vendor's
# datasheet named beside them (dense, i.e. without 2:4 sparsity).

GiB = 1024**3
GB = 1e9
TB = 1e12
T = 1e12
P = 1e15

MODEL_PRESETS: dict[str, ModelSpec] = {
    "mistral-7b": ModelSpec(  # mistralai/Mistral-7B-v0.1 config.json
        name="mistral-7b",
        num_layers=32,
        hidden_size=4096,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=32000,
    ),
    "llama-3.1-8b": ModelSpec(  # meta-llama/Llama-3.1-8B config.json
        name="llama-3.1-8b",
        num_layers=32,
        hidden_size=4096,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=128256,
    ),
    "llama-3.1-70b": ModelSpec(  # meta-llama/Llama-3.1-70B config.json
        name="llama-3.1-70b",
        num_layers=80,
        hidden_size=8192,
        num_heads=64,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=28672,
        vocab_size=128256,
    ),
    "qwen2.5-0.5b": ModelSpec(  # Qwen/Qwen2.5-0.5B-Instruct config.json
        name="qwen2.5-0.5b",
        num_layers=24,
        hidden_size=896,
        num_heads=14,
        num_kv_heads=2,
        head_dim=64,
        intermediate_size=4864,
        vocab_size=151936,
        tie_word_embeddings=True,
        qkv_bias=True,
    ),
    "qwen2.5-7b": ModelSpec(  # Qwen/Qwen2.5-7B-Instruct config.json
        name="qwen2.5-7b",
        num_layers=28,
        hidden_size=3584,
        num_heads=28,
        num_kv_heads=4,
        head_dim=128,
        intermediate_size=18944,
        vocab_size=152064,
        qkv_bias=True,
    ),
    "qwen2.5-72b": ModelSpec(  # Qwen/Qwen2.5-72B-Instruct config.json
        name="qwen2.5-72b",
        num_layers=80,
        hidden_size=8192,
        num_heads=64,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=29568,
        vocab_size=152064,
        qkv_bias=True,
    ),
    "mixtral-8x7b": ModelSpec(  # mistralai/Mixtral-8x7B-v0.1 config.json
        name="mixtral-8x7b",
        num_layers=32,
        hidden_size=4096,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=32000,
        num_experts=8,
        experts_per_token=2,
    ),
}

GPU_PRESETS: dict[str, GpuSpec] = {
    "rtx4090": GpuSpec(
        name="rtx4090",
        memory_bandwidth_bytes_s=1008 * GB,
        memory_bytes=24 * GiB,
        flops={"fp16": 165.2 * T, "fp8": 330.3 * T, "int8": 660.6 * T},
        tdp_watts=450,
        idle_watts=25,
        source="NVIDIA Ada Lovelace GPU architecture whitepaper v2.1, appendix A (GeForce RTX "
        "4090): 1008 GB/s; FP16/BF16 tensor 165.2 TF and FP8 330.3 TF with FP32 accumulate, "
        "INT8 660.6 TOPS, dense",
    ),
    "l4": GpuSpec(
        name="l4",
        memory_bandwidth_bytes_s=300 * GB,
        memory_bytes=24 * GB,
        flops={"fp16": 121 * T, "fp8": 242.5 * T, "int8": 242.5 * T},
        tdp_watts=72,
        idle_watts=16,
        source="NVIDIA L4 datasheet: 300 GB/s; BF16 121 TF, FP8 242.5 TF, INT8 242.5 TOPS "
        "(datasheet lists 2x with sparsity)",
    ),
    "l40s": GpuSpec(
        name="l40s",
        memory_bandwidth_bytes_s=864 * GB,
        memory_bytes=48 * GB,
        flops={"fp16": 362.05 * T, "fp8": 733 * T, "int8": 733 * T},
        tdp_watts=350,
        idle_watts=35,
        source="NVIDIA L40S datasheet: 864 GB/s; BF16 362.05 TF, FP8 733 TF, INT8 733 TOPS, dense",
    ),
    "a10": GpuSpec(
        name="a10",
        memory_bandwidth_bytes_s=600 * GB,
        memory_bytes=24 * GB,
        flops={"fp16": 125 * T, "int8": 250 * T},
        tdp_watts=150,
        idle_watts=20,
        source="NVIDIA A10 datasheet: 600 GB/s; BF16 125 TF, INT8 250 TOPS, dense (no FP8)",
    ),
    "a100-40gb": GpuSpec(
        name="a100-40gb",
        memory_bandwidth_bytes_s=1555 * GB,
        memory_bytes=40 * GB,
        flops={"fp16": 312 * T, "int8": 624 * T},
        tdp_watts=400,
        idle_watts=50,
        source="NVIDIA A100 datasheet (40GB SXM): 1,555 GB/s; BF16 312 TF, INT8 624 TOPS, dense",
    ),
    "a100-80gb": GpuSpec(
        name="a100-80gb",
        memory_bandwidth_bytes_s=2039 * GB,
        memory_bytes=80 * GB,
        flops={"fp16": 312 * T, "int8": 624 * T},
        tdp_watts=400,
        idle_watts=50,
        source="NVIDIA A100 datasheet (80GB SXM): 2,039 GB/s; BF16 312 TF, INT8 624 TOPS, dense",
    ),
    "h100-sxm": GpuSpec(
        name="h100-sxm",
        memory_bandwidth_bytes_s=3.35 * TB,
        memory_bytes=80 * GB,
        flops={"fp16": 989.4 * T, "fp8": 1978.9 * T, "int8": 1978.9 * T},
        tdp_watts=700,
        idle_watts=70,
        source="NVIDIA H100 datasheet (SXM): 3.35 TB/s; BF16 989 TF, FP8 1,979 TF, INT8 1,979 "
        "TOPS (datasheet's sparse figures halved)",
    ),
    "h100-pcie": GpuSpec(
        name="h100-pcie",
        memory_bandwidth_bytes_s=2.0 * TB,
        memory_bytes=80 * GB,
        flops={"fp16": 756.5 * T, "fp8": 1513 * T, "int8": 1513 * T},
        tdp_watts=350,
        idle_watts=50,
        source="NVIDIA H100 datasheet (PCIe): 2 TB/s; BF16 756 TF, FP8 1,513 TF, INT8 1,513 "
        "TOPS (datasheet's sparse figures halved)",
    ),
    "h200": GpuSpec(
        name="h200",
        memory_bandwidth_bytes_s=4.8 * TB,
        memory_bytes=141 * GB,
        flops={"fp16": 989.4 * T, "fp8": 1978.9 * T, "int8": 1978.9 * T},
        tdp_watts=700,
        idle_watts=75,
        source="NVIDIA H200 datasheet (SXM): 4.8 TB/s, 141 GB; BF16 989 TF, FP8 1,979 TF, INT8 "
        "1,979 TOPS (datasheet's sparse figures halved)",
    ),
    "b200": GpuSpec(
        name="b200",
        memory_bandwidth_bytes_s=8 * TB,
        memory_bytes=180 * GB,
        flops={"fp16": 2.25 * P, "fp8": 4.5 * P, "int8": 4.5 * P},
        tdp_watts=1000,
        idle_watts=100,
        source="NVIDIA HGX B200 datasheet, per GPU: 8 TB/s, 180 GB; BF16 2.25 PF, FP8 4.5 PF, "
        "INT8 4.5 POPS (datasheet's sparse figures halved)",
    ),
    "mi300x": GpuSpec(
        name="mi300x",
        memory_bandwidth_bytes_s=5.3 * TB,
        memory_bytes=192 * GB,
        flops={"fp16": 1307.4 * T, "fp8": 2614.9 * T, "int8": 2614.9 * T},
        tdp_watts=750,
        idle_watts=90,
        source="AMD Instinct MI300X datasheet: 5.3 TB/s, 192 GB HBM3; FP16/BF16 1,307.4 TF, "
        "FP8 2,614.9 TF, INT8 2,614.9 TOPS, dense",
    ),
}


def get_gpu(name: str) -> GpuSpec:
    """A GPU preset by key; an unknown key is an InputError listing the presets."""
    try:
        return GPU_PRESETS[name.lower()]
    except KeyError:
        raise InputError(
            f"unknown GPU preset {name!r}{_close(name, GPU_PRESETS)}; presets: "
            f"{', '.join(GPU_PRESETS)} (or describe the device with --bandwidth/--flops/--memory)"
        ) from None


def _close(name: str, known: Iterable[str]) -> str:
    """`` (did you mean a, b?)`` for the known names close to ``name``, else ""."""
    close = difflib.get_close_matches(name.lower(), list(known), n=3, cutoff=0.6)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def get_model(name_or_path: str) -> ModelSpec:
    """A model preset by key, or a local config.json / model dir / .gguf file by path."""
    key = name_or_path.lower()
    if key in MODEL_PRESETS:
        return MODEL_PRESETS[key]
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".gguf" and path.is_file():
        return model_from_gguf(path)
    if path.is_file():
        return model_from_config(path)
    if hf_cache.looks_like_model_id(name_or_path):
        cached = hf_cache.cached_file(name_or_path)
        if cached is not None:
            return model_from_config(cached, name=name_or_path)
        raise InputError(
            f"unknown model {name_or_path!r}: not a preset, not a path, and its config.json is "
            f"not in the Hugging Face cache ({hf_cache.cache_dir()}); locust-llm never "
            f"downloads: fetch it with `huggingface-cli download {name_or_path} config.json`"
        )
    raise InputError(
        f"unknown model {name_or_path!r}{_close(name_or_path, MODEL_PRESETS)}: not a preset "
        f"({', '.join(MODEL_PRESETS)}), "
        "no config.json / .gguf file at that path, and not a Hugging Face id (org/name)"
    )


# --------------------------------------------------------------------------------------------
# Hugging Face config.json and GGUF readers

SUPPORTED_FAMILIES = ("llama", "mistral", "qwen2", "mixtral", "gemma", "gemma2")
_CONFIG_KEYS = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
)


def model_from_config_dict(cfg: dict[str, Any], name: str = "config") -> ModelSpec:
    """A ModelSpec from a parsed Hugging Face config.json dict."""
    family = str(cfg.get("model_type", "")).lower()
    if family not in SUPPORTED_FAMILIES:
        raise InputError(
            f"{name}: model_type {family or '(missing)'!r} is not supported; supported: "
            f"{', '.join(SUPPORTED_FAMILIES)}. Other decoder-only models work if their config "
            f"has the keys {', '.join(_CONFIG_KEYS)} (+ num_key_value_heads, head_dim): set "
            "model_type to 'llama' in a copy"
        )
    missing = [k for k in _CONFIG_KEYS if k not in cfg]
    if missing:
        raise InputError(
            f"{name}: config.json lacks key {missing[0]!r} (needed: {', '.join(_CONFIG_KEYS)})"
        )
    try:
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        head_dim = int(cfg.get("head_dim") or hidden // heads)
        experts = int(cfg.get("num_local_experts", 0) or 0)
        default_tied = family in ("gemma", "gemma2")
        bits = _quant_bits(cfg)
        return ModelSpec(
            name=str(cfg.get("_name_or_path") or name),
            num_layers=int(cfg["num_hidden_layers"]),
            hidden_size=hidden,
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=head_dim,
            intermediate_size=int(cfg["intermediate_size"]),
            vocab_size=int(cfg["vocab_size"]),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", default_tied)),
            qkv_bias=family == "qwen2" or bool(cfg.get("attention_bias", False)),
            num_experts=experts,
            experts_per_token=int(cfg.get("num_experts_per_tok", 0) or 0) if experts else 0,
            weight_bits=bits,
        )
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name}: config.json has a non-numeric shape value ({exc})") from exc


def _quant_bits(cfg: dict[str, Any]) -> float:
    """Weight bits from torch_dtype / quantization_config (16 when unknown)."""
    quant = cfg.get("quantization_config") or {}
    if isinstance(quant, dict) and quant.get("bits"):
        return float(quant["bits"])
    if isinstance(quant, dict) and "fp8" in str(quant.get("quant_method", "")).lower():
        return 8.0
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    return 32.0 if dtype in ("float32", "fp32") else 16.0


def model_from_config(path: Path, name: str = "") -> ModelSpec:
    """Read a local Hugging Face config.json (named ``name``, default its path)."""
    try:
        cfg = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read config.json ({exc})") from exc
    if not isinstance(cfg, dict):
        raise InputError(f"{path}: config.json is not a JSON object")
    return model_from_config_dict(cfg, name=name or str(path))


def model_from_gguf(path: Path) -> ModelSpec:
    """Read the shapes (and effective weight bits) from a GGUF file's header (needs ``gguf``)."""
    try:
        from gguf import GGUFReader  # type: ignore[import-untyped]
    except ImportError:
        raise InputError(
            "reading .gguf needs the gguf package: pip install 'locust-llm[gguf]'"
        ) from None
    reader = GGUFReader(str(path))

    def field_value(key: str) -> Any:
        f = reader.fields.get(key)
        if f is None:
            return None
        if f.types and f.types[0].name == "STRING":
            return bytes(f.parts[f.data[0]]).decode()
        if f.types and f.types[0].name == "ARRAY":
            return len(f.data)
        return f.parts[f.data[0]][0].item()

    arch = field_value("general.architecture") or "llama"
    needed = {
        "layers": f"{arch}.block_count",
        "hidden": f"{arch}.embedding_length",
        "heads": f"{arch}.attention.head_count",
        "ffn": f"{arch}.feed_forward_length",
    }
    values = {k: field_value(v) for k, v in needed.items()}
    missing = [needed[k] for k, v in values.items() if v is None]
    if missing:
        raise InputError(f"{path}: GGUF header lacks {missing[0]!r}")
    heads = int(values["heads"])
    hidden = int(values["hidden"])
    kv_heads = field_value(f"{arch}.attention.head_count_kv") or heads
    head_dim = field_value(f"{arch}.attention.key_length") or hidden // heads
    vocab = field_value("tokenizer.ggml.tokens") or field_value(f"{arch}.vocab_size")
    tensor_names = {t.name for t in reader.tensors}
    experts = int(field_value(f"{arch}.expert_count") or 0)
    spec = ModelSpec(
        name=field_value("general.name") or path.stem,
        num_layers=int(values["layers"]),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=int(kv_heads),
        head_dim=int(head_dim),
        intermediate_size=int(values["ffn"]),
        vocab_size=int(vocab or 0),
        tie_word_embeddings="output.weight" not in tensor_names,
        qkv_bias="blk.0.attn_q.bias" in tensor_names,
        num_experts=experts,
        experts_per_token=int(field_value(f"{arch}.expert_used_count") or 0) if experts else 0,
    )
    total_bytes = sum(int(t.n_bytes) for t in reader.tensors)
    total_elems = sum(int(t.n_elements) for t in reader.tensors)
    if total_elems:
        spec = spec.with_bits(weight_bits=round(8.0 * total_bytes / total_elems, 3))
    return spec


# --------------------------------------------------------------------------------------------
# Costs


@dataclass(frozen=True, kw_only=True)
class Interconnect:
    """The GPU-to-GPU link tensor parallelism all-reduces over (one direction, per GPU).

    One all-reduce of a message of ``m`` bytes over ``tp`` GPUs takes
    ``latency(tp) + 2 (tp - 1) / tp x m / (bandwidth x bus_efficiency)``: a fixed time that
    the collective costs however small its message (``latency_by_tp``, measured at a few
    degrees; :meth:`latency` interpolates between them in log2(tp) and holds the end values
    beyond them) plus the ring's share of the message over the link at the bandwidth a real
    all-reduce reaches (``bus_efficiency`` of the vendor's figure).
    """

    name: str
    bandwidth_bytes_s: float
    latency_by_tp: tuple[tuple[int, float], ...]  # (tp, seconds of a small all-reduce), sorted
    bus_efficiency: float = 1.0
    source: str = ""

    def __post_init__(self) -> None:
        degrees = [tp for tp, _ in self.latency_by_tp]
        if not degrees or degrees != sorted(set(degrees)) or degrees[0] < 2:
            raise ValueError(f"{self.name}: latency_by_tp needs degrees >= 2 in rising order")

    def latency(self, tp: int) -> float:
        """Fixed time of one all-reduce over ``tp`` GPUs."""
        points = self.latency_by_tp
        if tp <= points[0][0]:
            return points[0][1]
        for (lo, lo_s), (hi, hi_s) in itertools.pairwise(points):
            if tp <= hi:
                share = (math.log2(tp) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
                return lo_s + share * (hi_s - lo_s)
        return points[-1][1]

    def _collective_s(self, wire_bytes: float, tp: int) -> float:
        """A collective over ``tp`` GPUs that sends ``wire_bytes`` over each GPU's link: the
        fixed time and the bytes at the bandwidth a real collective reaches (0 at ``tp`` 1)."""
        if tp <= 1:
            return 0.0
        return self.latency(tp) + wire_bytes / (self.bandwidth_bytes_s * self.bus_efficiency)

    def allreduce_s(self, message_bytes: float, tp: int) -> float:
        """One all-reduce of ``message_bytes`` over ``tp`` GPUs (0 at ``tp`` 1)."""
        return self._collective_s(2.0 * (tp - 1) / tp * message_bytes, tp)

    def send_s(self, message_bytes: float) -> float:
        """One point-to-point send of ``message_bytes`` from one GPU to the next (pipeline
        parallelism's hand-off between stages): the two-GPU fixed time and the bytes at the
        bandwidth a real collective reaches."""
        return self._collective_s(message_bytes, 2)

    def gather_s(self, message_bytes: float, tp: int) -> float:
        """One gather of ``message_bytes`` in all (each GPU holding 1 / ``tp`` of it) over
        ``tp`` GPUs: (tp - 1) / tp of the message over the link, with the all-reduce's fixed
        time and bus efficiency (both assumed: no published gather table at these sizes was
        found)."""
        return self._collective_s((tp - 1) / tp * message_bytes, tp)


#: vLLM's custom all-reduce on H100 (NVLink 4, NVSwitch), host-timed over 5,000 calls launched
#: one by one, outside a CUDA graph (https://github.com/sgl-project/sglang/pull/2904,
#: `sgl-kernel/tests/test_trt_reduce.py`, float32 messages), so its small-message times carry
#: the launches that vLLM's decode steps, replayed as CUDA graphs, do not pay: an upper bound
#: there (NCCL inside a graph on 4 x H800: 0.5 us at 1 KiB against 3.5 us without,
#: https://github.com/NVIDIA/nccl/issues/1984); the per-GPU step time fitted on top of it
#: (locust_llm.sim.engine_profiles) takes up what it over- or understates at the fitted
#: degrees. Published: 0.0095 / 0.0088 / 0.0087 ms at tp 2 for 512 / 4,096 / 32,768 elements,
#: 0.0091 / 0.0085 / 0.0092 at tp 4, 0.0101 / 0.0093 / 0.0118 at tp 8 (the medians below), and
#: 0.0266 / 0.0402 / 0.0450 ms at 4 MiB (tp 2 / 4 / 8): the ring's wire bytes over the time
#: beyond the fixed one give 236 / 202 / 210 GB/s, 0.47 of NVLink 4's 450 GB/s (the median).
#: The model fits that table within 22% (in sample: its constants come from it;
#: tests/test_sim_tp.py).
_H100_CUSTOM_AR = (
    "fixed time and bus efficiency: vLLM's custom all-reduce on H100, "
    "https://github.com/sgl-project/sglang/pull/2904 (0.0088 / 0.0091 / 0.0101 ms at tp 2 / 4 / 8 "
    "for small messages; 236 / 202 / 210 GB/s of wire bytes at 4 MiB, 0.47 of 450 GB/s)"
)
_NVLINK_LATENCY = ((2, 8.8e-6), (4, 9.1e-6), (8, 10.1e-6))
#: NCCL all-reduce of a few bytes between GPUs without NVLink: 2 x Tesla T4 20.36 us
#: (https://github.com/NVIDIA/nccl/issues/428), 4 x V100 behind one PCIe switch 19.4 us at
#: 4 KB inside a CUDA graph (https://github.com/haohervchb/sglang-V100/pull/2), 8 x RTX 4090
#: 42.56 us (https://github.com/NVIDIA/nccl/issues/1530). vLLM's custom all-reduce is off on
#: PCIe beyond two GPUs, so NCCL's times stand.
_PCIE_LATENCY = ((2, 20.4e-6), (4, 19.4e-6), (8, 42.6e-6))
_PCIE_SOURCE = (
    "fixed time: NCCL's small all-reduce without NVLink (NVIDIA/nccl issues 428 and 1530, "
    "haohervchb/sglang-V100 PR 2: 20.4 / 19.4 / 42.6 us at 2 / 4 / 8 GPUs); bus efficiency "
    "assumed NVLink's 0.47 (no published PCIe all-reduce bandwidth at decode sizes was found)"
)

#: Link presets. Bandwidths are the vendor's per-direction figures; the fixed time and the bus
#: efficiency of an all-reduce are published measurements (each preset's ``source``).
INTERCONNECT_PRESETS: dict[str, Interconnect] = {
    "nvlink": Interconnect(
        name="nvlink",
        bandwidth_bytes_s=450 * GB,
        latency_by_tp=_NVLINK_LATENCY,
        bus_efficiency=0.47,
        source="NVIDIA H100 SXM datasheet: NVLink 900 GB/s total, 450 GB/s each direction; "
        + _H100_CUSTOM_AR,
    ),
    "nvlink3": Interconnect(
        name="nvlink3",
        bandwidth_bytes_s=300 * GB,
        latency_by_tp=_NVLINK_LATENCY,
        bus_efficiency=0.47,
        source="NVIDIA A100 SXM datasheet: NVLink 600 GB/s total, 300 GB/s each direction; "
        "fixed time and bus efficiency assumed the H100's (no published A100 custom "
        "all-reduce table was found): " + _H100_CUSTOM_AR,
    ),
    "pcie5": Interconnect(
        name="pcie5",
        bandwidth_bytes_s=64 * GB,
        latency_by_tp=_PCIE_LATENCY,
        bus_efficiency=0.47,
        source="PCIe 5.0 x16: 128 GB/s total, 64 GB/s each direction; " + _PCIE_SOURCE,
    ),
    "pcie4": Interconnect(
        name="pcie4",
        bandwidth_bytes_s=32 * GB,
        latency_by_tp=_PCIE_LATENCY,
        bus_efficiency=0.47,
        source="PCIe 4.0 x16: 64 GB/s total, 32 GB/s each direction; " + _PCIE_SOURCE,
    ),
}
INTERCONNECT_PRESETS["pcie"] = INTERCONNECT_PRESETS["pcie4"]
#: Between nodes: one 400 Gb/s NDR InfiniBand NIC per GPU (ConnectX-7, as DGX/HGX H100 nodes
#: have), 50 GB/s each direction. NCCL reaches 46-48 GB/s per NIC on it (an NCCL maintainer,
#: https://github.com/NVIDIA/nccl-tests/issues/290), 0.94 of the line rate. A send of a few
#: bytes between two nodes' GPUs: 30.7-34.2 us from 256 B to 8 KiB (nccl-tests sendrecv_perf,
#: two nodes, one GPU each, https://github.com/NVIDIA/nccl-tests/issues/214); an all-reduce of
#: 8-16 KiB between two nodes' GPUs over one ConnectX-7 link, 30.3-35.2 us
#: (https://github.com/NVIDIA/dgx-spark-playbooks/pull/103). Only two ranks were measured: the
#: fixed time is held at 31 us for any degree (a lower bound for an all-reduce over more ranks
#: across nodes).
INTERCONNECT_PRESETS["infiniband"] = Interconnect(
    name="infiniband",
    bandwidth_bytes_s=50 * GB,
    latency_by_tp=((2, 31e-6),),
    bus_efficiency=0.94,
    source="NDR InfiniBand, 400 Gb/s per GPU: 50 GB/s each direction; bus efficiency 47 of "
    "50 GB/s (https://github.com/NVIDIA/nccl-tests/issues/290); fixed time 31 us, a send or "
    "all-reduce of a few KiB between two nodes' GPUs (nccl-tests issue 214: 30.7-34.2 us; "
    "NVIDIA/dgx-spark-playbooks PR 103: 30.3-35.2 us), held for more ranks (not measured)",
)

#: Bytes per activation element all-reduced between tensor-parallel GPUs (bf16).
ACTIVATION_BYTES = 2.0


def get_interconnect(name: str) -> Interconnect:
    """A link preset by key; an unknown key is an InputError listing the presets."""
    try:
        return INTERCONNECT_PRESETS[name.lower()]
    except KeyError:
        raise InputError(
            f"unknown interconnect {name!r}; presets: {', '.join(INTERCONNECT_PRESETS)}"
        ) from None


def allreduce_seconds(model: ModelSpec, tokens: int, tp: int, link: Interconnect) -> float:
    """Time of one step's tensor-parallel all-reduces (0 at ``tp`` 1).

    Two all-reduces per layer (after attention, after the MLP) and one after the embedding
    (split over the vocabulary, each GPU looks up its rows) of ``tokens x hidden``
    activations, each :meth:`Interconnect.allreduce_s`. Not overlapped with compute (vLLM's
    default).
    """
    if tp <= 1 or tokens <= 0:
        return 0.0
    message = tokens * model.hidden_size * ACTIVATION_BYTES
    return (2 * model.num_layers + 1) * link.allreduce_s(message, tp)


def logits_gather_seconds(model: ModelSpec, sampled: int, tp: int, link: Interconnect) -> float:
    """Time of one step's gather of the sampled positions' logits (0 at ``tp`` 1).

    The LM head is split over the vocabulary, so each GPU computes ``vocab / tp`` logits per
    sampled position and the step gathers them whole before sampling (vLLM's
    ``LogitsProcessor._gather_logits``), ``sampled x vocab`` bf16 values.
    """
    if tp <= 1 or sampled <= 0:
        return 0.0
    return link.gather_s(sampled * model.vocab_size * ACTIVATION_BYTES, tp)


def tp_comm_seconds(
    model: ModelSpec, tokens: int, sampled: int, tp: int, link: Interconnect
) -> float:
    """A step's tensor-parallel communication: the layers' all-reduces over ``tokens`` and the
    logits gather over the ``sampled`` positions."""
    return allreduce_seconds(model, tokens, tp, link) + logits_gather_seconds(
        model, sampled, tp, link
    )


@dataclass(frozen=True, slots=True)
class StepCost:
    """Work of one engine step on one GPU: FLOPs done, bytes moved through its memory, and the
    time its tensor-parallel all-reduces take on the link (0 on one GPU)."""

    flops: float
    bytes: float
    comm_s: float = 0.0

    def times(
        self, gpu: GpuSpec, weight_bits: float, *, compute_eff: float = 1.0, bw_eff: float = 1.0
    ) -> tuple[float, float]:
        """(compute time, memory time) at the given efficiencies."""
        compute = self.flops / (gpu.peak_flops(weight_bits) * compute_eff)
        memory = self.bytes / (gpu.memory_bandwidth_bytes_s * bw_eff)
        return compute, memory

    def seconds(
        self, gpu: GpuSpec, weight_bits: float, *, compute_eff: float = 1.0, bw_eff: float = 1.0
    ) -> float:
        """max(compute time, memory time) at the given efficiencies, plus the all-reduces."""
        compute, memory = self.times(gpu, weight_bits, compute_eff=compute_eff, bw_eff=bw_eff)
        return max(compute, memory) + self.comm_s


def attention_flops(model: ModelSpec, query_tokens: int, attended_tokens: float) -> float:
    """QK^T + AV FLOPs for ``query_tokens`` queries each attending ``attended_tokens`` keys."""
    return (
        4.0 * model.num_layers * model.num_heads * model.head_dim * query_tokens * attended_tokens
    )


def check_pp(model: ModelSpec, pp: int) -> None:
    """InputError unless ``pp`` is a valid pipeline-parallel degree for ``model``."""
    if not isinstance(pp, int) or isinstance(pp, bool) or pp < 1:
        raise InputError(f"--pp must be an integer >= 1, got {pp!r}")
    if pp > model.num_layers:
        raise InputError(
            f"--pp {pp}: {model.name} has {model.num_layers} layers, fewer than the stages"
        )


def pp_layers(num_layers: int, pp: int) -> tuple[int, ...]:
    """Layers per pipeline stage as vLLM splits them (``get_pp_indices``): an even share each,
    and the remainder one layer each to the stages before the last, nearest it first (the last
    stage also holds the LM head)."""
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return tuple(parts)


@lru_cache(maxsize=64)
def stage_of(model: ModelSpec, layers: int) -> ModelSpec:
    """``model`` cut to ``layers`` of its layers: one pipeline stage's share. Its step costs
    (:func:`step_cost`) count the LM head, which only the last stage has (the engine takes it
    out for the others); its weight bytes count the embedding and the LM head, which
    :func:`stage_weights_bytes` gives to the first and the last stage."""
    if layers == model.num_layers:
        return model
    return replace(model, name=f"{model.name}/{layers}-layers", num_layers=layers)


def stage_shards(model: ModelSpec, tp: int = 1, pp: int = 1) -> list[tuple[ModelSpec, float]]:
    """Each pipeline stage's shard on one of its GPUs and the weight bytes that GPU holds: its
    layers, the embedding on the first stage and the LM head on the last (a copy of the
    embedding when the two are tied)."""
    check_pp(model, pp)
    if pp == 1:
        shard = shard_of(model, tp)
        return [(shard, shard.weights_bytes)]
    stages = []
    layers = pp_layers(model.num_layers, pp)
    for k, n in enumerate(layers):
        shard = shard_of(stage_of(model, n), tp)
        per_param = shard.weight_bytes_per_param
        matrix = shard.vocab_size * shard.hidden_size * per_param  # embedding or LM head
        body = shard.weights_bytes - (shard.embedding_params + shard.lm_head_params) * per_param
        held = body + (matrix if k == 0 else 0.0) + (matrix if k == len(layers) - 1 else 0.0)
        stages.append((shard, held))
    return stages


def stage_weights_bytes(model: ModelSpec, tp: int = 1, pp: int = 1) -> float:
    """Weight bytes on one GPU of a model split over ``tp`` x ``pp`` GPUs: the heaviest
    stage's (:func:`stage_shards`)."""
    return max(held for _, held in stage_shards(model, tp, pp))


def stage_kv_blocks(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    gpu_memory_utilization: float,
    reserve_bytes: float,
    tp: int,
    pp: int,
    block_size: int,
) -> int:
    """KV blocks a model over ``tp`` x ``pp`` GPUs gets: each GPU's memory left after its
    stage's weights and the reserve, over its stage's KV bytes per block; the fewest of them,
    as vLLM gives every worker the smallest worker's block count."""
    blocks = []
    for shard, held in stage_shards(model, tp, pp):
        budget = gpu.memory_bytes * gpu_memory_utilization - held - reserve_bytes
        blocks.append(int(budget // (block_size * shard.kv_bytes_per_token)) if budget > 0 else 0)
    return min(blocks)


def pp_send_seconds(model: ModelSpec, tokens: int, link: Interconnect) -> float:
    """One hand-off between pipeline stages: the step's hidden states and residual
    (``2 x tokens x hidden`` bf16 values, what vLLM's ``IntermediateTensors`` carry) sent to
    the next stage's GPU, whole by each tensor-parallel rank over its own link (vLLM can send
    each rank a slice and all-gather after; not modelled, so an upper bound)."""
    if tokens <= 0:
        return 0.0
    return link.send_s(2 * tokens * model.hidden_size * ACTIVATION_BYTES)


@lru_cache(maxsize=64)
def shard_of(model: ModelSpec, tp: int) -> ModelSpec:
    """:meth:`ModelSpec.sharded`, cached (the engine asks once per step)."""
    return model.sharded(tp)


def step_cost(
    model: ModelSpec,
    decode_contexts: Sequence[int] = (),
    prefill_chunks: Iterable[tuple[int, int]] = (),
    *,
    tp: int = 1,
    link: Interconnect | None = None,
) -> StepCost:
    """Cost of one continuous-batching step, on each of ``tp`` tensor-parallel GPUs.

    ``decode_contexts``: context length (tokens already in KV) of each decoding sequence; each
    generates one token. ``prefill_chunks``: (chunk tokens, tokens already in KV before the
    chunk) per prefilling sequence. Bytes = weights read (the experts the step's tokens touch,
    embedding rows only) + KV read for every context + KV written for every new token.
    FLOPs = 2 x params per token x tokens + attention (causal inside a prefill chunk), the LM
    head counted once per sequence (the sampled position), not per prefill token. With
    ``tp`` > 1 both are one GPU's shard's (:meth:`ModelSpec.sharded`) and ``comm_s`` is
    :func:`tp_comm_seconds` over ``link`` (default NVLink): the all-reduces and the logits gather.
    """
    chunks = list(prefill_chunks)
    n_decode = len(decode_contexts)
    prefill_tokens = sum(c for c, _ in chunks)
    tokens = n_decode + prefill_tokens
    if tokens == 0:
        return StepCost(0.0, 0.0)
    full = model
    if tp > 1:
        model = shard_of(model, tp)
    kv_read_tokens = sum(decode_contexts) + sum(prior for _, prior in chunks)
    bytes_moved = (
        model.params_read(tokens) * model.weight_bytes_per_param
        + (kv_read_tokens + tokens) * model.kv_bytes_per_token
    )
    sampled = n_decode + len(chunks)  # positions whose logits are computed
    head = model.vocab_size * model.hidden_size  # the LM head's matmul, tied or not
    flops = 2.0 * (model.params_per_token() - head) * tokens + 2.0 * head * sampled
    for ctx in decode_contexts:
        flops += attention_flops(model, 1, ctx + 1)
    for chunk, prior in chunks:
        flops += attention_flops(model, chunk, prior + (chunk + 1) / 2.0)
    comm = tp_comm_seconds(full, tokens, sampled, tp, link or INTERCONNECT_PRESETS["nvlink"])
    return StepCost(flops=flops, bytes=bytes_moved, comm_s=comm)


# --------------------------------------------------------------------------------------------
# The workload-level floors (what `locust-llm roofline` prints)


#: Bytes per GPU kept outside the KV cache (CUDA context, activations, graphs): the
#: simulator's default too, so both report the same KV capacity for the same setup.
MEMORY_RESERVE_BYTES = 1.0 * GiB

#: Tokens per KV block (vLLM's default ``--block-size``); the KV capacity is whole blocks.
KV_BLOCK_TOKENS = 16


@dataclass(frozen=True, kw_only=True)
class Workload:
    """What is asked of the server: a batch of sequences of some context length."""

    context_tokens: int = 1000  # tokens in KV per sequence during decode
    batch: int = 1
    input_tokens: int = 1024  # prompt length, for the prefill floor
    gpu_memory_utilization: float = 0.9
    memory_reserve_bytes: float = MEMORY_RESERVE_BYTES  # per GPU, outside weights and KV
    block_size: int = KV_BLOCK_TOKENS  # tokens per KV block
    tp: int = 1  # tensor-parallel degree (GPUs the model is split over)
    interconnect: str = "nvlink"  # link preset the all-reduces use when tp > 1


@dataclass(frozen=True, kw_only=True)
class Roofline:
    """Every floor and ceiling for one model x GPU x workload, in base units.

    With tensor parallelism the byte and time figures are one GPU's (each moves its shard);
    ``weights_bytes`` is the whole model's, ``weights_bytes_per_gpu`` one shard's.
    """

    model: str
    gpu: str
    weight_bits: float
    kv_bits: float
    tp: int
    interconnect: str
    total_params: int
    params_read_per_step: float
    weights_bytes: float
    weights_bytes_per_gpu: float
    weight_bytes_read_per_step: float
    kv_elements_per_token: int
    kv_bytes_per_token: float
    kv_bytes_per_sequence: float
    kv_bytes_read_per_step: float  # KV of the context read + the new token's KV written
    bytes_read_per_step: float  # everything a decode step moves (= step_cost(...).bytes)
    decode_step_floor_s: float  # = TPOT floor at this batch
    decode_memory_time_s: float
    decode_compute_time_s: float
    decode_comm_time_s: float  # tensor-parallel all-reduces + logits gather (0 at tp 1)
    decode_tokens_per_s_ceiling: float
    compute_bound_batch: int | None  # smallest batch where decode turns compute-bound
    prefill_floor_s: float
    prefill_compute_time_s: float
    prefill_weight_read_time_s: float
    prefill_comm_time_s: float
    kv_budget_bytes: float  # over all tp GPUs, after weights and the memory reserve
    memory_reserve_bytes: float  # per GPU
    kv_capacity_tokens: float  # whole KV blocks of the budget (the simulator's pool)
    kv_capacity_sequences: float
    fits: bool  # weights fit in the memory budget
    fit_advice: str  # "" when it fits; else the smallest tp degree or weight precision that does

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def decode_step_seconds(
    model: ModelSpec, gpu: GpuSpec, batch: int, context: int, *, tp: int = 1
) -> tuple[float, float]:
    """(memory time, compute time) of one decode step of ``batch`` sequences at ``context``,
    on one of ``tp`` tensor-parallel GPUs (the all-reduces are not included)."""
    cost = step_cost(model, [context] * batch, tp=tp)
    compute, memory = cost.times(gpu, model.weight_bits)
    return memory, compute


def compute_bound_batch(
    model: ModelSpec, gpu: GpuSpec, context: int, limit: int = 1 << 20, *, tp: int = 1
) -> int | None:
    """Smallest batch whose decode compute time reaches memory time (None: never up to limit)."""

    def compute_bound(b: int) -> bool:
        memory, compute = decode_step_seconds(model, gpu, b, context, tp=tp)
        return compute >= memory

    if not compute_bound(limit):
        return None
    lo, hi = 1, limit
    if compute_bound(lo):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if compute_bound(mid):
            hi = mid
        else:
            lo = mid
    return hi


def kv_budget_per_gpu_bytes(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    gpu_memory_utilization: float,
    reserve_bytes: float = 0.0,
    tp: int = 1,
) -> float:
    """Bytes one GPU has left for KV blocks: its memory share minus its weight shard and the
    reserve (CUDA context, activations). Negative when the weights do not fit (a pipeline's
    GPUs: :func:`stage_kv_blocks`)."""
    shard = shard_of(model, tp) if tp > 1 else model
    return gpu.memory_bytes * gpu_memory_utilization - shard.weights_bytes - reserve_bytes


#: Tensor-parallel degrees and weight precisions the fit advice tries, in order.
ADVICE_TP: tuple[int, ...] = (1, 2, 4, 8, 16)
ADVICE_BITS: tuple[float, ...] = (8.0, 4.0)


def fit_advice(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    gpu_memory_utilization: float,
    reserve_bytes: float = 0.0,
    tp: int = 1,
    kv_tokens: int = KV_BLOCK_TOKENS,
) -> str:
    """What would make ``model`` fit on ``gpu`` with room for ``kv_tokens`` of KV cache (one
    block by default; the simulator asks for one sequence of ``max_model_len``, as vLLM does at
    start) ("" when it already does).

    Names the smallest tensor-parallel degree above ``tp`` (valid for the model's heads) that
    fits at the model's precision, and the widest weight precision that fits at ``tp``; raising
    ``--gpu-memory-utilization`` is suggested only when it alone would be enough.
    """

    def fits(m: ModelSpec, degree: int, util: float = gpu_memory_utilization) -> bool:
        try:
            shard = shard_of(m, degree) if degree > 1 else m
        except InputError:
            return False
        budget = kv_budget_per_gpu_bytes(
            m, gpu, gpu_memory_utilization=util, reserve_bytes=reserve_bytes, tp=degree
        )
        return budget >= shard.kv_bytes_per_token * max(kv_tokens, 1)

    if fits(model, tp):
        return ""
    ways = []
    if gpu_memory_utilization < 0.95 and fits(model, tp, 0.95):
        ways.append("--gpu-memory-utilization 0.95")
    degree = next((d for d in ADVICE_TP if d > tp and fits(model, d)), None)
    if degree is not None:
        ways.append(f"--tp {degree}")
    bits = next(
        (b for b in ADVICE_BITS if b < model.weight_bits and fits(model.with_bits(b), tp)), None
    )
    if bits is not None:
        ways.append(f"{bits:g}-bit weights at --tp {tp}")
    if not ways:
        return f"it does not fit even at --tp {ADVICE_TP[-1]} or 4-bit weights: use a larger GPU"
    return "smallest change that fits: " + ", or ".join(ways)


def compute(model: ModelSpec, gpu: GpuSpec, workload: Workload) -> Roofline:
    """All floors for ``model`` on ``gpu`` under ``workload``."""
    if workload.batch < 1:
        raise InputError(f"batch must be >= 1, got {workload.batch}")
    if workload.context_tokens < 0 or workload.input_tokens < 1:
        raise InputError("context must be >= 0 and input tokens >= 1")
    if not 0 < workload.gpu_memory_utilization <= 1:
        raise InputError(
            f"gpu memory utilization must be in (0, 1], got {workload.gpu_memory_utilization}"
        )
    tp = workload.tp
    check_tp(model, tp)
    link = get_interconnect(workload.interconnect)
    shard = shard_of(model, tp) if tp > 1 else model
    b, ctx = workload.batch, workload.context_tokens
    params_read = shard.params_read(b)
    weight_read = params_read * shard.weight_bytes_per_param
    kv_read = b * (ctx + 1) * shard.kv_bytes_per_token  # context read + the new token's KV
    memory, comp = decode_step_seconds(model, gpu, b, ctx, tp=tp)
    decode_comm = tp_comm_seconds(model, b, b, tp, link)
    step = max(memory, comp) + decode_comm
    pre = step_cost(model, prefill_chunks=[(workload.input_tokens, 0)], tp=tp, link=link)
    pre_compute, _ = pre.times(gpu, model.weight_bits)
    pre_weights = shard.params_read(workload.input_tokens) * shard.weight_bytes_per_param
    pre_weight_time = pre_weights / gpu.memory_bandwidth_bytes_s
    if workload.block_size < 1 or not workload.memory_reserve_bytes >= 0:
        raise InputError("block size must be >= 1 and the memory reserve >= 0 bytes")
    util, reserve = workload.gpu_memory_utilization, workload.memory_reserve_bytes
    budget = kv_budget_per_gpu_bytes(
        model, gpu, gpu_memory_utilization=util, reserve_bytes=reserve, tp=tp
    )
    block_bytes = workload.block_size * shard.kv_bytes_per_token
    kv_tokens = float(max(budget, 0.0) // block_bytes * workload.block_size)
    seq_tokens = max(ctx, workload.input_tokens)
    return Roofline(
        model=model.name,
        gpu=gpu.name,
        weight_bits=model.weight_bits,
        kv_bits=model.kv_bits,
        tp=tp,
        interconnect=link.name if tp > 1 else "",
        total_params=model.total_params,
        params_read_per_step=params_read,
        weights_bytes=model.weights_bytes,
        weights_bytes_per_gpu=shard.weights_bytes,
        weight_bytes_read_per_step=weight_read,
        kv_elements_per_token=model.kv_elements_per_token,
        kv_bytes_per_token=model.kv_bytes_per_token,
        kv_bytes_per_sequence=ctx * model.kv_bytes_per_token,
        kv_bytes_read_per_step=kv_read,
        bytes_read_per_step=weight_read + kv_read,
        decode_step_floor_s=step,
        decode_memory_time_s=memory,
        decode_compute_time_s=comp,
        decode_comm_time_s=decode_comm,
        decode_tokens_per_s_ceiling=b / step,
        compute_bound_batch=compute_bound_batch(model, gpu, ctx, tp=tp),
        prefill_floor_s=max(pre_compute, pre_weight_time) + pre.comm_s,
        prefill_compute_time_s=pre_compute,
        prefill_weight_read_time_s=pre_weight_time,
        prefill_comm_time_s=pre.comm_s,
        kv_budget_bytes=budget * tp,
        memory_reserve_bytes=workload.memory_reserve_bytes,
        kv_capacity_tokens=kv_tokens,
        kv_capacity_sequences=kv_tokens / seq_tokens if seq_tokens else math.inf,
        fits=budget >= block_bytes,
        fit_advice=fit_advice(
            model, gpu, gpu_memory_utilization=util, reserve_bytes=reserve, tp=tp
        ),
    )


# --------------------------------------------------------------------------------------------
# Units for describing a device by hand

_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z/]*)\s*$")
_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}
_BIN_PREFIX = {"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_quantity(text: str, kind: str, *, flag: str = "", allow_zero: bool = False) -> float:
    """Parse ``40GB/s`` (kind ``bandwidth``), ``1.2TFLOPS`` (``flops``) or ``24GiB`` (``memory``).

    Returns base units: bytes/s, FLOP/s, bytes. A wrong unit is an InputError naming the flag
    (``flag``, default ``--<kind>``); ``allow_zero`` also accepts a bare ``0``.
    """
    flag = flag or f"--{kind}"
    if allow_zero and text.strip() == "0":
        return 0.0
    m = _UNIT.match(text)
    if not m:
        raise InputError(f"{flag}: cannot read {text!r} (expected e.g. {_EXAMPLES[kind]})")
    value, unit = float(m.group(1)), m.group(2)
    low = unit.lower()
    suffix = {"bandwidth": ("b/s", "bps"), "flops": ("flops", "flop/s"), "memory": ("b",)}[kind]
    for s in suffix:
        if low.endswith(s):
            prefix = low[: -len(s)]
            break
    else:
        raise InputError(
            f"{flag}: unit {unit or '(none)'!r} in {text!r}; expected e.g. {_EXAMPLES[kind]}"
        )
    if prefix in _BIN_PREFIX:
        mult = float(_BIN_PREFIX[prefix])
    elif prefix in _PREFIX:
        mult = _PREFIX[prefix]
    else:
        raise InputError(f"{flag}: unknown prefix {prefix!r} in {text!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise InputError(f"{flag}: must be positive, got {text!r}")
    return value * mult


_EXAMPLES = {"bandwidth": "40GB/s or 1.5TB/s", "flops": "1.2TFLOPS", "memory": "24GiB or 80GB"}


def custom_gpu(bandwidth: str, flops: str, memory: str, name: str = "custom") -> GpuSpec:
    """A device described by hand (CPU servers, GPUs without a preset)."""
    return GpuSpec(
        name=name,
        memory_bandwidth_bytes_s=parse_quantity(bandwidth, "bandwidth"),
        flops={"fp16": parse_quantity(flops, "flops")},
        memory_bytes=parse_quantity(memory, "memory"),
        source="given on the command line",
    )
