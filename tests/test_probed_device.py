"""A verdict priced on a probed device says so (issue 26, item 8).

``--gpu cpu`` describes the host by a short probe whose figures moved several-fold between runs
on a shared host. The probe now reports the spread of its repeats; a step verdict priced on such
a device is one confidence level lower, with the probe's figures in its evidence; and a stage
whose MFU or MBU exceeds 100% of the device's figures warns that the figures are too low. The
same simulated run is reported with the same figures given by hand and as a probe's, so only
where the figures came from differs.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from decode_sweep import decode_sweep

from locust_llm.report.build import Report, build_report
from locust_llm.report.diagnosis.confidence import LEVELS
from locust_llm.report.diagnosis.resources import over_peak_warnings
from locust_llm.report.load import load_run
from locust_llm.roofline.cpu_device import PROBED, cpu_device, spread
from locust_llm.roofline.floors import GpuSpec, get_gpu
from locust_llm.sim.config import SimConfig
from locust_llm.sim.virtual import simulate, write_run_dir

MODEL = "qwen2.5-0.5b"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = SimConfig(model=MODEL, gpu="a10", enable_prefix_caching=False)
    workload = decode_sweep((2, 8), per_user=6, max_tokens=128)
    return write_run_dir(simulate(config, workload), tmp_path_factory.mktemp("probed") / "run")


def _report(run_dir: Path, device: GpuSpec) -> Report:
    return build_report(load_run(run_dir), model=MODEL, gpu=device)


@pytest.mark.quick
def test_a_step_verdict_on_a_probed_device_is_one_level_lower(run_dir: Path) -> None:
    # the a10's figures given by hand and as a probe's: the same words (a device that is not a
    # preset), the same figures; only where the figures came from differs
    preset = get_gpu("a10")
    by_hand = replace(preset, source="given by hand (--bandwidth, --flops, --memory)")
    probed = replace(preset, source=f"{PROBED}: the a10's figures, for the test")
    given, measured = _report(run_dir, by_hand), _report(run_dir, probed)
    steps = 0
    for a, b in zip(given.verdicts, measured.verdicts, strict=True):
        assert (a.kind, a.cause) == (b.kind, b.cause)  # the same figures, the same judgement
        if a.rule not in ("step_bound", "small_batch"):
            continue
        steps += 1
        assert LEVELS.index(b.confidence) == min(len(LEVELS) - 1, LEVELS.index(a.confidence) + 1)
        said = [e for e in b.evidence if "priced on a device a probe measured" in e]
        assert said and PROBED in said[0], b.evidence
        assert not [e for e in a.evidence if "probe" in e], a.evidence
    assert steps, [v.rule for v in given.verdicts]


@pytest.mark.quick
def test_figures_below_what_the_server_did_are_warned(run_dir: Path) -> None:
    preset = get_gpu("a10")
    slow = replace(preset, memory_bandwidth_bytes_s=preset.memory_bandwidth_bytes_s / 4)
    assert not [w for w in _report(run_dir, preset).warnings if "too low" in w]
    warned = [w for w in _report(run_dir, slow).warnings if "too low" in w]
    assert warned and "MBU" in warned[0], warned
    assert over_peak_warnings([{"stage": 3, "mfu": 0.2, "mbu": 1.3}], "cpu") == [
        "stage 3: MBU 130% of cpu's figures: the server did more than they allow, so they are "
        "too low (a probe on a busy host, a wrong preset) and this stage's compute, memory and "
        "host shares are not to be trusted"
    ]


@pytest.mark.quick
def test_the_probe_reports_the_spread_of_its_repeats() -> None:
    assert spread([1.0, 1.25, 1.1]) == pytest.approx(0.25)
    device = cpu_device()
    assert device.source.startswith(PROBED) and "best of 5" in device.source, device.source
    assert device.memory_bandwidth_bytes_s > 0 and device.peak_flops() > 0
