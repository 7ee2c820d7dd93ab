"""Benchmark: ``locust-llm report`` on 1M synthetic request records and an hour of 1 s telemetry.

Builds the run dir once (not timed), then times load + analysis + all four outputs, N times, and
reports the median wall time and the peak resident memory of the process (ru_maxrss).
Usage: .venv/bin/python bench/bench_report.py [--records 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from rundir_factory import make_run, seed_specs

from locust_llm.report.build import build_report
from locust_llm.report.cli import write_outputs
from locust_llm.report.load import load_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    specs = seed_specs()
    stage_s = 3600.0 / len(specs)  # five stages spanning one hour of 1 s telemetry
    total_qps = sum(s.qps for s in specs)
    scale = args.records / (total_qps * stage_s)
    specs = [replace(s, qps=s.qps * scale) for s in specs]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run = make_run(
            Path(tmp) / "bench",
            specs,
            stage_s=stage_s,
            extra={"max_num_seqs": 128},
            roofline={"model": "mistral-7b", "gpu": "rtx4090"},
        )
        made = time.perf_counter() - t0
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            report = build_report(load_run(run))
            write_outputs(report, Path(tmp) / "out")
            times.append(time.perf_counter() - t0)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        n_req = int(report.table["requests"].sum())
        n_tel = len(report.run.telemetry)
    print(f"records={n_req} telemetry_rows={n_tel} run_dir_build_s={made:.1f}")
    print(f"report_s median={statistics.median(times):.2f} runs={[round(t, 2) for t in times]}")
    print(f"peak_rss_mib={peak / 1024:.0f} (before the timed runs: {rss_before / 1024:.0f})")


if __name__ == "__main__":
    main()
