"""Every command docs/workloads.md shows runs, exactly as written, against the simulator
(only the server's address is the simulator's own port), and writes its records."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT

from locust_llm.sim.testing import running_sim

DOC = ROOT / "docs" / "workloads.md"
SHOWN_HOST = "http://127.0.0.1:8000"


def doc_commands() -> list[str]:
    blocks = re.findall(r"```\n(.*?)```", DOC.read_text(), flags=re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    return [x for x in lines if x.startswith(("locust ", "LOCUST_LLM_"))]


def test_the_doc_shows_one_command_per_ready_locustfile() -> None:
    shown = {re.search(r"locustfiles/(\w+)\.py", c).group(1) for c in doc_commands()}  # type: ignore[union-attr]
    assert shown == {"sessions", "shared_prefix", "trace_replay", "responses", "embeddings"}
    assert all((ROOT / "locustfiles" / f"{name}.py").is_file() for name in shown)


@pytest.mark.parametrize("command", doc_commands())
def test_doc_command_runs(command: str, tmp_path: Path) -> None:
    assert SHOWN_HOST in command
    env = {
        **os.environ,
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
        "LOCUST_LLM_RUN_DIR": str(tmp_path / "run"),
    }
    with running_sim(zero_cost=True, output_len="fixed:8") as url:
        done = subprocess.run(
            command.replace(SHOWN_HOST, url), shell=True, cwd=ROOT, env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    records = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    ended = records[records.error_kind != "cancelled"]  # -t stops requests in flight
    assert len(ended) > 3 and ended.ok.all(), ended.error_message.unique()
