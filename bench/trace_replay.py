"""Trace replay and multi-turn sessions against the simulator: the workloads targets, measured.

    .venv/bin/python bench/trace_replay.py [--lines 10000] [--rate 25] [--speedup 4]

1. A Mooncake-format trace (``--lines`` lines, Poisson at ``--rate`` req/s of trace time, hash
   ids shared by 8 prefix groups) replayed by ``locustfiles/trace_replay.py`` with
   ``--speedup``, one Locust master and two workers, against a zero-cost simulator (far below
   its capacity). Checked: every line sent exactly once (records and the simulator's own
   trace), dispatch delay (start - scheduled) P50/P99/max, and the simulator's prefix-cache
   hit rate (its ``vllm:prefix_cache_*`` counters) against the rate the hash ids imply.
2. Multi-turn sessions (4 turns of 1024 words, 16-token answers, one user) over a simulated
   llama-3.1-8b on an H100, prefix cache on and off: TTFT by turn, and the saving against the
   cached prefix's prefill time (a line fitted through the cache-off TTFTs).

Writes ``bench/results/workloads.md``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from locust_llm.sim.testing import running_sim  # noqa: E402
from locust_llm.workloads.traces import (  # noqa: E402
    expected_hit_rate,
    read_trace,
    synthetic_mooncake,
    write_jsonl,
)

LOCUST = str(Path(sys.executable).parent / "locust")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _metric(text: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " ")
    )


def replay(work: Path, lines: int, rate: float, speedup: float) -> dict[str, float]:
    trace = write_jsonl(
        synthetic_mooncake(lines, rate_per_s=rate, groups=8, shared_blocks=2, seed=11),
        work / "mooncake.jsonl",
    )
    parsed = read_trace(trace)
    run_dir, sim_trace = work / "run", work / "sim.jsonl"
    env = {**os.environ, "LOCUST_LLM_TRACE": str(trace), "LOCUST_LLM_SPEEDUP": str(speedup)}
    sim = {"zero_cost": True, "step_overhead_s": 0.002, "output_len": "fixed:8"}
    with running_sim(trace_path=str(sim_trace), max_num_seqs=1024, **sim) as url:
        port = _free_port()
        lf = str(ROOT / "locustfiles" / "trace_replay.py")
        master = subprocess.Popen(
            [LOCUST, "-f", lf, "--headless", "--master", "--master-bind-host", "127.0.0.1",
             "--master-bind-port", str(port), "--expect-workers", "2", "--host", url,
             "--llm-run-dir", str(run_dir)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        workers = [
            subprocess.Popen(
                [
                    LOCUST,
                    "-f",
                    lf,
                    "--worker",
                    "--master-host",
                    "127.0.0.1",
                    "--master-port",
                    str(port),
                ],
                cwd=work,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(2)
        ]
        t0 = time.time()
        out, _ = master.communicate(timeout=lines / rate / speedup + 300)
        wall_s = time.time() - t0
        for w in workers:
            w.wait(timeout=60)
        with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
            metrics = resp.read().decode()
    if master.returncode != 0:
        raise SystemExit(f"replay failed ({master.returncode}):\n{out[-3000:]}")
    records = pd.read_parquet(run_dir / "requests.parquet")
    server = [json.loads(x) for x in sim_trace.read_text().splitlines() if x.strip()]
    ok = records[records.ok]
    delay_ms = (ok.start_wall_s - ok.scheduled_wall_s) * 1000.0
    sim_rate = _metric(metrics, "vllm:prefix_cache_hits_total") / _metric(
        metrics, "vllm:prefix_cache_queries_total"
    )
    return {
        "lines": float(len(parsed)),
        "records": float(len(records)),
        "ok": float(len(ok)),
        "distinct_lines": float(records.trace_line.nunique()),
        "server_requests": float(len(server)),
        "server_ids_match": float(
            sorted(r["client_request_id"] for r in server) == sorted(records.request_id)
        ),
        "workers": float(records.worker_id.nunique()),
        "delay_p50_ms": float(delay_ms.median()),
        "delay_p99_ms": float(delay_ms.quantile(0.99)),
        "delay_max_ms": float(delay_ms.max()),
        "late_over_5ms": float((delay_ms > 5.0).sum()),
        "expected_hit_rate": expected_hit_rate(parsed),
        "sim_hit_rate": sim_rate,
        "usage_hit_rate": float(ok.cached_tokens.sum() / ok.input_tokens.sum()),
        "wall_s": wall_s,
        "load_after": os.getloadavg()[0],
        "span_s": parsed[-1].time_s / speedup,
    }


TIMER_PROBE = """
import json, sys, time
import gevent
times = json.loads(sys.stdin.read())
origin = time.time() + 1.0
late = []
def wake(t):
    gevent.sleep(max(origin + t - time.time(), 0))
    late.append(time.time() - origin - t)
gevent.joinall([gevent.spawn(wake, t) for t in times])
print(json.dumps(late))
"""


def timer_floor_ms(lines: list[float], speedup: float) -> tuple[float, float]:
    """P50/P99 lateness (ms) of bare gevent timers at one worker's share of the schedule, on this
    machine right now: the floor any gevent client's dispatch delay stands on."""
    times = [t / speedup for t in lines[::2]]
    probe = subprocess.run(
        [sys.executable, "-c", TIMER_PROBE], input=json.dumps(times), capture_output=True,
        text=True, check=True, timeout=times[-1] + 120,
    )  # fmt: skip
    late = pd.Series(json.loads(probe.stdout)) * 1000.0
    return float(late.median()), float(late.quantile(0.99))


SESSIONS = """
from locust_llm.client.workload_users import SessionUser

class Talk(SessionUser):
    sessions = "synthetic"
    session_turns = "fixed:4"
    turn_input_len = "fixed:1024"
    turn_output_len = "fixed:16"
    max_tokens = 16
"""


def sessions(work: Path, seconds: int) -> pd.DataFrame:
    (work / "talk.py").write_text(SESSIONS)
    frames = {}
    for cache in (True, False):
        run_dir = work / f"sessions-{cache}"
        physics = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "output_len": "fixed:16"}
        with running_sim(enable_prefix_caching=cache, **physics) as url:
            subprocess.run(
                [LOCUST, "-f", str(work / "talk.py"), "--headless", "--host", url, "-u", "1",
                 "-r", "1", "-t", f"{seconds}s", "--llm-run-dir", str(run_dir)],
                cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        records = pd.read_parquet(run_dir / "requests.parquet")
        frames[cache] = records[records.ok]
    on, off = frames[True], frames[False]
    x, y = off.input_tokens.astype(float), off.ttft_s
    slope = x.cov(y) / x.var()
    table = pd.DataFrame(
        {
            "requests": on.groupby("turn").size(),
            "prompt_tokens": on.groupby("turn").input_tokens.median(),
            "cached_tokens": on.groupby("turn").cached_tokens.median(),
            "ttft_off_ms": off.groupby("turn").ttft_s.median() * 1000,
            "ttft_on_ms": on.groupby("turn").ttft_s.median() * 1000,
        }
    )
    table["saving_ms"] = table.ttft_off_ms - table.ttft_on_ms
    table["predicted_saving_ms"] = slope * table.cached_tokens * 1000
    return table


def _markdown(table: pd.DataFrame) -> str:
    """A small frame as a markdown table (index first), numbers to one decimal."""
    head = [table.index.name or "", *table.columns]
    lines = ["| " + " | ".join(map(str, head)) + " |", "|" + "---|" * len(head)]
    for index, row in table.iterrows():
        cells = [f"{v:.1f}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join([str(index), *cells]) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=10000)
    ap.add_argument("--rate", type=float, default=25.0, help="req/s of trace time")
    ap.add_argument("--speedup", type=float, default=4.0)
    ap.add_argument("--session-seconds", type=int, default=20)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "workloads.md"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="wl-bench-") as tmp:
        work = Path(tmp)
        load_before = os.getloadavg()[0]
        r = replay(work, args.lines, args.rate, args.speedup)
        trace_times = [x.time_s for x in read_trace(work / "mooncake.jsonl")]
        floor_p50, floor_p99 = timer_floor_ms(trace_times, args.speedup)
        table = sessions(work, args.session_seconds)
    cpu = platform.processor() or platform.machine()
    command = (
        f".venv/bin/python bench/trace_replay.py --lines {args.lines} --rate {args.rate:g} "
        f"--speedup {args.speedup:g} --session-seconds {args.session_seconds}"
    )
    rows = [
        ("lines in the trace", f"{r['lines']:.0f}", ""),
        (
            "records / distinct trace lines / answered",
            f"{r['records']:.0f} / {r['distinct_lines']:.0f} / {r['ok']:.0f}",
            "every line once",
        ),
        (
            "requests the simulator received (same ids as the records)",
            f"{r['server_requests']:.0f} ({'yes' if r['server_ids_match'] else 'NO'})",
            "",
        ),
        ("workers that sent lines", f"{r['workers']:.0f}", "2"),
        (
            "dispatch delay P50 / P99 / max (ms)",
            f"{r['delay_p50_ms']:.2f} / {r['delay_p99_ms']:.2f} / {r['delay_max_ms']:.1f}",
            "P99 <= 5 ms",
        ),
        ("lines sent more than 5 ms late", f"{r['late_over_5ms']:.0f}", ""),
        (
            "floor: bare gevent timers at one worker's schedule, lateness P50 / P99 (ms)",
            f"{floor_p50:.2f} / {floor_p99:.2f}",
            "",
        ),
        ("prefix-cache hit rate the hash ids imply", f"{r['expected_hit_rate']:.4f}", ""),
        (
            "simulator's hit rate (`vllm:prefix_cache_hits_total / queries_total`)",
            f"{r['sim_hit_rate']:.4f}",
            "within 0.01",
        ),
        ("hit rate from the answers' `cached_tokens`", f"{r['usage_hit_rate']:.4f}", ""),
    ]
    replay_table = "\n".join(
        ["| figure | value | target |", "|---|---|---|"]
        + [f"| {a} | {b} | {c} |" for a, b, c in rows]
    )
    text = f"""# Workloads: trace replay and multi-turn sessions

Machine: `nproc` = {os.cpu_count()} ({cpu}), shared with other engineers' jobs (1-minute
load {load_before:.1f} when the run started, {r["load_after"]:.1f} when the replay ended). Date
{datetime.date.today()} (VM clock).
Command:

    {command}

## Trace replay: {int(r["lines"])} Mooncake-format lines, 2 workers

Trace: Poisson at {args.rate:g} req/s of trace time, replayed at x{args.speedup:g}
({args.rate * args.speedup:g} req/s, {r["span_s"]:.0f} s of schedule; the run took
{r["wall_s"]:.0f} s with start-up and drain), 8 prefix groups of 2 hash blocks, then each line's
own blocks; zero-cost simulator (far below capacity), `locustfiles/trace_replay.py`, one master
and two workers on this machine.

{replay_table}

## Multi-turn sessions: TTFT by turn, prefix cache on and off

4 turns of 1024 new words each, 16-token answers carried, one user, {args.session_seconds} s per
run; simulated llama-3.1-8b on one H100-SXM. The predicted saving is the cached tokens'
prefill time: the slope of a line fitted through the cache-off run's TTFT against prompt tokens,
times the median cached tokens of the turn.

{_markdown(table)}
"""
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
