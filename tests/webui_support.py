"""Helpers for the web-UI tests and the README screenshot: free ports, the simulator and Locust as
subprocesses in their own process groups, small HTTP reads, and headless system Chromium.

Every wait is bounded; :func:`spawn` kills the whole process group when its block ends.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


def free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (bound to port 0, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[Any]:
    """Run ``cmd`` (cwd = repo root, output to ``log``) in its own process group; kill it after."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=full_env,
            start_new_session=True,
        )  # fmt: skip
        try:
            yield proc
        finally:
            _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue
    with suppress(ProcessLookupError):  # children left in the group after the leader exited
        os.killpg(proc.pid, signal.SIGKILL)


def wait_for(
    what: str,
    check: Callable[[], Any],
    timeout_s: float,
    every_s: float = 0.2,
    explain: Callable[[], str] | None = None,
) -> Any:
    """Call ``check`` until it returns something truthy (returned); fail after ``timeout_s``,
    with what ``explain`` says of the processes' state then (their logs, their own status)."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except Exception as exc:  # not up yet
            last_error = exc
            value = None
        if value:
            return value
        time.sleep(every_s)
    context = ""
    if explain is not None:
        try:
            context = "\n" + explain()
        except Exception as exc:  # the explanation must not hide the timeout
            context = f"\n(no explanation: {exc!r})"
    timed_out = f"timed out after {timeout_s} s waiting for {what} ({last_error})"
    raise AssertionError(timed_out + context)


def log_tails(*logs: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of each log, headed by its name (for a failure's message)."""
    parts = []
    for log in logs:
        text = log.read_text(errors="replace").splitlines() if log.is_file() else ["(no file)"]
        parts.append(f"--- {log.name} (last {lines} lines)\n" + "\n".join(text[-lines:]))
    return "\n".join(parts)


@contextmanager
def running_sim(log: Path, *args: str) -> Iterator[str]:
    """``locust-llm sim --port 0`` in a subprocess; yields its URL (its first stdout line)."""
    with spawn([str(BIN / "locust-llm"), "sim", "--port", "0", *args], log):

        def url() -> str | None:
            first = log.read_text().partition("\n")
            return first[0].strip() if first[1] and first[0].startswith("http") else None

        yield wait_for("the simulator's URL", url, 15.0, 0.05)


def get(url: str, timeout_s: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        return resp.read()


def get_json(url: str) -> Any:
    return json.loads(get(url))


def post(url: str) -> bytes:
    req = urllib.request.Request(url, data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=5.0) as resp:
        return resp.read()


def locust_ui(host: str, web_port: int, run_dir: Path, *extra: str) -> list[str]:
    """The command line of a Locust web UI on 127.0.0.1:``web_port`` against ``host``."""
    return [
        str(BIN / "locust"), "-f", "locustfiles/chat.py", "--host", host,
        "--web-host", "127.0.0.1", "--web-port", str(web_port), "--llm-run-dir", str(run_dir),
        *extra,
    ]  # fmt: skip


@contextmanager
def chromium(user_data_dir: Path, width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A Playwright page in the system's headless Chromium with a fresh profile."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(user_data_dir), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
            viewport={"width": width, "height": height},
        )  # fmt: skip
        try:
            yield context.new_page()
        finally:
            context.close()
