"""`locust-llm report`: the seed's reading, outputs, exit codes, bad input, soak, compare."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest
from rundir_factory import DECODE, make_run, regime, seed_specs, server_stage

from locust_llm.cli import main
from locust_llm.errors import InputError
from locust_llm.report.diagnosis.alerts import parse_thresholds
from locust_llm.report.diagnosis.knee import find_knee
from locust_llm.report.diagnosis.thresholds import Slo, Thresholds


@pytest.fixture(scope="module")
def seed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(
        tmp_path_factory.mktemp("c") / "seed", seed_specs(), stage_s=4, extra={"max_num_seqs": 128}
    )


def test_seed_sweep_reading_and_conclusion(seed_run: Path, tmp_path: Path, capsys) -> None:
    code = main(["report", str(seed_run), "--out", str(tmp_path)])
    assert code == 3  # the seed's own table crosses GPU util 95% and memory 90%
    out = capsys.readouterr().out
    assert "Conclusion: best concurrency 50-100; cap concurrency at 100." in out
    md = (tmp_path / "report.md").read_text()
    assert "1-50 scales x40 for x50 the load (QPS 10 -> 400, 80% efficiency)" in md
    assert "50-100 throughput flattens" in md and "near the limit" in md
    assert "100-200 throughput falls" in md and "latency explodes" in md
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["knee"]["best"] == "50-100" and summary["knee"]["cap"] == "100"
    assert summary["verdict"]["kind"] == "overloaded"
    # the verdict's actions, as report.md lists them, under the verdict's evidence
    verdict = out[out.index("Verdict: overloaded") :].split("\n\n")[0].splitlines()
    at = verdict.index("  Actions:")
    assert verdict[at + 1 :] == [f"    - {a}" for a in summary["verdict"]["actions"]]
    assert all(line.startswith("  - ") for line in verdict[2:at])  # the evidence above them
    assert summary["errors"] == [] and "Errors (" not in out  # nothing failed: no errors table
    assert {a["name"] for a in summary["alerts"]} == {"gpu_util", "gpu_mem"}
    assert (tmp_path / "stages.csv").read_text().startswith("stage,name,kind,concurrency")
    html = (tmp_path / "report.html").read_text()
    assert (
        html.count("<svg") >= 8
        and "cap 100" in html
        and "http" not in html.split("<body>")[1].replace('xmlns="http://www.w3.org/2000/svg"', "")
    )


def test_alert_overrides_and_exit_zero(seed_run: Path, tmp_path: Path) -> None:
    # GPU utilization > 95% is a warning only; memory pressure (the KV cache's peak, 100% at
    # the top stages) fails until switched off; gpu_util_fails=on makes utilization fail too
    assert main(["report", str(seed_run), "--out", str(tmp_path), "--alert", "gpu_mem=off"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {a["severity"] for a in summary["alerts"]} == {"warning"}
    assert (
        main(
            [
                "report", str(seed_run), "--out", str(tmp_path),
                "--alert", "gpu_mem=off,gpu_util_fails=on",
            ]
        )
        == 3
    )  # fmt: skip
    assert (
        main(
            [
                "report",
                str(seed_run),
                "--out",
                str(tmp_path),
                "--alert",
                "gpu_util=off,gpu_mem=off",
                "--slo",
                "e2e=0.3",
            ]
        )
        == 3
    )  # P99 E2E


def test_slo_moves_the_cap() -> None:
    rows = [
        {
            "stage": i,
            "kind": "step",
            "concurrency": c,
            "qps": q,
            "completed": 10,
            "latency_p99_s": p,
            "error_rate": 0.0,
        }
        for i, (c, q, p) in enumerate(
            [(1, 10, 0.12), (10, 95, 0.15), (50, 400, 0.2), (100, 450, 0.35), (200, 420, 0.8)]
        )
    ]
    assert find_knee(rows).conclusion == "best concurrency 50-100; cap concurrency at 100"
    tight = find_knee(rows, slo=Slo(e2e_s=0.25))
    assert tight.cap == "50" and "misses the SLOs" in tight.notes[0]


@pytest.mark.parametrize(
    ("break_it", "message"),
    [
        (lambda d: (d / "requests.parquet").unlink(), "requests.parquet: missing"),
        (lambda d: (d / "requests.parquet").write_bytes(b"garbage"), "requests.parquet: corrupt"),
        (lambda d: (d / "telemetry.parquet").write_bytes(b"PAR1xx"), "telemetry.parquet: corrupt"),
        (lambda d: (d / "run.json").write_text("{"), "run.json: corrupt"),
        (lambda d: (d / "run.json").unlink(), "run.json: missing"),
    ],
)
def test_bad_run_dir_is_one_line_naming_the_file(
    tmp_path: Path, capsys, break_it, message: str
) -> None:
    specs, kw = regime("decode")
    run = make_run(tmp_path / "bad", specs, stage_s=5, **kw)
    break_it(run)
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_bad_flags_exit_two(seed_run: Path, capsys) -> None:
    assert main(["report", str(seed_run), "--slo", "ttft=fast"]) == 2
    assert main(["report", str(seed_run), "--alert", "cpu=1"]) == 2
    assert main(["report", str(seed_run), "--model", "no-such-model", "--gpu", "h200"]) == 2
    with pytest.raises(InputError, match="gpu_mem"):
        parse_thresholds("gpu_mem=lots")
    assert parse_thresholds("ttft=500ms", Thresholds()).ttft == pytest.approx(0.5)


def test_soak_drift_verdict(tmp_path: Path) -> None:
    steady = replace(server_stage(DECODE, 16), kind="soak")
    drifting = replace(steady, drift_pct_per_h=300.0)
    for spec, kind in ((steady, "healthy"), (drifting, "unstable")):
        run = make_run(tmp_path / kind, [spec], stage_s=600)
        assert (
            main(
                [
                    "report",
                    str(run),
                    "--out",
                    str(tmp_path / f"o-{kind}"),
                    "--alert",
                    "gpu_util=off",
                ]
            )
            == 0
        )
        soak = json.loads((tmp_path / f"o-{kind}" / "summary.json").read_text())["soak"][0]
        assert soak["verdict"]["kind"] == kind
    assert soak["p99_drift_pct_per_h"] > 100


def test_compare_gain_per_instance(tmp_path: Path, capsys) -> None:
    specs, kw = regime("decode")
    one = make_run(tmp_path / "one", specs, stage_s=20, **kw)
    doubled = [replace(s, qps=s.qps * 1.8) for s in specs]
    two = make_run(tmp_path / "two", doubled, stage_s=20, server_instances=2, **kw)
    assert (
        main(
            [
                "report",
                str(one),
                "--compare",
                str(two),
                "--out",
                str(tmp_path / "o"),
                "--alert",
                "gpu_util=off",
            ]
        )
        == 0
    )
    rows = json.loads((tmp_path / "o" / "summary.json").read_text())["comparison"]
    assert rows[1]["instances"] == 2
    assert rows[1]["gain"] == pytest.approx(1.8, rel=0.05)
    assert rows[1]["gain_per_instance"] == pytest.approx(0.9, rel=0.05)
    # the console prints the comparison's table too, one line per run, after the alerts
    out = capsys.readouterr().out
    table = out[out.index("Comparison (horizontal scaling):") :].splitlines()
    assert table[1].split()[:3] == ["run", "instances", "peak"]
    lines = [line.split() for line in table[3:5]]
    assert [line[1] for line in lines] == ["1", "2"]
    gain, per_instance = rows[1]["gain"], rows[1]["gain_per_instance"]
    assert lines[1][-3:] == [f"x{gain:.2f}", "x2.00", f"x{per_instance:.2f}"]
    assert out.index("Verdict:") < out.index("Comparison (") < out.index("Report:")


def test_a_custom_device_describes_what_serves(tmp_path: Path, capsys) -> None:
    example = Path(__file__).resolve().parent.parent / "reports" / "example"
    args = ["report", str(example), "--out", str(tmp_path), "--model", "mistral-7b"]
    device = ["--bandwidth", "100GB/s", "--flops", "2TFLOPS", "--memory", "64GiB"]
    assert main([*args, *device]) in (0, 3)
    with (tmp_path / "stages.csv").open() as f:
        rows = list(csv.DictReader(f))
    # a slow device: the same tokens/s use far more of its bandwidth than of an RTX 4090's
    assert float(rows[0]["mbu"]) > 5.0
    assert main([*args, "--bandwidth", "100GB/s"]) == 2
    assert "needs all of --bandwidth, --flops and --memory" in capsys.readouterr().err
    assert main([*args, *device, "--gpu", "h100-sxm"]) == 2


def test_cpu_device_is_measured_on_this_host(tmp_path: Path) -> None:
    import time

    from locust_llm.roofline.cpu_device import memory_bandwidth_bytes_s

    measured = memory_bandwidth_bytes_s(64 * 1024 * 1024)
    # an independent copy (a memoryview slice assignment: CPython's memcpy) agrees in magnitude
    src, dst = bytes(64 * 1024 * 1024), memoryview(bytearray(64 * 1024 * 1024))
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        dst[:] = src
        times.append(time.perf_counter() - t0)
    best = min(times)
    assert 1 / 4 < measured / (2 * len(src) / best) < 4
    example = Path(__file__).resolve().parent.parent / "reports" / "example"
    args = ["report", str(example), "--out", str(tmp_path), "--model", "mistral-7b", "--gpu", "cpu"]
    assert main(args) in (0, 3)
    with (tmp_path / "stages.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert float(rows[0]["mbu"]) > 1.0  # a 7B model at 18 ms per token is beyond this CPU


@pytest.fixture(scope="module")
def busy_at_every_load(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real short virtual run (a few seconds): the simulated GPU is busy (utilization near
    100%) at every load, but only concurrency 64 outruns it (a queue forms, throughput
    flattens); 1 and 4 scale linearly."""
    import subprocess
    import sys

    run = tmp_path_factory.mktemp("busy") / "run"
    subprocess.run(
        [sys.executable, "-m", "locust_llm.cli", "virtual", "--concurrency", "1,4,64",
         "--stage-requests", "10,16,192", "--max-tokens", "64", "--input-len", "256",
         "--num-gpu-blocks-override", "1000", "--seed", "1", "--out", str(run)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return run


def test_gpu_utilization_alerts_only_where_the_load_saturates_the_gpu(
    busy_at_every_load: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """GPU utilization means "a kernel was running": near 100% at concurrency 1 on a decoding
    GPU, which is no alarm. The alert fires where the stage is saturated too (a queue at the
    server), and says what it means."""
    main(["report", str(busy_at_every_load), "--out", str(tmp_path)])
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "summary.json").read_text())
    utils = [s["gpu_util"] for s in summary["stages"]]
    assert all(u > 0.95 for u in utils), utils  # the old rule warned at every load
    warned = [a for a in summary["alerts"] if a["name"] == "gpu_util"]
    assert [a["stage"] for a in warned] == [2]
    waiting = summary["stages"][2]["waiting"]
    assert warned[0]["severity"] == "warning"
    assert warned[0]["message"] == (
        f"stage 2 (load 64): GPU saturated: utilization (mean) {utils[2] * 100:.1f}% > 95.0% and "
        f"{waiting:.1f} requests waiting (busy, not broken: more load only queues) (warning)"
    )
    assert f"  - {warned[0]['message']}" in out.splitlines()
    # made to fail the run, it still fires only where the GPU is saturated
    code = main(["report", str(busy_at_every_load), "--out", str(tmp_path),
                 "--alert", "gpu_mem=off,gpu_util_fails=on"])  # fmt: skip
    failed = json.loads((tmp_path / "summary.json").read_text())["alerts"]
    assert code == 3 and [(a["name"], a["stage"], a["severity"]) for a in failed] == [
        ("gpu_util", 2, "fail")
    ]


def test_without_a_queue_gauge_a_flattening_step_is_the_saturation(
    busy_at_every_load: Path,
) -> None:
    """A server without a waiting gauge: the stage whose step up from the lower load no longer
    scales (the knee's reading) is the saturated one; the stages that scale are not."""
    from locust_llm.report.build import build_report
    from locust_llm.report.diagnosis.alerts import check, saturation
    from locust_llm.report.load import load_run

    rows = [dict(r, waiting=float("nan")) for r in build_report(load_run(busy_at_every_load)).rows]
    said = saturation(rows, Thresholds())
    assert list(said) == [2]
    gain = rows[2]["qps"] / rows[1]["qps"]
    assert said[2] == (
        f"throughput x{gain:.2f} for x16.00 the load from 4 (busy, not broken: more load adds "
        "little throughput)"
    )
    assert [a.stage for a in check(rows, Thresholds()) if a.name == "gpu_util"] == [2]
