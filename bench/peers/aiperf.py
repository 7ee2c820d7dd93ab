"""NVIDIA AIPerf (``aiperf profile``) against a URL; its ``profile_export.jsonl`` in our terms.

Run: ``aiperf profile --endpoint-type chat --streaming`` with the shared prompts as a
``single_turn`` JSONL file, server token counts (``--use-server-token-count``), ``--concurrency
C --request-count N`` or ``--request-rate R --benchmark-duration D``. Per request it exports
``metadata.request_start_ns`` (wall clock, ns) and metrics in ms: ``time_to_first_token``
(= TTFT), ``request_latency`` (= E2E), ``inter_chunk_latency`` (gaps between content chunks),
``output_sequence_length`` and ``usage_prompt_tokens``.
Conversions: last token = TTFT + sum(inter_chunk_latency); our TPOT = that sum / (output tokens
- 1). AIPerf's ``inter_token_latency`` is (request_latency - TTFT) / (output tokens - 1).
"""

from __future__ import annotations

import json
import math
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


def command(url: str, load: Load, work: Path) -> list[str]:
    prompts = work / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"text": prompt_text(i)}) + "\n" for i in range(512)))
    cmd = [str(peer_venv("aiperf") / "bin" / "aiperf"), "profile", "--model", MODEL,
           "--url", url, "--endpoint-type", "chat", "--streaming",
           "--tokenizer", str(peer_tokenizer()),
           "--input-file", str(prompts), "--custom-dataset-type", "single_turn",
           "--use-server-token-count", "--use-legacy-max-tokens",
           "--extra-inputs", f"max_tokens:{MAX_TOKENS}",
           "--output-artifact-dir", str(work / "art"), "--ui-type", "none"]  # fmt: skip
    if load.open_loop:
        cmd += ["--request-rate", f"{load.rate:g}",
                "--request-count", str(max(1, round(load.rate * load.duration_s)))]  # fmt: skip
    else:
        cmd += ["--concurrency", str(load.concurrency), "--request-count", str(load.requests)]
    return cmd


def _ms(metrics: dict, name: str) -> float:
    m = metrics.get(name)
    return float(m["value"]) / 1e3 if m and m.get("value") is not None else math.nan


def read_records(path: Path) -> tuple[list[Timed], int]:
    recs: list[Timed] = []
    failed = 0
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        meta, metrics = d.get("metadata", {}), d.get("metrics", {})
        if d.get("error") or "time_to_first_token" not in metrics or meta.get("was_cancelled"):
            failed += 1
            continue
        n = int(metrics.get("output_sequence_length", {}).get("value", 0))
        gaps = metrics.get("inter_chunk_latency", {}).get("value") or []
        span = sum(gaps) / 1e3
        ttft = _ms(metrics, "time_to_first_token")
        tpot = span / (n - 1) if n > 1 else math.nan
        prompt = metrics.get("usage_prompt_tokens", {}).get("value")
        recs.append(Timed(start_wall_s=meta["request_start_ns"] / 1e9, ttft_s=ttft,
                          e2e_s=_ms(metrics, "request_latency"), tpot_s=tpot, itl_mean_s=tpot,
                          output_tokens=n, last_token_s=ttft + span,
                          input_tokens=int(prompt) if prompt is not None else -1))  # fmt: skip
    return recs, failed


def run(url: str, load: Load, work: Path, *, cpu: int | None = None,
        timeout_s: float = 300) -> ClientRun:  # fmt: skip
    work.mkdir(parents=True, exist_ok=True)
    try:
        cmd = command(url, load, work)
    except PeerMissing as exc:  # counted as a run without records, with the reason
        return ClientRun("aiperf", load, [], note=f"not run: {exc}")
    rc, samples, wall = run_measured(cmd, timeout_s=timeout_s, cwd=work,
                                     log=work / "client.log", cpu=cpu)  # fmt: skip
    path = work / "art" / "profile_export.jsonl"
    if not path.exists():
        return ClientRun("aiperf", load, [], note=f"rc={rc}, no export (see {work}/client.log)")
    recs, failed = read_records(path)
    return ClientRun("aiperf", load, recs, failed=failed, wall_s=wall, cpu_samples=samples,
                     note="" if rc == 0 else f"rc={rc}")  # fmt: skip
