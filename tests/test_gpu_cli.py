"""The exporter command: a real HTTP scrape on port 0, --once, and the no-driver error."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakePynvml
from prometheus_client.parser import text_string_to_metric_families

from locust_llm.cli import main
from locust_llm.gpu.cli import console_main

ROOT = Path(__file__).resolve().parents[1]


def parse(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_http_scrape_on_port_0_parses_and_shuts_down_cleanly() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "locust_llm.gpu.cli",
            "--source",
            "fake",
            "--fake-gpus",
            "2",
            "--port",
            "0",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip()  # first stdout line: the URL
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics"), url
        assert not url.endswith(":9400/metrics")
        for _ in range(2):
            with urllib.request.urlopen(url, timeout=5) as response:
                families = parse(response.read().decode())
        assert families["nvml_up"][0].value == 1.0
        util = families["nvml_gpu_utilization_ratio"]
        assert sorted(s.labels["gpu"] for s in util) == ["0", "1"]
        assert set(util[0].labels) == {"gpu", "uuid"}
        energy = families["nvml_energy_consumption_joules"]  # counter family; sample adds _total
        assert energy[0].name == "nvml_energy_consumption_joules_total"
        assert 0.0 <= families["nvml_host_cpu_utilization_ratio"][0].value <= 1.0
        assert families["nvml_host_memory_total_bytes"][0].value > 0
        info = families["nvml_gpu_info"][0].labels
        assert set(info) == {"gpu", "uuid", "name", "driver_version", "cuda_version"}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        proc.stdout.close()
        proc.stderr.close()
    assert rc == 0


def test_once_prints_one_scrape(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpu-exporter", "--source", "fake", "--fake-no-gpm", "--once"]) == 0
    families = parse(capsys.readouterr().out)
    assert families["nvml_up"][0].value == 1.0
    assert "nvml_dram_bandwidth_utilization_ratio" not in families
    assert "nvml_power_usage_watts" in families


def test_console_script_entry_point(capsys: pytest.CaptureFixture[str]) -> None:
    assert console_main(["--source", "fake", "--fake-gpus", "3", "--no-host", "--once"]) == 0
    families = parse(capsys.readouterr().out)
    assert len(families["nvml_memory_used_bytes"]) == 3
    assert "nvml_host_cpu_utilization_ratio" not in families


def test_no_driver_is_a_one_line_error_naming_source_fake(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml(init_error=NVML_ERROR_LIBRARY_NOT_FOUND))
    assert main(["gpu-exporter", "--source", "nvml", "--once"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--source fake" in err and "NVIDIA driver" in err


def test_nvml_source_through_the_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml())
    assert main(["gpu-exporter", "--once", "--no-host"]) == 0  # nvml is the default source
    families = parse(capsys.readouterr().out)
    assert families["nvml_power_usage_watts"][0].value == pytest.approx(312.5)


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--source", "replay", "--once"], "--replay-file"),
        (["--source", "fake", "--port", "70000", "--once"], "--port"),
        (["--source", "fake", "--fake-profile", "nap:3", "--once"], "--fake-profile"),
    ],
)
def test_bad_flags_exit_2(argv: list[str], match: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpu-exporter", *argv]) == 2
    assert match in capsys.readouterr().err
