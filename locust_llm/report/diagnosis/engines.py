"""The verdict's actions in the words of the engine the run identified (pure data + one function).

The actions of :mod:`locust_llm.report.diagnosis.actions` are written with vLLM's flags (vLLM is
the engine the simulator copies and the one most users run). A run whose telemetry spoke another
engine's metrics (``run.json`` ``extra.server_engine``, recorded by the scraper from the
vocabulary the server's ``/metrics`` matched; a llama.cpp server is also known by its ``/props``
probe) gets each flag in that engine's name, and an action with no counterpart there is left
out rather than given in another engine's words. Sources: each engine's server documentation
(vLLM ``vllm serve --help``; SGLang ``python -m sglang.launch_server --help``; TGI
``text-generation-launcher --help``; llama.cpp ``llama-server --help``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: engine -> {vLLM's words: the engine's words, or None when the engine has no counterpart (the
#: action is then left out)}. Longer phrases first where one contains another.
ENGINE_WORDS: dict[str, dict[str, str | None]] = {
    "llamacpp": {
        "--max-num-seqs": "--parallel",
        "--kv-cache-dtype fp8": "--cache-type-k q8_0 --cache-type-v q8_0",
        "--gpu-memory-utilization": None,  # llama.cpp sizes the KV cache by --ctx-size
        "--enforce-eager": None,  # llama.cpp uses CUDA graphs where built with them
        "--max-model-len": "--ctx-size",
        "--max-num-batched-tokens": "--batch-size",
        "--quantization awq|gptq|fp8": "a smaller GGUF quantization (Q8_0, Q4_K_M)",
        "--tensor-parallel-size N": "--split-mode row across GPUs",
        "--enable-prefix-caching": "--cache-reuse 256 (prompt caching is on by default)",
        "--enable-chunked-prefill": None,
        "--speculative-config": "--model-draft",
        "disaggregated prefill": None,
    },
    "sglang": {
        "--max-num-seqs": "--max-running-requests",
        "--gpu-memory-utilization": "--mem-fraction-static",
        "--enforce-eager": "--disable-cuda-graph",
        "--max-model-len": "--context-length",
        "--max-num-batched-tokens": "--chunked-prefill-size",
        "--kv-cache-dtype fp8": "--kv-cache-dtype fp8_e5m2",
        "--quantization awq|gptq|fp8": "--quantization awq|gptq|fp8",
        "--tensor-parallel-size N": "--tp-size N",
        "--enable-prefix-caching": "RadixAttention (on unless --disable-radix-cache)",
        "--enable-chunked-prefill": "--chunked-prefill-size",
        "--speculative-config": "--speculative-algorithm",
    },
    "tgi": {
        "--max-num-seqs": "--max-concurrent-requests",
        "--gpu-memory-utilization": "--cuda-memory-fraction",
        "--enforce-eager": "--cuda-graphs 0",
        "--max-model-len": "--max-total-tokens",
        "--max-num-batched-tokens": "--max-batch-prefill-tokens",
        "--kv-cache-dtype fp8": "--kv-cache-dtype fp8_e5m2",
        "--quantization awq|gptq|fp8": "--quantize awq|gptq|fp8",
        "--tensor-parallel-size N": "--num-shard N",
        "--enable-prefix-caching": "prefix caching (on by default in TGI 3)",
        "--enable-chunked-prefill": None,  # TGI 3 chunks prefill by default
        "--speculative-config": "--speculate N",
    },
}

#: the vLLM flags the actions use: none may be left in an action given for another engine
VLLM_FLAGS: frozenset[str] = frozenset(
    {
        "--max-num-seqs",
        "--enforce-eager",
        "--kv-cache-dtype",
        "--gpu-memory-utilization",
        "--max-model-len",
        "--max-num-batched-tokens",
        "--quantization",
        "--tensor-parallel-size",
        "--enable-prefix-caching",
        "--enable-chunked-prefill",
        "--speculative-config",
    }
)

#: a vocabulary name (``locust_llm.telemetry.vocabularies``) -> the engine whose words it means
ENGINE_OF_VOCABULARY: dict[str, str] = {
    "vllm": "vllm",
    "sim": "vllm",  # the simulator is a twin of vLLM, with its flags
    "sglang": "sglang",
    "tgi": "tgi",
    "llamacpp": "llamacpp",
}

_FLAG = re.compile(r"--[a-z][a-z-]+")


def engine_of(server: Mapping[str, object]) -> str:
    """The engine a run's server flags name (``server_engine``; a llama.cpp ``/props`` probe),
    or "" when the run did not tell."""
    said = str(server.get("server_engine") or "")
    if said:  # one engine (several: servers of different engines, the default words)
        return ENGINE_OF_VOCABULARY.get(said, "")
    if str(server.get("max_num_seqs_source") or "").startswith("llama.cpp"):
        return "llamacpp"
    return ""


def in_engine_words(actions: tuple[str, ...], engine: str) -> tuple[str, ...]:
    """``actions`` with vLLM's flags in ``engine``'s words; an action whose flag has no
    counterpart there is left out. vLLM, the simulator and an unknown engine keep them."""
    words = ENGINE_WORDS.get(engine)
    if not words:
        return actions
    out = []
    for action in actions:
        text: str | None = action
        for phrase in sorted(words, key=len, reverse=True):
            if text is None or phrase not in text:
                continue
            replacement = words[phrase]
            text = None if replacement is None else text.replace(phrase, replacement)
        if text is not None and not VLLM_FLAGS & set(_FLAG.findall(text)) - _own_flags(engine):
            out.append(text)
    return tuple(out)


def _own_flags(engine: str) -> set[str]:
    """Flags ``engine`` shares with vLLM under the same name (kept in its words)."""
    return {
        flag
        for replacement in ENGINE_WORDS.get(engine, {}).values()
        if replacement
        for flag in _FLAG.findall(replacement)
    }
