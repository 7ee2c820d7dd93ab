"""Devices in `run` and `report` (issue 15 item 9): `run --bandwidth/--flops/--memory/--tp`
recorded in run.json and used by a later `report RUN_DIR`, the report's own flags winning; bad
values refused in one line naming the flag; the wording of a report without a GPU."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from cluster_utils import LOCUST_LLM, ROOT, Cluster

from locust_llm.cli import main
from locust_llm.roofline.devices import DeviceArgs, device_noun, is_gpu
from locust_llm.roofline.floors import get_gpu

HOST = ["run", "--host", "http://127.0.0.1:9", "--concurrency", "1", "--stage-requests", "1"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--bandwidth", "40GB/s"],
            "a custom device needs all of --bandwidth, --flops and --memory (--flops, --memory "
            "missing)",
        ),
        (["--bandwidth", "40GB", "--flops", "1TFLOPS", "--memory", "1GiB"], "--bandwidth: unit"),
        (["--bandwidth", "40GB/s", "--flops", "fast", "--memory", "1GiB"], "--flops: cannot"),
        (["--bandwidth", "1TB/s", "--flops", "1TFLOPS", "--memory", "0GiB"], "--memory: must be"),
        (["--roofline-gpu", "rtx9999"], "--roofline-gpu: unknown GPU preset 'rtx9999'"),
        (
            ["--roofline-gpu", "l4", "--bandwidth", "1TB/s", "--flops", "1T", "--memory", "1GB"],
            "give either --roofline-gpu or --bandwidth/--flops/--memory, not both",
        ),
        (["--tp", "0"], "--tp 0: expected"),
        (["--tp", "two"], "--tp 'two': expected a whole number"),
    ],
)
def test_run_refuses_a_bad_device_in_one_line(argv, message, capsys, tmp_path) -> None:
    code = main([*HOST, "--out", str(tmp_path / "run"), "--quiet", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("locust-llm run: error: "), err
    assert message in err, err
    assert not (tmp_path / "run").exists()  # refused before anything started


def test_report_refuses_a_bad_tp_in_one_line(capsys, tmp_path) -> None:
    assert main(["report", str(tmp_path), "--tp", "0"]) == 2
    assert "--tp 0: expected" in capsys.readouterr().err


def test_which_devices_are_gpus() -> None:
    assert is_gpu(get_gpu("l4")) and device_noun(get_gpu("l4")) == "GPU"
    custom = DeviceArgs(bandwidth="40GB/s", flops="1.2TFLOPS", memory="64GiB").resolve()
    assert custom is not None and not is_gpu(custom) and device_noun(custom) == "device"
    assert DeviceArgs().resolve() is None and is_gpu(None)  # nothing given: the GPU field's words


CUSTOM = ["--bandwidth", "1TB/s", "--flops", "150TFLOPS", "--memory", "24GiB", "--tp", "2"]


def _gpu_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "GPU" in line]


def _only_the_device_warning(text: str) -> None:
    """The one line that may say "GPU": the warning that GPU telemetry was left out."""
    lines = _gpu_lines(text)
    assert (
        len(lines) == 1 and "not a GPU: the GPU telemetry in the run dir (gpu_util" in lines[0]
    ), lines


@pytest.mark.slow
@pytest.mark.parametrize(
    ("device", "noun", "entry"),
    [
        (
            CUSTOM,
            "device",
            {"bandwidth": "1TB/s", "flops": "150TFLOPS", "memory": "24GiB", "tp": 2},
        ),
        (["--roofline-gpu", "cpu"], "CPU", {"gpu": "cpu"}),  # + the figures run measured
    ],
    ids=["custom", "cpu"],
)
def test_a_run_without_a_gpu_makes_no_gpu_claims(tmp_path: Path, device, noun, entry) -> None:
    # the simulator exports a simulated GPU's NVML figures: telemetry a CPU report must not use
    run_dir = tmp_path / "run"
    with Cluster(tmp_path) as cluster:
        _, url = cluster.sim("--tp", "2", "--output-len", "fixed:16", "--seed", "3")
        done = subprocess.run(
            [LOCUST_LLM, "run", "--host", url, "--concurrency", "1,4", "--stage-requests", "4,12",
             "--max-tokens", "16", "--input-len", "64", "--workers", "1", "--out", str(run_dir),
             "--quiet", "--roofline-model", "mistral-7b", *device],
            capture_output=True, text=True, timeout=240, check=False,
        )  # fmt: skip
    assert done.returncode in (0, 3), done.stdout + done.stderr
    roofline = json.loads((run_dir / "run.json").read_text())["roofline"]
    if noun == "CPU":  # this host as `run` measured it when it started, recorded
        measured = {k: roofline.pop(k) for k in ("bandwidth", "flops", "memory")}
        assert measured["bandwidth"].endswith("GB/s") and measured["flops"].endswith("GFLOPS")
    assert roofline == {"model": "mistral-7b", **entry}
    telemetry = pd.read_parquet(run_dir / "telemetry.parquet")
    assert telemetry.query("signal == 'gpu_util'")["value"].notna().any()  # GPU figures came
    _only_the_device_warning(done.stdout)  # the console `run` printed
    for name in ("report.md", "report.html"):
        _only_the_device_warning((run_dir / name).read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["roofline"]["device"] == noun and summary["roofline"]["tp"] == entry.get("tp", 1)
    verdicts = [summary["verdict"], *summary["stage_verdicts"]]
    assert not _gpu_lines(json.dumps(verdicts, indent=1))  # evidence and actions included
    assert not any("tensor cores" in a for v in verdicts for a in v["actions"])
    assert not [a for a in summary["alerts"] if a["name"] == "gpu_util"]
    assert all("KV cache" in a["message"] for a in summary["alerts"] if a["name"] == "gpu_mem")
    assert all(s["gpu_util"] is None for s in summary["stages"])
    # a later report uses the device run.json names without being told again ...
    again = subprocess.run([LOCUST_LLM, "report", str(run_dir), "--out", str(tmp_path / "again")],
                           capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert again.returncode in (0, 3), again.stderr
    later = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert later["roofline"] == summary["roofline"]
    # the same figures (a cpu is not measured again): the resource model is the same
    assert [s["mfu"] for s in later["stages"]] == [s["mfu"] for s in summary["stages"]]
    _only_the_device_warning(again.stdout)
    # ... and the report's own flags win: a GPU preset brings the GPU figures back
    gpu = subprocess.run(
        [LOCUST_LLM, "report", str(run_dir), "--out", str(tmp_path / "l4"), "--gpu", "l4"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert gpu.returncode in (0, 3), gpu.stderr
    on_l4 = json.loads((tmp_path / "l4" / "summary.json").read_text())
    assert on_l4["roofline"]["gpu"] == get_gpu("l4").name and on_l4["roofline"]["device"] == "GPU"
    assert "GPU util" in (tmp_path / "l4" / "report.md").read_text()
    assert any(s["gpu_util"] is not None for s in on_l4["stages"])


def test_docs_device_report_command_runs_as_written() -> None:
    doc = (ROOT / "docs" / "report.md").read_text()
    command = doc.split("described as a CPU-class device by hand:", 1)[1].split("```\n")[1]
    command = command.strip()
    assert command.startswith(".venv/bin/locust-llm report reports/example --out /tmp/")
    done = subprocess.run(
        command.split(),  # exactly as written, from the repository root
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr  # the KV cache's memory pressure still fails
    _only_the_device_warning(done.stdout)
    assert "memory pressure (KV cache, peak)" in done.stdout
