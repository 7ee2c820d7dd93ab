"""EvalScope perf (``evalscope perf``) against a URL; its per-request SQLite rows in our terms.

Run: ``evalscope perf --api openai --dataset line_by_line`` with the shared prompts, ``--parallel
C --number N`` (closed loop) or ``--rate R --number R*D --open-loop``. Its ``benchmark_data.db``
``result`` table holds per request: ``start_time`` (perf_counter: CLOCK_MONOTONIC on Linux, so
wall = start_time + (time.time() - time.monotonic())), ``first_chunk_latency`` (= TTFT),
``latency`` (= E2E), ``inter_token_latencies`` (gaps between chunks after the first),
``completion_tokens`` and ``prompt_tokens`` (server usage).
Conversions: last token = first_chunk_latency + sum(inter_token_latencies); our TPOT = that sum /
(completion_tokens - 1). EvalScope's own ``time_per_output_token`` is (latency -
first_chunk_latency) / (completion_tokens - 1), which also counts the tail after the last token.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from bench.peers.common import (
    MAX_TOKENS,
    MODEL,
    ClientRun,
    Load,
    PeerMissing,
    Timed,
    peer_tokenizer,
    peer_venv,
    prompt_text,
    run_measured,
)


def command(url: str, load: Load, work: Path, *, prompt: Callable[[int], str] = prompt_text,
            tokenizer: Path | None = None) -> list[str]:  # fmt: skip
    prompts = work / "prompts.txt"
    prompts.write_text("".join(prompt(i) + "\n" for i in range(512)))
    venv = peer_venv("evalscope")
    tokenizer = tokenizer or peer_tokenizer()
    cmd = [str(venv / "bin" / "evalscope"), "perf",
           "--url", f"{url}/v1/chat/completions", "--api", "openai", "--model", MODEL,
           "--dataset", "line_by_line", "--dataset-path", str(prompts),
           "--max-tokens", str(MAX_TOKENS), "--stream", "--outputs-dir", str(work / "out"),
           "--no-timestamp", "--tokenizer-path", str(tokenizer), "--warmup-num", "0"]  # fmt: skip
    if load.open_loop:
        n = max(1, round(load.rate * load.duration_s))
        cmd += ["--rate", f"{load.rate:g}", "--number", str(n), "--parallel", "1024",
                "--open-loop"]  # fmt: skip
    else:
        cmd += ["--parallel", str(load.concurrency), "--number", str(load.requests)]
    return cmd


def read_records(db: Path) -> tuple[list[Timed], int]:
    offset = time.time() - time.monotonic()
    con = sqlite3.connect(db)
    rows = con.execute(
        "select start_time, first_chunk_latency, latency, inter_token_latencies, "
        "completion_tokens, prompt_tokens, success from result"
    ).fetchall()
    con.close()
    recs: list[Timed] = []
    failed = 0
    for start, ttft, e2e, itl_json, out_tok, in_tok, ok in rows:
        if not ok or ttft is None:
            failed += 1
            continue
        gaps = json.loads(itl_json) if itl_json else []
        n = int(out_tok or 0)
        span = sum(gaps)
        tpot = span / (n - 1) if n > 1 else math.nan
        recs.append(Timed(start_wall_s=start + offset, ttft_s=ttft, e2e_s=e2e, tpot_s=tpot,
                          itl_mean_s=tpot, output_tokens=n, last_token_s=ttft + span,
                          input_tokens=int(in_tok) if in_tok is not None else -1))  # fmt: skip
    return recs, failed


def run(url: str, load: Load, work: Path, *, cpu: int | None = None, timeout_s: float = 300,
        prompt: Callable[[int], str] = prompt_text, tokenizer: Path | None = None
        ) -> ClientRun:  # fmt: skip
    work.mkdir(parents=True, exist_ok=True)
    try:
        cmd = command(url, load, work, prompt=prompt, tokenizer=tokenizer)
    except PeerMissing as exc:  # counted as a run without records, with the reason
        return ClientRun("evalscope", load, [], note=f"not run: {exc}")
    rc, samples, wall = run_measured(cmd, timeout_s=timeout_s, cwd=work,
                                     log=work / "client.log", cpu=cpu)  # fmt: skip
    dbs = sorted((work / "out").rglob("benchmark_data.db"))
    if not dbs:
        return ClientRun("evalscope", load, [], note=f"rc={rc}, no db (see {work}/client.log)")
    recs, failed = read_records(dbs[-1])
    return ClientRun("evalscope", load, recs, failed=failed, wall_s=wall, cpu_samples=samples,
                     note="" if rc == 0 else f"rc={rc}")  # fmt: skip
