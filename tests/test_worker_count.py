"""How many Locust workers `run` and `demo` start when not told: one per core this process may
use (its CPU affinity, as ``taskset`` sets it), less the demo's simulator's core; at least one;
and the announcement says what was chosen and why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from locust_llm.launch.sweep import choose_workers, simulator, usable_cores

CLI = [sys.executable, "-m", "locust_llm.cli"]
needs_taskset = pytest.mark.skipif(
    shutil.which("taskset") is None or not hasattr(os, "sched_getaffinity"),
    reason="needs taskset and CPU affinity (Linux)",
)


def test_one_worker_per_core_less_the_servers_and_never_none() -> None:
    assert choose_workers(16) == (16, "one per core of the 16 this process may use")
    assert choose_workers(16, server_cores=1) == (
        15,
        "one per core of the 16 this process may use, 1 left to the simulator",
    )
    assert choose_workers(2, server_cores=1)[0] == 1
    workers, why = choose_workers(1, server_cores=1)
    assert workers == 1 and why.endswith("fewer cores than that, so 1")


@needs_taskset
def test_the_cores_are_those_this_process_may_use_not_the_hosts() -> None:
    assert usable_cores() == len(os.sched_getaffinity(0))
    first = min(os.sched_getaffinity(0))
    out = subprocess.run(
        ["taskset", "-c", str(first), sys.executable, "-c",
         "from locust_llm.launch.sweep import usable_cores; print(usable_cores())"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == "1"


@needs_taskset
@pytest.mark.slow
def test_run_under_taskset_starts_and_announces_one_worker(tmp_path: Path) -> None:
    """`locust-llm run` without --workers, confined by taskset to one core: one worker, said so,
    and run.json lists exactly one worker."""
    run_dir = tmp_path / "run"
    first = min(os.sched_getaffinity(0))
    with simulator(["--zero-cost", "--step-overhead-ms", "5", "--output-len", "fixed:8"],
                   tmp_path / "sim.log") as url:  # fmt: skip
        out = subprocess.run(
            ["taskset", "-c", str(first), *CLI, "run", "--host", url, "--concurrency", "2",
             "--stage-requests", "4", "--max-tokens", "8", "--out", str(run_dir)],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
    assert out.returncode in (0, 3), out.stdout[-2000:] + out.stderr[-2000:]
    first_line = out.stdout.splitlines()[0]
    assert "; 1 worker(s) (one per core of the 1 this process may use); run dir" in first_line
    info = json.loads((run_dir / "run.json").read_text())
    assert len(info["workers"]) == 1


def test_the_scale_out_bench_gives_each_worker_its_own_core_and_the_server_the_rest() -> None:
    """bench/scale_out.py's layout: workers on the first cores, one simulator per core left."""
    from bench.scale_out import plan

    big = plan(list(range(16)), 8)
    assert big.worker_cores == tuple(range(8)) and big.server_cores == tuple(range(8, 16))
    assert not big.shared
    small = plan([0, 1], 1)
    assert small.worker_cores == (0,) and small.server_cores == (1,) and not small.shared
    crowded = plan([0, 1], 2)  # no core left: the simulator shares the last worker's, flagged
    assert crowded.server_cores == (1,) and crowded.shared
    with pytest.raises(SystemExit, match="--workers 4: only 2 core"):
        plan([0, 1], 4)
