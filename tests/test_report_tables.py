"""The stage table: exact percentiles, the seed's columns, warm-up, no-data and gaps."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rundir_factory import make_run, regime, seed_specs

from locust_llm.report.build import build_report
from locust_llm.report.diagnosis.thresholds import Slo
from locust_llm.report.load import load_run
from locust_llm.report.render_html import render_html, with_gaps
from locust_llm.report.render_md import render_markdown
from locust_llm.report.svg import segments
from locust_llm.report.tables import COLUMNS


@pytest.fixture(scope="module")
def seed_report(tmp_path_factory: pytest.TempPathFactory):
    run = make_run(
        tmp_path_factory.mktemp("r") / "seed",
        seed_specs(),
        stage_s=4,
        extra={"max_num_seqs": 128},
        roofline={"model": "mistral-7b", "gpu": "rtx4090"},
    )
    return build_report(load_run(run), slo=Slo(ttft_s=0.05, e2e_s=0.3))


def test_every_issue_column_is_in_the_table(seed_report) -> None:
    assert list(seed_report.table.columns) == list(COLUMNS)
    for col in (
        "qps",
        "output_tps",
        "total_tps",
        "latency_p90_s",
        "latency_p95_s",
        "ttft_p99_s",
        "tpot_p99_s",
        "itl_p99_s",
        "error_rate_oom",
        "goodput_rps",
        "dispatch_delay_p99_s",
        "gpu_mem_util_max",
        "dram_bw_util",
        "model_bw_util",
        "kv_cache_usage",
        "running",
        "waiting",
        "worker_cpu_max",
    ):
        assert col in COLUMNS


def test_percentiles_are_exact_over_records(seed_report) -> None:
    req = pd.read_parquet(seed_report.run.path / "requests.parquet")
    for stage, row in zip(seed_report.stages, seed_report.rows, strict=True):
        sel = req[
            (req.start_wall_s >= stage.start_wall_s)
            & (req.start_wall_s < stage.end_wall_s)
            & req.ok
        ]
        e2e = sel.e2e_s.to_numpy()
        assert row["latency_p99_s"] == np.percentile(e2e, 99)
        assert row["latency_p90_s"] == np.percentile(e2e, 90)
        assert row["ttft_p50_s"] == np.percentile(sel.ttft_s.to_numpy(), 50)
        assert row["qps"] == pytest.approx(len(sel) / 4.0)
        good = ((sel.ttft_s <= 0.05) & (sel.e2e_s <= 0.3)).sum()
        assert row["goodput_rps"] == pytest.approx(good / 4.0)


def test_seed_table_comes_first_with_the_seed_numbers(seed_report) -> None:
    md = render_markdown(seed_report)
    first_table = md.split("\n\n")[2].splitlines()
    assert first_table[0] == (
        "| concurrency | QPS | avg latency (ms) | P99 (ms) | GPU util | GPU mem used |"
    )
    cells = [line.strip("|").split("|") for line in first_table[2:]]
    assert [c[0].strip() for c in cells] == ["1", "10", "50", "100", "200"]
    assert [c[1].strip() for c in cells] == ["10", "95", "400", "450", "420"]
    avg = [float(c[2]) for c in cells]
    assert avg == pytest.approx([100, 105, 125, 222, 476], rel=0.05)
    gpu = [float(c[4].strip().rstrip("%")) for c in cells]
    assert gpu == pytest.approx([30, 85, 95, 98, 99], abs=1.5)  # telemetry noise, clipped at 100%


def test_roofline_floors_printed_beside_measured(seed_report) -> None:
    row = seed_report.rows[2]
    assert row["tpot_floor_s"] > 0.014  # mistral-7b on rtx4090: >= 14 ms per step
    assert row["model_bw_util"] > 0
    assert "Roofline floors for mistral-7b on rtx4090" in render_markdown(seed_report)


def test_warmup_requests_are_excluded(tmp_path: Path) -> None:
    specs, kw = regime("decode")
    cold = build_report(load_run(make_run(tmp_path / "a", specs, stage_s=20, **kw)))
    warm = build_report(load_run(make_run(tmp_path / "b", specs, stage_s=20, warmup_s=5, **kw)))
    assert warm.rows[-1]["duration_s"] == pytest.approx(15.0)
    assert warm.rows[-1]["requests"] < cold.rows[-1]["requests"]


def test_missing_telemetry_is_nan_not_zero(tmp_path: Path) -> None:
    specs, kw = regime("no_telemetry")
    report = build_report(load_run(make_run(tmp_path / "r", specs, **kw)))
    for col in ("gpu_util", "gpu_mem_util", "kv_cache_usage", "running", "worker_cpu_max"):
        assert all(math.isnan(r[col]) for r in report.rows)
    assert "n/a" in render_markdown(report)
    assert any("no telemetry.parquet" in w for w in report.warnings)


def test_telemetry_gap_is_shown_as_a_gap(tmp_path: Path) -> None:
    specs, kw = regime("decode")
    run = make_run(tmp_path / "g", specs, stage_s=10, gap=(10.0, 20.0), **kw)
    report = build_report(load_run(run))
    assert math.isnan(report.rows[1]["gpu_util"])  # the whole middle stage is a gap
    assert not math.isnan(report.rows[0]["gpu_util"])
    t, v = report.telemetry.timeline("gpu_util")
    assert len(segments(t, v)) == 2
    html = render_html(report)
    title = "GPU, KV cache and worker CPU over time"
    chart = html[html.index(title) :]
    chart = chart[: chart.index("</svg>")]
    assert chart.count('stroke="#1f77b4"') == 2  # GPU util line broken in two


def test_silence_in_sampling_becomes_a_gap() -> None:
    t = np.array([0.0, 1, 2, 3, 10, 11, 12])
    t2, v2 = with_gaps(t, np.ones_like(t))
    assert len(segments(t2, v2)) == 2
