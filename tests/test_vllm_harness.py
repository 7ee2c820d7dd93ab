"""The real-vLLM tests' harness, apart from an engine: the dtype follows the CPU (bf16 where
torch's fast bf16 kernels run, fp32 elsewhere, with the KV cache's bytes scaled so that it holds
the same tokens), and a stall is measured in the run's own steps on the engine's own buckets."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm import server
from vllm.scrapes import bounds, bucket, stall_bound
from vllm.server import BF16_CPU_FLAGS, engine_dtype, kv_cache_bytes

ITL = "vllm:inter_token_latency_seconds"


def _cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 {flags}\n\nprocessor\t: 1\n")
    return path


def test_the_dtype_is_bf16_only_with_every_flag(tmp_path: Path) -> None:
    assert engine_dtype(_cpuinfo(tmp_path, "avx2 " + " ".join(BF16_CPU_FLAGS))) == "bfloat16"
    (tmp_path / "b").mkdir()
    assert engine_dtype(_cpuinfo(tmp_path / "b", "avx2 fma avx512vl")) == "float32"  # no avx512f
    (tmp_path / "c").mkdir()
    assert engine_dtype(_cpuinfo(tmp_path / "c", "avx512f avx512vl avx512dq")) == "float32"
    assert engine_dtype(tmp_path / "missing") == "float32"  # no /proc: the safe one


@pytest.mark.parametrize(("dtype", "scale"), [("bfloat16", 1), ("float32", 2)])
def test_the_kv_cache_holds_the_same_tokens_in_either_dtype(
    monkeypatch: pytest.MonkeyPatch, dtype: str, scale: int
) -> None:
    monkeypatch.setattr(server, "engine_dtype", lambda: dtype)
    assert kv_cache_bytes(32 * 2**20) == scale * 32 * 2**20


def test_the_stall_bound_is_the_first_engine_bound_of_two_and_a_half_steps() -> None:
    written = ["+Inf", "5.0", "0.1", "0.01", "1.0", "0.05", "2.5", "0.5", "0.075"]  # vLLM's, part
    les = bounds({bucket(ITL + "_bucket", le): 1.0 for le in written}, ITL)
    assert les == ["0.01", "0.05", "0.075", "0.1", "0.5", "1.0", "2.5", "5.0"]
    assert stall_bound(les, 0.02) == "0.075"  # the Xeon's steps: the bound of before
    assert stall_bound(les, 0.03) == "0.075"
    assert stall_bound(les, 0.031) == "0.1"
    assert stall_bound(les, 0.108) == "0.5"  # the EPYC's in fp32 (vLLM's 0.3 is not in `written`)
    assert stall_bound(les, 0.5) == "2.5"  # the EPYC's in bf16
    for step_s in (2.1, 0.0, float("nan")):  # past every bound, or no step: said, not a bound
        with pytest.raises(AssertionError):
            stall_bound(les, step_s)
