"""The host's time per step as a step bound, judged by the simulator's traces.

A server whose per-step and per-sequence host work (scheduling, launches, sampling) outlasts
the device's memory term is not memory-bound: naming "memory bandwidth" there sends users to
quantize, where the GPU reads its bytes in a fraction of the step. The same decode load is
played in virtual time on the same server twice, with the engine's host time per step large
and with none; the traces' own terms label each stage (``locust_llm.sim.labels``), and the
report's resource model must name what they name, with its memory and host shares ordered as
the traces' are.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from decode_sweep import decode_sweep

from locust_llm.report.build import build_report
from locust_llm.report.diagnosis.resources import step_bound
from locust_llm.report.load import load_run
from locust_llm.sim.config import SimConfig
from locust_llm.sim.labels import GroundTruth, ground_truth
from locust_llm.sim.virtual import simulate, write_run_dir

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import verdict_accuracy  # noqa: E402


def _judged(overhead_s: float, per_seq_s: float, out: Path) -> list[tuple[GroundTruth, dict, str]]:
    """(truth label, report row, verdict cause) of each stage of a decode-heavy sweep."""
    config = SimConfig(
        model="qwen2.5-0.5b",
        gpu="a10",
        step_overhead_s=overhead_s,
        step_overhead_per_seq_s=per_seq_s,
        enable_prefix_caching=False,
    )
    workload = decode_sweep((4, 16), per_user=4, max_tokens=256)
    with verdict_accuracy.recording_engine() as built:
        run = simulate(config, workload, start_wall_s=verdict_accuracy.BASE_WALL_S)
    report = build_report(load_run(write_run_dir(run, out)), model=config.model, gpu=config.gpu)
    engine = built[-1]
    judged = []
    for row, verdict in zip(report.rows, report.verdicts, strict=True):
        hi = float(row["end_wall_s"])
        truth = ground_truth(
            engine.steps_seen, engine.requests_seen, start_s=hi - float(row["duration_s"]), end_s=hi
        )
        judged.append((truth, row, verdict.cause))
    return judged


@pytest.mark.quick
def test_a_host_bound_server_is_named_host_overhead_not_memory_bandwidth(tmp_path: Path) -> None:
    for truth, row, cause in _judged(0.004, 0.0001, tmp_path / "host"):
        assert truth.label == "host_overhead", (truth.overhead_share, truth.memory_set_share)
        assert row["step_bound"] == "host", row
        assert row["host_time_share"] > row["memory_time_share"], row
        assert cause == "host_overhead", (row["stage"], cause)
        # the bandwidth is far from used: the verdict no longer names it
        assert row["mbu"] < 0.5


@pytest.mark.quick
def test_the_same_load_without_host_time_is_memory_bound(tmp_path: Path) -> None:
    for truth, row, cause in _judged(0.0, 0.0, tmp_path / "device"):
        assert truth.label == "bandwidth_bound_decode", truth.overhead_share
        assert row["step_bound"] == "memory", row
        assert row["memory_time_share"] > row["host_time_share"], row
        assert cause == "bandwidth_bound_decode", (row["stage"], cause)
        assert row["memory_time_share"] >= 0.5 and row["mbu"] >= 0.5


@pytest.mark.quick
def test_the_step_bound_is_compute_at_its_line_else_the_longer_of_host_and_memory() -> None:
    assert step_bound(0.6, 0.1, 0.3) == "compute"
    assert step_bound(0.2, 0.3, 0.5) == "host"
    assert step_bound(0.2, 0.5, 0.3) == "memory"
    assert step_bound(0.2, 0.45, 0.47) == "host"  # the host's time outlasts the bytes'
    assert step_bound(0.45, 0.4, 0.15) == "memory"  # below the compute line
