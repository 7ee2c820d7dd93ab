"""The batch limit read from the gauges when no one said it: ``limit_from_gauges`` on hand-made
samples, and the whole report on the simulator's engine, whose configured ``max_num_seqs`` is
the truth the reading is held to (the run dir is stripped of it first, as a real vLLM run would
lack it)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from locust_llm.report.build import build_report
from locust_llm.report.load import load_run
from locust_llm.sim import virtual
from locust_llm.sim.config import SimConfig
from locust_llm.telemetry.batch_limit import limit_from_gauges
from locust_llm.workloads.stages import StagePlan

NAN = math.nan


def test_a_flat_running_gauge_with_more_asked_for_is_the_limit() -> None:
    # 4 slots, lockstep answers: most samples read 4 running and 4 waiting; one was read just
    # after three sequences finished together
    samples = [(2, 0, 0.001), (4, 4, 0.002), (4, 4, 0.002), (1, 4, 0.001), (4, 4, 0.002)]
    found = limit_from_gauges(samples)
    assert found is not None and found[0] == 4
    assert found[1].startswith("running gauge flat at 4 in 3 of 4 samples")


def test_no_limit_without_a_queue_beyond_the_plateau_or_with_a_full_kv_cache() -> None:
    # a request waiting for the step under way: running + waiting never passes the top
    transient = [(15, 1, 0.1), (16, 0, 0.1), (15, 1, 0.1), (15, 1, 0.1), (16, 0, 0.1)]
    assert limit_from_gauges(transient) is None
    full = [(8, 5, 0.99), (8, 6, 0.98), (8, 4, 0.99), (7, 6, 1.0)]
    assert limit_from_gauges(full) is None  # the KV pool may be what holds them back
    # 7 sequences at 89% of the pool: each holds ~12.7%, the 11% left cannot take an eighth
    no_room = [(7, 5, 0.89), (7, 6, 0.88), (7, 4, 0.89), (7, 6, 0.87)]
    assert limit_from_gauges(no_room) is None
    room = [(7, 5, 0.5), (7, 6, 0.52), (7, 4, 0.49), (7, 6, 0.5)]  # the same batch, half the pool
    assert limit_from_gauges(room) is not None
    no_kv = [(8, 5, NAN), (8, 6, NAN), (8, 4, NAN)]
    assert limit_from_gauges(no_kv) is None  # ... and without a KV signal it cannot be told
    assert limit_from_gauges([(8, 5, 0.1), (8, 6, 0.1)]) is None  # too few samples
    assert limit_from_gauges([]) is None


def _virtual_run(tmp_path: Path, config: SimConfig, users: tuple[int, ...]) -> Path:
    stages = tuple(StagePlan(concurrency=u, requests=4 * u) for u in users)
    workload = virtual.VirtualWorkload(
        stages=stages, input_len="128", max_tokens="uniform:16:48", seed=3, scrape_interval_s=0.1
    )
    run_dir = virtual.write_run_dir(virtual.simulate(config, workload), tmp_path / "run")
    info = json.loads((run_dir / "run.json").read_text())
    info["extra"].pop("max_num_seqs")  # a real run does not know it
    info["extra"].pop("sim")
    (run_dir / "run.json").write_text(json.dumps(info))
    return run_dir


@pytest.mark.parametrize("limit", [6, 24])
def test_the_report_reads_the_simulators_max_num_seqs_from_its_gauges(
    tmp_path: Path, limit: int
) -> None:
    config = SimConfig(model="qwen2.5-0.5b", gpu="a10", max_num_seqs=limit, seed=1)
    run_dir = _virtual_run(tmp_path, config, (2, 4 * limit))
    report = build_report(load_run(run_dir), model="qwen2.5-0.5b", gpu="a10")
    top = report.rows[-1]
    assert (top["admission_limit"], top["admission_limit_seqs"]) == (
        "batch limit (observed)",
        float(limit),
    )
    assert top["batch_limit_source"].startswith(f"running gauge flat at {limit} ")
    v = report.verdicts[-1]
    assert (v.kind, v.cause) == ("overloaded", "batch_limit_admission")
    assert "running gauge flat at" in " ".join(v.evidence)  # the source, said


def test_a_kv_bound_or_unqueued_run_reads_no_batch_limit(tmp_path: Path) -> None:
    kv = SimConfig(
        model="qwen2.5-0.5b", gpu="a10", max_num_seqs=256, num_gpu_blocks_override=64, seed=1
    )
    report = build_report(load_run(_virtual_run(tmp_path / "kv", kv, (2, 32))))
    assert not report.rows[-1]["batch_limit_source"]
    light = SimConfig(model="qwen2.5-0.5b", gpu="a10", max_num_seqs=256, seed=1)
    report = build_report(load_run(_virtual_run(tmp_path / "light", light, (2, 16))))
    assert not report.rows[-1]["batch_limit_source"]
