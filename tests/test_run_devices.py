"""Devices in `run` and `report` (issue 15 item 9): `run --bandwidth/--flops/--memory/--tp`
recorded in run.json and used by a later `report RUN_DIR`, the report's own flags winning; bad
values refused in one line naming the flag; the wording of a report without a GPU."""

from __future__ import annotations

import pytest

from locust_llm.cli import main
from locust_llm.devices import DeviceArgs, device_noun, is_gpu
from locust_llm.roofline import get_gpu

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
