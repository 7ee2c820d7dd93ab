"""Every command docs/simulator.md shows runs, exactly as written."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "simulator.md"


def doc_commands() -> list[str]:
    blocks = re.findall(r"```\n(.*?)```", DOC.read_text(), flags=re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    inline = re.findall(r"`(\.venv/bin/python bench/bench_sim\.py [^`]+)`", DOC.read_text())
    shown = [x for x in lines if x.startswith(("locust-llm ", ".venv/bin/python bench/bench_sim"))]
    return list(dict.fromkeys([*shown, *inline]))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def test_the_doc_shows_the_new_commands() -> None:
    commands = doc_commands()
    assert any("--tp 4" in c and c.startswith("locust-llm sim") for c in commands)
    assert any("--step-trace" in c for c in commands)
    assert any(c.startswith("locust-llm roofline") for c in commands)


@pytest.mark.parametrize("command", doc_commands())
def test_doc_command_runs(command: str, tmp_path: Path) -> None:
    shell = command.replace(".venv/bin/python", sys.executable)
    (tmp_path / "sim.toml").write_text('[sim]\nmax_num_seqs = 16\noutput_len = "fixed:4"\n')
    if not command.startswith("locust-llm sim"):
        done = subprocess.run(
            shell, shell=True, cwd=ROOT if "bench/" in command else tmp_path, env=_env(),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip()
        return
    proc = subprocess.Popen(
        shell, shell=True, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.stderr else ""
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        req = urllib.request.Request(
            url + "/v1/chat/completions", json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert json.loads(resp.read())["usage"]["completion_tokens"] >= 1
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    for name in re.findall(r"--(?:step-)?trace (\S+)", command):
        assert (tmp_path / name).read_text().strip()
