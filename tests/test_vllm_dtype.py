"""The engine tests' dtype follows the CPU: bf16 where torch's fast bf16 kernels run, fp32
elsewhere, with the KV cache's bytes scaled so that it holds the same tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm import server
from vllm.server import BF16_CPU_FLAG, engine_dtype, kv_cache_bytes


def _cpuinfo(tmp_path: Path, flags: str) -> Path:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 {flags}\n\nprocessor\t: 1\n")
    return path


def test_the_dtype_is_bf16_only_with_the_flag(tmp_path: Path) -> None:
    assert engine_dtype(_cpuinfo(tmp_path, f"avx2 {BF16_CPU_FLAG} avx512_bf16")) == "bfloat16"
    (tmp_path / "b").mkdir()
    assert engine_dtype(_cpuinfo(tmp_path / "b", "avx2 fma avx512vl")) == "float32"  # no avx512f
    assert engine_dtype(tmp_path / "missing") == "float32"  # no /proc: the safe one


@pytest.mark.parametrize(("dtype", "scale"), [("bfloat16", 1), ("float32", 2)])
def test_the_kv_cache_holds_the_same_tokens_in_either_dtype(
    monkeypatch: pytest.MonkeyPatch, dtype: str, scale: int
) -> None:
    monkeypatch.setattr(server, "engine_dtype", lambda: dtype)
    assert kv_cache_bytes(32 * 2**20) == scale * 32 * 2**20
