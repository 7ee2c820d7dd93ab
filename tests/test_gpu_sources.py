"""The fake (scriptable) and replay (CSV) sources, the host reader, and the dcgm name table."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from locust_llm.errors import InputError
from locust_llm.gpu import names
from locust_llm.gpu.fake_source import FakeSource, parse_profile
from locust_llm.gpu.host import HostReader, WithHost
from locust_llm.gpu.replay_source import ReplaySource
from locust_llm.gpu.source import HostSample


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_fake_walks_its_profile_and_loops() -> None:
    clock = Clock()
    source = FakeSource(2, profile=parse_profile("idle:1,compute:2,copy:1"), clock=clock)
    seen = []
    for t in (0.5, 1.5, 3.5, 4.5):
        clock.t = t
        gpu = source.read().gpus[1]
        seen.append((gpu.utilization_ratio, gpu.dram_bandwidth_utilization_ratio))
    idle, compute, copy, looped = seen
    assert idle == (0.0, 0.0) and looped == idle
    assert compute[0] == 1.0 and compute[1] < 0.5
    assert copy[1] > 0.8


def test_fake_energy_integrates_power_over_the_clock() -> None:
    clock = Clock()
    source = FakeSource(1, profile=[("compute", 100.0)], clock=clock)
    clock.t = 2.0
    source.read()
    clock.t = 3.0
    gpu = source.read().gpus[0]
    assert gpu.energy_joules_total == pytest.approx(3 * gpu.power_watts)


def test_fake_overrides_and_unsupported_fields() -> None:
    clock = Clock()
    source = FakeSource(
        2,
        overrides={"temperature_celsius": lambda t, i: 40.0 + t + i, "power_watts": 123.0},
        unsupported=["sm_clock_hertz"],
        gpm=False,
        clock=clock,
    )
    clock.t = 2.0
    gpus = source.read().gpus
    assert [g.temperature_celsius for g in gpus] == [42.0, 43.0]
    assert gpus[0].power_watts == 123.0
    assert gpus[0].sm_clock_hertz is None and gpus[0].tensor_activity_ratio is None
    assert gpus[0].memory_clock_hertz is not None


@pytest.mark.parametrize("text", ["idle", "warp:3", "compute:-1", "copy:x", ""])
def test_bad_fake_profile_is_an_input_error(text: str) -> None:
    with pytest.raises(InputError, match="--fake-profile"):
        parse_profile(text)


def test_fake_unknown_field_is_an_input_error() -> None:
    with pytest.raises(InputError, match="unknown field 'nope'"):
        FakeSource(1, overrides={"nope": 1.0})


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "timeline.csv"
    path.write_text(text)
    return path


def test_replay_serves_the_row_in_force(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        (
            "t_s,gpu,uuid,utilization_ratio,power_watts,throttle_reasons,host_cpu_utilization_ratio\n"
            "0,0,GPU-a,0.1,100,gpu_idle,0.2\n"
            "0,1,GPU-b,0.2,,,\n"
            "2,0,GPU-a,0.9,400,sw_power_cap;hw_slowdown,0.7\n"
        ),
    )
    clock = Clock()
    source = ReplaySource(path, clock=clock)
    clock.t = 1.0
    sample = source.read()
    assert [g.utilization_ratio for g in sample.gpus] == [0.1, 0.2]
    assert sample.gpus[1].power_watts is None  # empty cell = missing, not 0
    assert sample.gpus[0].throttle_reasons["gpu_idle"] is True
    assert sample.host_cpu_utilization_ratio == 0.2
    clock.t = 5.0
    sample = source.read()
    assert sample.gpus[0].utilization_ratio == 0.9 and sample.gpus[0].power_watts == 400
    assert sample.gpus[0].throttle_reasons["hw_slowdown"] is True
    assert sample.gpus[0].throttle_reasons["gpu_idle"] is False


def test_replay_loop_wraps_time(tmp_path: Path) -> None:
    path = write(tmp_path, "t_s,gpu,utilization_ratio\n0,0,0.1\n1,0,0.5\n2,0,0.9\n")
    clock = Clock()
    source = ReplaySource(path, loop=True, clock=clock)
    clock.t = 3.5  # 3.5 % 2 = 1.5
    assert source.read().gpus[0].utilization_ratio == 0.5


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("gpu,utilization_ratio\n0,0.1\n", "needs columns t_s and gpu"),
        ("t_s,gpu,bogus\n0,0,1\n", "unknown column"),
        ("t_s,gpu,power_watts\n0,0,lots\n", "line 2: column power_watts is 'lots'"),
        ("t_s,gpu\n0,-1\n", "required"),
        ("t_s,gpu,throttle_reasons\n0,0,sleepy\n", "unknown throttle reason"),
        ("t_s,gpu\n", "no rows"),
    ],
)
def test_bad_replay_file_is_an_input_error(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(InputError, match=match):
        ReplaySource(write(tmp_path, text))


def test_missing_replay_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot open"):
        ReplaySource(tmp_path / "absent.csv")


class FakePsutil:
    def __init__(self) -> None:
        self.cpu_calls: list[object] = []

    def cpu_percent(self, interval: object = "unset") -> float:
        self.cpu_calls.append(interval)
        return 37.5

    def virtual_memory(self) -> SimpleNamespace:
        return SimpleNamespace(total=16e9, available=6e9)


def test_host_reader_never_sleeps_and_converts_units() -> None:
    psutil = FakePsutil()
    source = WithHost(FakeSource(0), HostReader(psutil))
    sample = source.read()
    assert psutil.cpu_calls == [None, None]  # primed at start, then one non-blocking read
    assert sample.host_cpu_utilization_ratio == 0.375
    assert sample.host_memory_used_bytes == 10e9
    assert sample.host_memory_total_bytes == 16e9


def test_host_reader_keeps_values_the_source_gave() -> None:
    sample = HostReader(FakePsutil()).fill(HostSample(host_cpu_utilization_ratio=0.9))
    assert sample.host_cpu_utilization_ratio == 0.9


def test_dcgm_table_covers_every_metric_with_unit_factors() -> None:
    assert names.DCGM_TO_OURS["DCGM_FI_DEV_GPU_UTIL"] == ("nvml_gpu_utilization_ratio", 0.01)
    assert names.DCGM_TO_OURS["DCGM_FI_DEV_FB_USED"] == ("nvml_memory_used_bytes", 1024 * 1024)
    assert names.DCGM_TO_OURS["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == (
        "nvml_energy_consumption_joules_total",
        0.001,
    )
    assert names.DCGM_TO_OURS["DCGM_FI_PROF_DRAM_ACTIVE"] == (
        "nvml_dram_bandwidth_utilization_ratio",
        1.0,
    )
    assert len(names.DCGM_TO_OURS) == len(names.GPU_METRICS)  # one-to-one
    assert all(m.name.startswith("nvml_") for m in names.GPU_METRICS)
    assert names.throttle_reasons_from_mask(0x005, supported=0x00F) == {
        "gpu_idle": True,
        "applications_clocks_setting": False,
        "sw_power_cap": True,
        "hw_slowdown": False,
    }
