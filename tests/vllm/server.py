"""Start and stop a real vLLM engine (the CPU build) for the engine tests.

The engine runs in the venv ``scripts/build_vllm.sh`` leaves in
``~/.cache/locust-llm/vllm-cpu-<version>/`` (``bash scripts/bootstrap.sh --test`` runs that
script), as ``python -m vllm.entrypoints.openai.api_server`` (``vllm serve`` looks up the version
of a distribution named ``vllm`` and the CPU build's is named ``vllm-cpu``), on 127.0.0.1 on a
free port, offline, eager (no graph capture), in its own process group:
:meth:`VllmServer.stop` ends the group. ``VLLM_CPU_KVCACHE_SPACE`` is removed from the engine's
environment because it overrides ``--kv-cache-memory-bytes``. Start-up takes about 30 s and the
engine holds about 4.5 GB of RAM: a test module starts one and shares it.

The engine computes in bf16 where the CPU has AVX-512 (torch's fast bf16 kernels are built on it)
and in fp32 elsewhere (:func:`engine_dtype`): on a 2-core AMD EPYC without AVX-512 the budget
module's chunked step took ~0.5 s in bf16 and 108 ms in fp32 (docs/servers.md). A KV cache is
given as the bytes it takes at bf16 (:func:`kv_cache_bytes`): it holds as many tokens either way.
"""

from __future__ import annotations

import functools
import json
import os
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from llamacpp.server import LlamaServer, _free_port, _ready, _spawn

from locust_llm.telemetry.promtext import Sample, parse_samples
from vllm.model import cache_root

ROOT = Path(__file__).resolve().parents[2]
VERSION = (Path(__file__).with_name("VLLM_CPU_VERSION")).read_text().strip()
BUILD_SCRIPT = ROOT / "scripts" / "build_vllm.sh"
START_TIMEOUT_S = 180.0
#: Left out of the engine's environment: the first overrides --kv-cache-memory-bytes; with the
#: second, tests/ on the path would let this package shadow the engine's own ``vllm``.
DROPPED_ENV = ("VLLM_CPU_KVCACHE_SPACE", "PYTHONPATH")
#: The CPU flags torch's fast bf16 matrix kernels need (oneDNN's bf16 on AVX-512, torch's own
#: AVX-512 test, which vLLM's CPU build also asks); without them the engine runs fp32
#: (docs/servers.md has the times).
BF16_CPU_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq")


@functools.cache
def engine_dtype(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The engine's ``--dtype``: ``bfloat16`` (the model's own) where the CPU has every one of
    :data:`BF16_CPU_FLAGS`, else ``float32``."""
    try:
        flags = set(cpuinfo.read_text().split())
    except OSError:
        flags = set()
    return "bfloat16" if flags.issuperset(BF16_CPU_FLAGS) else "float32"


def kv_cache_bytes(bf16_bytes: int) -> int:
    """``--kv-cache-memory-bytes`` for as many tokens as ``bf16_bytes`` hold at bf16, in the
    engine's dtype (:func:`engine_dtype`: fp32 takes twice the bytes a token)."""
    return bf16_bytes * (2 if engine_dtype() == "float32" else 1)


def engine_python() -> Path:
    """The vLLM venv's python; AssertionError saying how to install it when it is missing."""
    venv = cache_root() / f"vllm-cpu-{VERSION}"
    if not (venv / ".installed").is_file():
        raise AssertionError(
            f"{venv} is missing: install it once with `bash scripts/bootstrap.sh --test` (or "
            f"`bash {BUILD_SCRIPT.relative_to(ROOT)}`; 1-2.5 minutes and 3.4 GB)"
        )
    return venv / "bin" / "python"


class VllmServer(LlamaServer):
    """A running vLLM engine; ``url`` is its base URL, ``name`` the served model name.

    The process handling (``get``, ``text``, ``stop`` of the group) is llama-server's."""

    name = ""

    def metric_samples(self) -> list[Sample]:
        """``/metrics`` as (sample name, labels, value) triples (vLLM's series carry labels)."""
        return parse_samples(self.get("/metrics"))

    def metric_sum(self, name: str, **labels: str) -> float:
        """The sum of every series of sample ``name`` whose labels include ``labels``."""
        return sum(
            value
            for sample, have, value in self.metric_samples()
            if sample == name and all(have.get(k) == v for k, v in labels.items())
        )


def warm_up(server: VllmServer, concurrency: int = 1) -> None:
    """``concurrency`` short streamed chat requests at once: the first request after start-up pays
    one-time costs in vLLM's front end (hundreds of ms between its first-token stamp and the first
    chunk sent), and the first batches of a size pay the engine's for that size."""
    body = {"model": server.name, "messages": [{"role": "user", "content": "warm up " * 16}],
            "max_tokens": 8, "stream": True}  # fmt: skip

    def one(_: int) -> None:
        request = urllib.request.Request(
            server.url + "/v1/chat/completions", json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(concurrency)))


def _healthy(server: LlamaServer) -> bool:
    try:
        server.get("/health")
    except urllib.error.HTTPError:
        return False
    return True


def start_vllm(
    model: Path, log_dir: Path, *, name: str = "tiny-llama", extra: tuple[str, ...] = ()
) -> VllmServer:
    """Start vLLM serving ``model`` as ``name`` with the flags in ``extra`` (after the defaults:
    :func:`engine_dtype`, 4096 positions, eager, a KV cache of 64 MiB at bf16); wait until
    ``/health`` answers 200, then send one request (:func:`warm_up`)."""
    python = engine_python()
    port = _free_port()
    cmd = [
        str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--served-model-name", name, "--host", "127.0.0.1", "--port", str(port),
        "--dtype", engine_dtype(), "--max-model-len", "4096", "--enforce-eager",
        "--kv-cache-memory-bytes", str(kv_cache_bytes(64 * 2**20)), *extra,
    ]  # fmt: skip
    keep = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    env = {**keep, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    # the cwd must not be tests/, whose vllm package would shadow the engine's
    server = _spawn("vllm", cmd, port, log_dir, env=env, cwd=log_dir)
    engine = VllmServer(server.popen, server.url, server.log)
    engine.name = name
    if _ready(engine, _healthy, START_TIMEOUT_S):
        warm_up(engine)
        return engine
    engine.stop()
    raise AssertionError(f"vLLM did not become healthy:\n{engine.text()[-4000:]}")
