"""Roofline: the seed's worked example, quantization, MoE, config.json / GGUF readers, CLI."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from locust_llm.errors import InputError
from locust_llm.roofline import floors as roofline
from locust_llm.roofline.floors import (
    GPU_PRESETS,
    MODEL_PRESETS,
    Workload,
    compute,
    get_gpu,
    get_model,
)

MISTRAL = MODEL_PRESETS["mistral-7b"]
RTX4090 = GPU_PRESETS["rtx4090"]


def test_seed_worked_example_parameters() -> None:
    # 7.24e9 total, minus the 32000 x 4096 input embedding = 7.11e9 read per step
    assert MISTRAL.total_params == pytest.approx(7.24e9, rel=1e-3)
    assert MISTRAL.total_params - 32000 * 4096 == pytest.approx(7.11e9, rel=1e-3)
    # one embedding row per sequence, not the table
    assert MISTRAL.params_read(1) == MISTRAL.total_params - 32000 * 4096 + 4096


def test_seed_worked_example_bytes_and_floor() -> None:
    r = compute(MISTRAL, RTX4090, Workload(context_tokens=1000, batch=1))
    assert r.weight_bytes_read_per_step == pytest.approx(14.2e9, rel=2e-3)  # 14.2 GB per token
    assert r.kv_elements_per_token == 65_536
    assert r.kv_bytes_per_token == 131_072
    assert r.kv_bytes_per_sequence == pytest.approx(131e6, rel=1e-3)  # 1000 tokens ~131 MB
    assert r.weight_bytes_read_per_step / 1008e9 == pytest.approx(14.1e-3, rel=2e-3)  # 14.1 ms
    # the full floor adds the KV read of the context: 131 MB / 1008 GB/s = 0.13 ms more
    expected = (r.weight_bytes_read_per_step + 1001 * 131_072) / 1008e9
    assert r.decode_step_floor_s == pytest.approx(expected, rel=1e-9)
    assert r.decode_tokens_per_s_ceiling == pytest.approx(1 / r.decode_step_floor_s)


@pytest.mark.parametrize(("bits", "factor"), [(8, 0.5), (4, 0.25)])
def test_quantization_scales_weight_bytes_and_floor(bits: int, factor: float) -> None:
    base = compute(MISTRAL, RTX4090, Workload(context_tokens=0))
    quant = compute(MISTRAL.with_bits(weight_bits=bits), RTX4090, Workload(context_tokens=0))
    assert quant.weight_bytes_read_per_step == pytest.approx(
        base.weight_bytes_read_per_step * factor
    )
    # context 0 leaves only the new token's KV write: the floor scales almost exactly
    assert quant.decode_step_floor_s == pytest.approx(base.decode_step_floor_s * factor, rel=2e-3)


def test_kv_bits_scale_kv_only() -> None:
    fp8 = MISTRAL.with_bits(kv_bits=8)
    assert fp8.kv_bytes_per_token == MISTRAL.kv_bytes_per_token / 2
    assert fp8.weights_bytes == MISTRAL.weights_bytes


def test_tpot_floor_grows_with_batch_by_the_kv_term() -> None:
    one = compute(MISTRAL, RTX4090, Workload(context_tokens=1000, batch=1))
    eight = compute(MISTRAL, RTX4090, Workload(context_tokens=1000, batch=8))
    kv_per_seq = 1001 * MISTRAL.kv_bytes_per_token + MISTRAL.hidden_size * 2  # + embedding row
    assert one.bytes_read_per_step == pytest.approx(roofline.step_cost(MISTRAL, [1000]).bytes)
    assert eight.bytes_read_per_step - one.bytes_read_per_step == pytest.approx(7 * kv_per_seq)
    assert eight.decode_tokens_per_s_ceiling > 7 * one.decode_tokens_per_s_ceiling


def test_compute_bound_crossover() -> None:
    # short contexts: weights dominate, so a large batch turns compute-bound
    b = roofline.compute_bound_batch(MISTRAL, RTX4090, context=16)
    assert b is not None and 50 < b < 500
    mem, comp = roofline.decode_step_seconds(MISTRAL, RTX4090, b, 16)
    assert comp >= mem
    mem, comp = roofline.decode_step_seconds(MISTRAL, RTX4090, b - 1, 16)
    assert comp < mem
    # at 1000 tokens of context each sequence's KV read outweighs its FLOPs on an RTX 4090
    assert roofline.compute_bound_batch(MISTRAL, RTX4090, context=1000) is None


def test_moe_reads_only_active_experts() -> None:
    mixtral = MODEL_PRESETS["mixtral-8x7b"]
    assert mixtral.total_params == pytest.approx(46.7e9, rel=2e-3)
    one = mixtral.params_read(1)
    # batch 1 touches 2 of 8 experts per layer
    assert one == pytest.approx(
        mixtral.always_read_params + 32 * 2 * mixtral.expert_params + 4096, rel=1e-9
    )
    assert one < mixtral.params_read(4) < mixtral.params_read(64)
    all_experts = mixtral.total_params - mixtral.embedding_params
    assert mixtral.params_read(10_000) == pytest.approx(all_experts + 10_000 * 4096, rel=1e-6)


def test_prefill_floor_is_compute_bound_for_long_prompts() -> None:
    r = compute(MISTRAL, RTX4090, Workload(input_tokens=4096))
    assert r.prefill_floor_s == r.prefill_compute_time_s > r.prefill_weight_read_time_s
    linear = 2 * MISTRAL.params_per_token() * 4096 / RTX4090.peak_flops()
    assert r.prefill_compute_time_s > linear  # attention FLOPs are counted


def test_kv_capacity() -> None:
    """The KV budget is the memory share less the weights and the 1 GiB reserve; the capacity
    is whole 16-token blocks of 131,072 bytes a token."""
    r = compute(MISTRAL, RTX4090, Workload(context_tokens=1000, gpu_memory_utilization=0.9))
    budget = 24 * 2**30 * 0.9 - MISTRAL.weights_bytes - 2**30
    assert r.kv_budget_bytes == pytest.approx(budget)
    assert r.memory_reserve_bytes == 2**30
    assert r.kv_capacity_tokens == budget // (16 * 131_072) * 16
    assert r.kv_capacity_sequences == pytest.approx(r.kv_capacity_tokens / 1024)
    bare = compute(MISTRAL, RTX4090, Workload(memory_reserve_bytes=0.0, block_size=1))
    assert bare.kv_capacity_tokens == (budget + 2**30) // 131_072


@pytest.mark.parametrize(
    ("model", "gpu", "extra"),
    [
        ("mistral-7b", "rtx4090", []),
        ("qwen2.5-0.5b", "a100-80gb", ["--gpu-memory-utilization", "0.5", "--block-size", "32"]),
        ("llama-3.1-70b", "h100-sxm", ["--tp", "4"]),
    ],
)
def test_the_simulator_and_the_roofline_report_the_same_kv_capacity(
    model: str, gpu: str, extra: list[str]
) -> None:
    """Both commands, run as a user runs them, for the same setup: the simulator's start line
    ('N KV blocks (T tokens)') and the roofline's KV capacity agree to the token."""
    roof = _cli("--model", model, "--gpu", gpu, *extra, "--json")
    assert roof.returncode == 0, roof.stderr
    tokens = json.loads(roof.stdout)["kv_capacity_tokens"]
    sim = subprocess.Popen(
        [sys.executable, "-m", "locust_llm.cli", "sim", "--model", model, "--gpu", gpu,
         "--port", "0", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert sim.stdout is not None and sim.stderr is not None
        assert sim.stdout.readline().startswith("http://127.0.0.1:")
        line = sim.stderr.readline()
    finally:
        sim.terminate()
        sim.communicate(timeout=30)
    started = re.search(r"(\d+) KV blocks \((\d+) tokens\)", line)
    assert started, line
    assert int(started.group(2)) == tokens > 0
    block = int(extra[extra.index("--block-size") + 1]) if "--block-size" in extra else 16
    assert int(started.group(1)) * block == tokens


def _hf_cache(root: Path, model_id: str, cfg: dict[str, object], *, ref: bool = True) -> Path:
    """A Hugging Face hub cache holding one snapshot of ``model_id`` with its config.json."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = root / ("models--" + model_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(cfg))
    if ref:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(commit)
    return snapshot / "config.json"


def test_a_hugging_face_id_reads_the_cached_config(tmp_path: Path, monkeypatch) -> None:
    """`--model org/name` finds config.json where huggingface_hub itself would (its
    try_to_load_from_cache is the judge) and never downloads: an id not cached is one line."""
    from huggingface_hub import try_to_load_from_cache

    spec = MODEL_PRESETS["qwen2.5-0.5b"]
    path = _hf_cache(tmp_path / "hub", "Qwen/Qwen2.5-0.5B", _config_for(spec, "qwen2"))
    assert try_to_load_from_cache(
        "Qwen/Qwen2.5-0.5B", "config.json", cache_dir=tmp_path / "hub"
    ) == str(path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    loaded = get_model("Qwen/Qwen2.5-0.5B")
    assert loaded.name == "Qwen/Qwen2.5-0.5B"
    assert loaded.total_params == spec.total_params
    assert loaded.kv_bytes_per_token == spec.kv_bytes_per_token
    out = _cli("--model", "Qwen/Qwen2.5-0.5B", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["model"] == "Qwen/Qwen2.5-0.5B"
    missing = _cli("--model", "Qwen/Qwen2.5-72B")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    assert "not in the Hugging Face cache" in missing.stderr and "never downloads" in missing.stderr
    assert str(tmp_path / "hub") in missing.stderr


def test_hf_home_and_a_cache_without_refs(tmp_path: Path, monkeypatch) -> None:
    spec = MODEL_PRESETS["mistral-7b"]
    _hf_cache(tmp_path / "home" / "hub", "mistralai/Mistral-7B-v0.1", _config_for(spec, "mistral"),
              ref=False)  # fmt: skip
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert get_model("mistralai/Mistral-7B-v0.1").total_params == spec.total_params


def test_list_labels_gib_and_gb_right() -> None:
    """The RTX 4090 preset's 24 GiB is 25.8 GB: both units shown, each labelled right."""
    listing = _cli("--list").stdout
    line = next(x for x in listing.splitlines() if x.strip().startswith("rtx4090"))
    assert "24.0 GiB (25.8 GB)" in line


def test_known_preset_sizes() -> None:
    expected = {
        "llama-3.1-8b": 8.03e9,
        "llama-3.1-70b": 70.6e9,
        "qwen2.5-0.5b": 0.494e9,
        "qwen2.5-7b": 7.62e9,
        "qwen2.5-72b": 72.7e9,
    }
    for key, params in expected.items():
        assert MODEL_PRESETS[key].total_params == pytest.approx(params, rel=5e-3), key


def _config_for(spec: roofline.ModelSpec, family: str) -> dict[str, object]:
    cfg: dict[str, object] = {
        "model_type": family,
        "num_hidden_layers": spec.num_layers,
        "hidden_size": spec.hidden_size,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "intermediate_size": spec.intermediate_size,
        "vocab_size": spec.vocab_size,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "torch_dtype": "bfloat16",
    }
    if spec.num_experts:
        cfg["num_local_experts"] = spec.num_experts
        cfg["num_experts_per_tok"] = spec.experts_per_token
    return cfg


@pytest.mark.parametrize(
    ("preset", "family"),
    [
        ("llama-3.1-8b", "llama"),
        ("mistral-7b", "mistral"),
        ("qwen2.5-7b", "qwen2"),
        ("qwen2.5-0.5b", "qwen2"),
        ("mixtral-8x7b", "mixtral"),
    ],
)
def test_config_json_matches_preset(tmp_path: Path, preset: str, family: str) -> None:
    spec = MODEL_PRESETS[preset]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_config_for(spec, family)))
    loaded = get_model(str(tmp_path))  # a folder works too
    assert loaded.total_params == spec.total_params
    assert loaded.params_read(1) == spec.params_read(1)
    assert loaded.kv_bytes_per_token == spec.kv_bytes_per_token


def test_gemma_config_reads_head_dim_and_ties(tmp_path: Path) -> None:
    cfg = {
        "model_type": "gemma",
        "num_hidden_layers": 18,
        "hidden_size": 2048,
        "num_attention_heads": 8,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "intermediate_size": 16384,
        "vocab_size": 256000,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    spec = get_model(str(path))
    assert spec.head_dim == 256 and spec.tie_word_embeddings
    assert spec.total_params == pytest.approx(2.51e9, rel=1e-2)  # gemma-2b


def test_broken_configs_name_the_problem(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))
    with pytest.raises(InputError, match="num_hidden_layers"):
        get_model(str(path))
    path.write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(InputError, match=r"not supported.*num_hidden_layers"):
        get_model(str(path))
    path.write_text("{not json")
    with pytest.raises(InputError, match="cannot read"):
        get_model(str(path))
    with pytest.raises(InputError, match="unknown model"):
        get_model("no-such-model")
    with pytest.raises(InputError, match="presets"):
        get_gpu("gtx480")


def test_gguf_header(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")  # a declared test dependency; absent only without [test]
    import numpy as np

    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(128)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_name("tiny")
    writer.add_token_list([f"t{i}" for i in range(100)])
    for name, shape in [("token_embd.weight", (100, 64)), ("output.weight", (100, 64))]:
        writer.add_tensor(name, np.zeros(shape, dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    spec = get_model(str(path))
    assert (spec.num_layers, spec.hidden_size, spec.num_heads, spec.num_kv_heads) == (2, 64, 4, 2)
    assert spec.head_dim == 16 and spec.vocab_size == 100 and not spec.tie_word_embeddings
    assert spec.weight_bits == 16.0  # f16 tensors


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("40GB/s", "bandwidth", 40e9),
        ("1.5TB/s", "bandwidth", 1.5e12),
        ("1.2TFLOPS", "flops", 1.2e12),
        ("24GiB", "memory", 24 * 2**30),
        ("80GB", "memory", 80e9),
    ],
)
def test_parse_quantity(text: str, kind: str, value: float) -> None:
    assert roofline.parse_quantity(text, kind) == pytest.approx(value)


@pytest.mark.parametrize(
    ("text", "kind"),
    [("40GB", "bandwidth"), ("fast", "flops"), ("-1GB", "memory"), ("3XB", "memory")],
)
def test_parse_quantity_rejects(text: str, kind: str) -> None:
    with pytest.raises(InputError, match=f"--{kind}"):
        roofline.parse_quantity(text, kind)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "locust_llm.cli", "roofline", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_json_and_table() -> None:
    out = _cli("--model", "mistral-7b", "--gpu", "rtx4090", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["kv_bytes_per_token"] == 131_072
    assert math.isclose(data["weight_bytes_read_per_step"], 14.22e9, rel_tol=1e-3)
    table = _cli("--model", "mistral-7b", "--weight-bits", "4")
    assert table.returncode == 0 and "TPOT floor (ms)" in table.stdout
    assert "3.56" in table.stdout  # 14.22 GB / 4 = 3.56 GB of weights per step


def test_cli_custom_device_and_errors() -> None:
    out = _cli("--bandwidth", "40GB/s", "--flops", "1.2TFLOPS", "--memory", "24GiB", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["gpu"] == "custom"
    bad = _cli("--bandwidth", "40GB", "--flops", "1T", "--memory", "1GB")
    assert bad.returncode == 2 and "--bandwidth" in bad.stderr and "Traceback" not in bad.stderr
    partial = _cli("--bandwidth", "40GB/s")
    assert partial.returncode == 2 and "all of" in partial.stderr
    listing = _cli("--list")
    assert all(k in listing.stdout for k in [*MODEL_PRESETS, *GPU_PRESETS])
    helptext = _cli("--help").stdout
    for flag in [
        "--model",
        "--gpu",
        "--context",
        "--batch",
        "--input-tokens",
        "--weight-bits",
        "--kv-bits",
        "--bandwidth",
        "--flops",
        "--memory",
        "--json",
        "--list",
    ]:
        assert flag in helptext


def test_shard_splits_heads_mlp_vocab_and_replicates_norms() -> None:
    llama = MODEL_PRESETS["llama-3.1-70b"]
    shard = llama.sharded(8)
    assert (shard.num_heads, shard.num_kv_heads) == (8, 1)
    assert shard.intermediate_size * 8 == llama.intermediate_size
    assert shard.kv_bytes_per_token * 8 == llama.kv_bytes_per_token
    replicated = llama.num_layers * llama.norm_params_per_layer + llama.hidden_size
    assert shard.total_params * 8 - 7 * replicated == pytest.approx(llama.total_params, rel=1e-6)
    # more GPUs than KV heads: each keeps one (replicated), so KV per GPU stops shrinking
    qwen = MODEL_PRESETS["qwen2.5-7b"]  # 4 KV heads
    assert qwen.sharded(4).kv_bytes_per_token == qwen.sharded(2).kv_bytes_per_token / 2
    assert qwen.sharded(4).num_kv_heads == 1
    with pytest.raises(InputError, match="KV heads"):
        MODEL_PRESETS["qwen2.5-0.5b"].sharded(7)  # 14 heads split by 7, 2 KV heads are not


def test_moe_shards_each_expert() -> None:
    mixtral = MODEL_PRESETS["mixtral-8x7b"]
    shard = mixtral.sharded(2)
    assert shard.expert_params * 2 == mixtral.expert_params
    assert shard.num_experts == mixtral.num_experts  # the router is replicated


def test_cli_tp_and_fit_advice() -> None:
    whole = _cli("--model", "llama-3.1-70b", "--gpu", "h100-sxm")
    assert whole.returncode == 0, whole.stderr
    assert "weights do not fit; smallest change that fits: --tp 2" in whole.stdout
    split = _cli("--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "4", "--json")
    data = json.loads(split.stdout)
    assert data["tp"] == 4 and data["fits"] and data["fit_advice"] == ""
    assert data["decode_comm_time_s"] > 0 and data["interconnect"] == "nvlink"
    table = _cli("--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "4")
    assert "4 GPUs over nvlink (figures per GPU)" in table.stdout
    bad = _cli("--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "3")
    assert bad.returncode == 2 and "--tp 3" in bad.stderr and "Traceback" not in bad.stderr
    link = _cli("--tp", "2", "--interconnect", "smoke-signals")
    assert link.returncode == 2 and "nvlink" in link.stderr
    assert "--tp" in _cli("--help").stdout and "--interconnect" in _cli("--help").stdout


def test_fit_advice_never_suggests_what_cannot_work() -> None:
    h100, l4 = GPU_PRESETS["h100-sxm"], GPU_PRESETS["l4"]
    llama = MODEL_PRESETS["llama-3.1-70b"]
    assert roofline.fit_advice(llama, h100, gpu_memory_utilization=0.9) == (
        "smallest change that fits: --tp 2, or 8-bit weights at --tp 1"
    )
    # 0.95 is offered only when it alone is enough: mistral-7b's 14.5 GB on 16 GB of device
    small = roofline.custom_gpu("1TB/s", "100TFLOPS", "16GB")
    advice = roofline.fit_advice(MISTRAL, small, gpu_memory_utilization=0.9)
    assert advice.startswith("smallest change that fits: --gpu-memory-utilization 0.95")
    assert roofline.fit_advice(llama, l4, gpu_memory_utilization=0.9, tp=4) == (
        "smallest change that fits: --tp 8, or 8-bit weights at --tp 4"
    )


def test_prefill_counts_the_lm_head_once_per_sequence() -> None:
    """The LM head (vocab x hidden) runs only at each sequence's sampled position: a prefill
    chunk of n tokens costs 2 (P - V H) n + 2 V H + attention, a decode token 2 P + attention."""
    for model in (MISTRAL, get_model("llama-3.1-8b"), get_model("qwen2.5-0.5b")):  # tied last
        head = model.vocab_size * model.hidden_size
        body = model.params_per_token() - head
        n = 512
        chunk = roofline.step_cost(model, prefill_chunks=[(n, 0)])
        attention = roofline.attention_flops(model, n, (n + 1) / 2.0)
        assert chunk.flops == pytest.approx(2 * body * n + 2 * head + attention)
        two = roofline.step_cost(model, [100, 200], [(n, 0), (n, 64)])
        expected = (
            2 * body * (2 + 2 * n)
            + 2 * head * 4  # two decoding sequences + two prefill chunks: four sampled positions
            + roofline.attention_flops(model, 1, 101)
            + roofline.attention_flops(model, 1, 201)
            + attention
            + roofline.attention_flops(model, n, 64 + (n + 1) / 2.0)
        )
        assert two.flops == pytest.approx(expected)
        # the weights are still read whole (the LM head included) once per step
        assert chunk.bytes >= model.params_per_token() * model.weight_bytes_per_param
