"""One sweep through Locust's kernel transport against a zero-cost simulator that writes its
ground-truth trace: the set-up the send-stamp and kernel-stamp tests share."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from conftest import run_locust

from locust_llm.launch.sweep import simulator


def traced_kernel_sweep(
    tmp_path: Path,
    *,
    users: int,
    requests: int,
    tokens: int,
    extra: Sequence[str] = (),
    locustfile: str = "locustfiles/sweep.py",
    env: dict[str, str] | None = None,
    step_ms: int = 10,
) -> tuple[pd.DataFrame, dict[str, dict[str, Any]], Path]:
    """``requests`` requests of ``users`` users, ``tokens`` tokens each (the simulator steps
    every ``step_ms``); every request ok. The records, the trace's lines by request id, the run
    dir."""
    trace = tmp_path / "trace.jsonl"
    run_dir = tmp_path / "run"
    sim_args = ["--model", "qwen2.5-0.5b", "--gpu", "h100-sxm", "--zero-cost", "--step-overhead-ms",
                str(step_ms), "--output-len", f"fixed:{tokens}", "--trace", str(trace)]  # fmt: skip
    with simulator(sim_args, tmp_path / "sim.log") as url:
        out = run_locust([
            "-f", locustfile, "--host", url, "--headless", "--only-summary",
            "--stop-timeout", "10s", "--llm-run-dir", str(run_dir), "--llm-concurrency",
            str(users), "--llm-stage-requests", str(requests), "--llm-max-tokens", str(tokens),
            "--llm-input-len", "32", "--llm-server-metrics", "none", "--llm-transport", "kernel",
            *extra,
        ], timeout=120, env=env)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    records = pd.read_parquet(run_dir / "requests.parquet")
    assert len(records) == requests and records.ok.all()
    lines = {d["client_request_id"]: d for d in map(json.loads, trace.read_text().splitlines())}
    return records, lines, run_dir
