"""Virtual time: how much faster than real time it runs, and how closely it agrees with a
real-time run of the same sweep through the real client.

``speed``: the demo's 5-stage sweep (c = 1,10,50,100,200 with 10,20,100,200,400 requests,
256 prompt / 64 output tokens) on the demo's simulator settings, in virtual time; speed-up =
simulated seconds / wall-clock seconds it took, median of ``--repeat`` runs.

``agree``: a small sweep (c = 1,4, 10 s per stage, 128 / 32 tokens) run ``--repeat`` times in
real time (``locust-llm demo``: simulator + Locust master and worker + report) and once in
virtual time; per stage, the real runs' spread (min..max) of QPS, TTFT P50 and TPOT mean and
the virtual figure's difference from the real median. The spread is the noise the agreement
test in tests/test_sim_virtual.py allows for.

``agree-open``: the same for open loop (rates 2 and 6 req/s, near-regular arrivals) with the
real Locust client (``locustfiles/sweep.py``) against the simulator.

    .venv/bin/python bench/bench_virtual.py speed agree agree-open --repeat 3 --write
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from locust_llm.launch.sweep import DEMO_SIM_ARGS
from locust_llm.sim.config import SimConfig
from locust_llm.sim.virtual import VirtualWorkload, simulate
from locust_llm.workloads.stages import StagePlan

RESULTS = Path(__file__).resolve().parent / "results" / "virtual.md"
CLI = [sys.executable, "-m", "locust_llm.cli"]
#: the agreement sweep (tests/test_sim_virtual.py runs the same one)
SWEEP = [
    "--concurrency",
    "1,4",
    "--stage-duration",
    "10",
    "--max-tokens",
    "32",
    "--input-len",
    "128",
]
COLUMNS = ("qps", "ttft_p50_s", "tpot_avg_s")
ROOT = Path(__file__).resolve().parent.parent
#: the open-loop agreement (tests/test_sim_virtual.py runs the same): near-regular arrivals
#: (gamma shape 100) so that both sides see the same load, rates 2 and 6 req/s for 10 s each
OPEN_SIM = {"model": "mistral-7b", "gpu": "rtx4090", "num_gpu_blocks_override": 1000,
            "step_overhead_s": 0.002, "seed": 1}  # fmt: skip
OPEN_LLM = ["--llm-rate", "2,6", "--llm-stage-duration", "10", "--llm-burstiness", "100",
            "--llm-max-tokens", "32", "--llm-input-len", "128", "--llm-ignore-eos"]  # fmt: skip
OPEN_VIRTUAL = ["--rate", "2,6", "--stage-duration", "10", "--burstiness", "100",
                "--max-tokens", "32", "--input-len", "128", "--ignore-eos"]  # fmt: skip


def demo_sweep() -> tuple[SimConfig, VirtualWorkload]:
    """The demo's 5-stage sweep on the demo's simulator settings (the speed benchmark)."""
    config = SimConfig(model="mistral-7b", gpu="rtx4090", num_gpu_blocks_override=1000,
                       max_num_seqs=256, step_overhead_s=0.002, seed=1)  # fmt: skip
    stages = tuple(
        StagePlan(concurrency=c, requests=n)
        for c, n in zip((1, 10, 50, 100, 200), (10, 20, 100, 200, 400), strict=True)
    )
    return config, VirtualWorkload(stages=stages, input_len="256", max_tokens="64", ignore_eos=True)


def speed(repeat: int) -> list[str]:
    config, workload = demo_sweep()
    runs = [simulate(config, workload) for _ in range(repeat)]
    ratios = sorted(r.speedup for r in runs)
    run = runs[0]
    return [
        "## Speed: the demo's 5-stage sweep in virtual time",
        "",
        f"```\n.venv/bin/python bench/bench_virtual.py speed --repeat {repeat}\n```",
        "",
        f"{len(run.records)} requests, {run.steps} engine steps, {run.virtual_s:.1f} s of "
        f"simulated time; wall-clock per run: "
        + ", ".join(f"{r.compute_s:.3f} s" for r in runs)
        + f". Speed-up (simulated / wall-clock): median {statistics.median(ratios):,.0f}x, "
        f"lowest {ratios[0]:,.0f}x (target >= 100x).",
        "",
    ]


def _stage_rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "stages.csv").open() as fh:
        return list(csv.DictReader(fh))


def _agreement(
    heading: str,
    what: str,
    real_rows: list[list[dict[str, str]]],
    virtual_rows: list[dict[str, str]],
) -> list[str]:
    """The table: per stage and metric, the real runs, their median and the virtual figure."""
    lines = [
        heading,
        "",
        what,
        "",
        "| stage | metric | real runs | real median | virtual | virtual vs median |",
        "|---|---|---|---:|---:|---:|",
    ]
    for s, vrow in enumerate(virtual_rows):
        for column in COLUMNS:
            values = [float(rows[s][column]) for rows in real_rows]
            med = statistics.median(values)
            ours = float(vrow[column])
            lines.append(
                f"| {vrow['name']} | {column} | "
                + ", ".join(f"{v:.4g}" for v in values)
                + f" | {med:.4g} | {ours:.4g} | {ours / med - 1:+.1%} |"
            )
    lines.append("")
    return lines


def _virtual_rows(tmp: str, flags: list[str]) -> list[dict[str, str]]:
    vdir = Path(tmp) / "virtual"
    cmd = [*CLI, "virtual", *DEMO_SIM_ARGS, *flags, "--out", str(vdir)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    subprocess.run([*CLI, "report", str(vdir)], capture_output=True, timeout=120)
    return _stage_rows(vdir)


def agree(repeat: int) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        real_rows = []
        for i in range(repeat):
            out = Path(tmp) / f"real{i}"
            cmd = [*CLI, "demo", *SWEEP, "--workers", "1", "--out", str(out), "--quiet"]
            subprocess.run(cmd, check=True, capture_output=True, timeout=300)
            real_rows.append(_stage_rows(out))
        virtual_rows = _virtual_rows(tmp, [*SWEEP, "--ignore-eos"])
    what = (
        "```\n.venv/bin/python bench/bench_virtual.py agree --repeat " + f"{repeat}\n```\n\n"
        "Real time: `locust-llm demo " + " ".join(SWEEP) + " --workers 1` (simulator, Locust "
        "master + 1 worker, report); virtual: `locust-llm virtual <the demo's simulator flags> "
        + " ".join(SWEEP)
        + " --ignore-eos`, then `locust-llm report`."
    )
    return _agreement("## Agreement with real-time runs (closed loop)", what, real_rows,
                      virtual_rows)  # fmt: skip


def agree_open(repeat: int) -> list[str]:
    from locust_llm.sim.testing import running_sim

    locust = str(Path(sys.executable).parent / "locust")
    with tempfile.TemporaryDirectory() as tmp:
        real_rows = []
        for i in range(repeat):
            out = Path(tmp) / f"real{i}"
            with running_sim(**OPEN_SIM) as url:
                cmd = [locust, "-f", "locustfiles/sweep.py", "--host", url, "--headless",
                       "--only-summary", "--stop-timeout", "30s", "--llm-run-dir", str(out),
                       *OPEN_LLM]  # fmt: skip
                subprocess.run(cmd, check=True, capture_output=True, timeout=300, cwd=ROOT)
            subprocess.run([*CLI, "report", str(out)], capture_output=True, timeout=120)
            real_rows.append(_stage_rows(out))
        virtual_rows = _virtual_rows(tmp, OPEN_VIRTUAL)
    what = (
        "```\n.venv/bin/python bench/bench_virtual.py agree-open --repeat " + f"{repeat}\n```\n\n"
        "Real time: the simulator ("
        + ", ".join(f"{k}={v}" for k, v in OPEN_SIM.items())
        + ") and `locust -f locustfiles/sweep.py --headless "
        + " ".join(OPEN_LLM)
        + "`; "
        "virtual: `locust-llm virtual <the same simulator flags> "
        + " ".join(OPEN_VIRTUAL)
        + "`; both through `locust-llm report`."
    )
    return _agreement("## Agreement with real-time runs (open loop)", what, real_rows,
                      virtual_rows)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="+", choices=("speed", "agree", "agree-open"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS}")
    args = parser.parse_args()
    t0 = time.time()
    body: list[str] = []
    for what in args.what:
        body += {"speed": speed, "agree": agree, "agree-open": agree_open}[what](args.repeat)
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    header = [
        "# Virtual time",
        "",
        f"Machine: `nproc` = {os.cpu_count()}, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, shared with other jobs. Date: {date}. "
        f"This file took {time.time() - t0:.0f} s to measure.",
        "",
    ]
    text = "\n".join(header + body)
    print(text)
    if args.write:
        RESULTS.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
