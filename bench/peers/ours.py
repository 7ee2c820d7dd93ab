"""Our client: ``locustfiles/sweep.py`` headless in a subprocess; records from requests.parquet.

Closed loop: ``--llm-concurrency C --llm-stage-requests N``; open loop: ``--llm-rate R
--llm-stage-duration D``. Prompts come from a JSONL file of the shared benchmark prompts.
The records are already in our definitions; nothing is converted.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from bench.peers.common import MAX_TOKENS, ClientRun, Load, Timed, prompt_text, run_measured

ROOT = Path(__file__).resolve().parents[2]


def write_prompts(path: Path, n: int = 512, prompt: Callable[[int], str] = prompt_text) -> Path:
    with path.open("w") as f:
        for i in range(n):
            f.write(json.dumps({"prompt": prompt(i)}) + "\n")
    return path


def command(url: str, load: Load, work: Path, *, locustfile: str = "locustfiles/sweep.py",
            prompt: Callable[[int], str] = prompt_text, extra: Sequence[str] = ()
            ) -> list[str]:  # fmt: skip
    exe = Path(sys.executable).parent / "locust"
    prompts = write_prompts(work / "prompts.jsonl", prompt=prompt)
    cmd = [str(exe), "-f", locustfile, "--host", url, "--headless", "--only-summary",
           "--stop-timeout", "6", "--llm-run-dir", str(work / "run"), "--llm-max-tokens",
           str(MAX_TOKENS), "--llm-dataset", str(prompts),
           "--llm-server-metrics", "none", "--loglevel", "WARNING"]  # fmt: skip
    if load.open_loop:
        cmd += ["--llm-rate", f"{load.rate:g}", "--llm-stage-duration", f"{load.duration_s:g}"]
    else:
        cmd += ["--llm-concurrency", str(load.concurrency),
                "--llm-stage-requests", str(load.requests)]  # fmt: skip
    return [*cmd, *extra]


def read_records(run_dir: Path) -> tuple[list[Timed], int]:
    df = pd.read_parquet(run_dir / "requests.parquet")
    ok = df[df.ok]
    recs = [
        Timed(
            start_wall_s=r.start_wall_s,
            ttft_s=r.ttft_s,
            e2e_s=r.e2e_s,
            tpot_s=r.tpot_s,
            itl_mean_s=r.itl_mean_s,
            output_tokens=int(r.output_tokens),
            last_token_s=r.last_token_s,
            input_tokens=int(r.input_tokens) if not r.input_tokens_estimated else -1,
        )
        for r in ok.itertuples()
    ]
    failed = int((~df.ok & (df.error_kind != "cancelled")).sum())
    return recs, failed


def run(url: str, load: Load, work: Path, *, cpu: int | None = None, timeout_s: float = 300,
        prompt: Callable[[int], str] = prompt_text, extra: Sequence[str] = ()
        ) -> ClientRun:  # fmt: skip
    """``extra``: more command-line options (``--llm-preconnect``)."""
    work.mkdir(parents=True, exist_ok=True)
    cmd = command(url, load, work, prompt=prompt, extra=extra)
    rc, samples, wall = run_measured(cmd, timeout_s=timeout_s, cwd=ROOT,
                                     log=work / "client.log", cpu=cpu)  # fmt: skip
    if not (work / "run" / "requests.parquet").exists():
        return ClientRun("ours", load, [], note=f"rc={rc}, no records (see {work}/client.log)")
    recs, failed = read_records(work / "run")
    return ClientRun("ours", load, recs, failed=failed, wall_s=wall, cpu_samples=samples,
                     note="" if rc == 0 else f"rc={rc}", cpu_s=math.nan)  # fmt: skip
