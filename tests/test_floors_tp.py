"""The report's roofline floors under tensor parallelism, against the simulator's step trace: a
floor is one GPU's shard's ideal step, so no decode step of the trace is shorter and no stage's
TPOT is under it (the floors once ignored ``tp`` and read a 70B over 8 GPUs at 42 ms a token
where it ran at 16)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from verdict_accuracy import stage_window, traced_report  # noqa: E402

from locust_llm.roofline.floors import decode_step_seconds, get_gpu, get_model  # noqa: E402
from locust_llm.sim import virtual  # noqa: E402
from locust_llm.sim.config import SimConfig  # noqa: E402
from locust_llm.workloads.stages import StagePlan  # noqa: E402

pytestmark = pytest.mark.quick


def test_floors_are_one_shards_and_under_every_step_of_the_trace() -> None:
    config = SimConfig(model="llama-3.1-70b", gpu="h100-sxm", tp=8, max_num_seqs=64,
                       enable_prefix_caching=False, seed=3)  # fmt: skip
    stages = (StagePlan(concurrency=4, requests=24), StagePlan(concurrency=32, requests=128))
    workload = virtual.VirtualWorkload(stages=stages, input_len="256", max_tokens="32",
                                       ignore_eos=True, seed=4, scrape_interval_s=0.25)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        report, engine = traced_report(config, workload, Path(tmp) / "run")
    assert report.floors is not None and report.floors.tp == 8  # the simulator's record
    model, gpu = get_model("llama-3.1-70b"), get_gpu("h100-sxm")
    steps = engine.steps_seen
    whole, _ = decode_step_seconds(model, gpu, 1, 256)  # the whole model's read on one GPU
    for row in report.rows:
        floor = float(row["tpot_floor_s"])
        # one GPU's share of the weights: an eighth of the whole model's read, near enough
        assert floor < whole / 4
        assert float(row["tpot_avg_s"]) >= floor
        assert float(row["ttft_avg_s"]) >= float(row["ttft_floor_s"])
        assert 0 < float(row["model_bw_util"]) <= 1
        lo, hi = stage_window(row)
        decode_only = [
            s["duration_s"] for s in steps
            if lo <= s["start"] < hi and s["prefill_tokens"] == 0 and s["decode_seqs"] > 0
        ]  # fmt: skip
        assert decode_only, "the stage has steps with no prompt work"
        # the floor is an ideal step of the stage's batch: no step of the trace is shorter
        assert min(decode_only) >= floor
