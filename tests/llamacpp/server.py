"""Start and stop a real llama.cpp ``llama-server`` for the conformance tests.

The binary is the one ``scripts/build_llama_server.sh`` leaves in
``~/.cache/locust-llm/llama-server-<version>/bin/`` (``bash scripts/bootstrap.sh --test`` runs that
script). llama-server cannot listen on port 0, so :func:`start_llama_server` binds a socket to
port 0 first, reads the port, closes it and passes it on (and retries on the rare clash). The
server runs in its own process group on 127.0.0.1, CPU only, one compute thread, with
``--metrics`` on and the host-memory prompt cache off (so the cached-token counter only counts a
slot reusing its own previous prompt's prefix); :meth:`LlamaServer.stop` ends the group.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
VERSION = (Path(__file__).with_name("LLAMA_CPP_PYTHON_VERSION")).read_text().strip()
BUILD_SCRIPT = ROOT / "scripts" / "build_llama_server.sh"


def cache_root() -> Path:
    """Where the build script caches (``$LOCUST_LLM_CACHE`` or ``~/.cache/locust-llm``)."""
    return Path(os.environ.get("LOCUST_LLM_CACHE") or Path.home() / ".cache" / "locust-llm")


def server_binary() -> Path:
    """The built llama-server; AssertionError saying how to build it when it is missing."""
    binary = cache_root() / f"llama-server-{VERSION}" / "bin" / "llama-server"
    if not binary.is_file():
        raise AssertionError(
            f"{binary} is missing: build it once with `bash {BUILD_SCRIPT.relative_to(ROOT)}` "
            "(about 10 minutes on 2 cores; `bash scripts/bootstrap.sh --test` does it too)"
        )
    return binary


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """A running llama-server; ``url`` is its base URL (no trailing slash)."""

    def __init__(self, popen: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.popen = popen
        self.url = url
        self.log = log

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def get(self, path: str, timeout_s: float = 5.0) -> str:
        """The body of GET ``path`` as text (raises OSError on failure)."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout_s) as response:
                return str(response.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:  # 503 while loading: close the answer's socket
            exc.close()
            raise

    def get_json(self, path: str) -> Any:
        return json.loads(self.get(path))

    def metrics(self) -> dict[str, float]:
        """``/metrics`` as {sample name: value} (llama.cpp's series carry no labels)."""
        values = {}
        for line in self.get("/metrics").splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                values[name] = float(value)
        return values

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> int:
        """SIGTERM the process group, SIGKILL after 10 s; returns the exit code."""
        if self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)
        return int(self.popen.returncode)


def _spawn(
    name: str, cmd: list[str], port: int, log_dir: Path, *, env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> LlamaServer:  # fmt: skip
    """Start ``cmd`` in its own process group, output to ``log_dir/<name>-<port>.log``."""
    log = log_dir / f"{name}-{port}.log"
    with open(log, "wb") as out:
        popen = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, cwd=cwd, env=env,
                                 stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    return LlamaServer(popen, f"http://127.0.0.1:{port}", log)


def _ready(server: LlamaServer, check: Callable[[LlamaServer], bool], timeout_s: float) -> bool:
    """Poll ``check`` until it is true (True), the process exits or time runs out (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and server.popen.poll() is None:
        try:
            if check(server):
                return True
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    return False


def start_llama_server(
    model: Path,
    log_dir: Path,
    *,
    slots: int = 4,
    ctx_per_slot: int = 1024,
    extra: tuple[str, ...] = (),
    cpu: int | None = None,
) -> LlamaServer:
    """Start llama-server serving ``model`` with ``slots`` parallel slots (pinned to core ``cpu``
    when given); wait until healthy."""
    binary = server_binary()
    last_error = ""
    for _attempt in range(3):
        port = _free_port()
        pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
        cmd = [
            *pin, str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--parallel", str(slots), "--ctx-size", str(slots * ctx_per_slot), "--threads", "1",
            "--threads-http", str(max(4, slots + 2)), "--metrics", "--cache-ram", "0",
            "--no-webui", "--fit", "off", "--alias", model.stem, *extra,
        ]  # fmt: skip
        server = _spawn("llama-server", cmd, port, log_dir)
        if _ready(server, lambda s: s.get_json("/health").get("status") == "ok", 60):
            return server
        server.stop()
        last_error = server.text()[-3000:]
        if "bind" not in last_error and "address" not in last_error.lower():
            break
    raise AssertionError(f"llama-server did not become healthy:\n{last_error}")


def python_server_venv() -> Path:
    """The venv ``scripts/build_llama_server.sh --python`` leaves llama-cpp-python[server] in."""
    venv = cache_root() / f"llama-cpp-python-{VERSION}-venv"
    if not (venv / "bin" / "python").is_file() or not (venv / ".installed").is_file():
        raise AssertionError(
            f"{venv} is missing: build it once with "
            f"`bash {BUILD_SCRIPT.relative_to(ROOT)} --python` (about 8 minutes on 2 cores; "
            "`bash scripts/bootstrap.sh --test` does it too)"
        )
    return venv


def start_python_server(model: Path, log_dir: Path, *, interrupt: bool = False) -> LlamaServer:
    """llama-cpp-python's OpenAI-compatible server (uvicorn) on a free port; wait until it lists
    the model. It serves one request at a time; ``interrupt=False`` (``--interrupt_requests
    False``) makes it queue the others; its own default cuts the stream in progress short."""
    python = python_server_venv() / "bin" / "python"
    port = _free_port()
    cmd = [str(python), "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "2048", "--n_threads", "1",
           "--model_alias", model.stem, "--interrupt_requests", str(interrupt)]  # fmt: skip
    server = _spawn("llama-cpp-python", cmd, port, log_dir)
    if _ready(server, lambda s: bool(s.get_json("/v1/models")["data"]), 90):
        return server
    server.stop()
    raise AssertionError(f"llama-cpp-python's server did not start:\n{server.text()[-3000:]}")
