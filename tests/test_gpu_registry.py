"""GPU sources registered by name: lookup, errors that list the names, and a new source as one
registered piece that the exporter command then serves."""

from __future__ import annotations

import importlib
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from locust_llm.cli import main
from locust_llm.errors import InputError
from locust_llm.gpu import registry
from locust_llm.gpu.source import GpuSample, HostSample

ROOT = Path(__file__).resolve().parents[1]


def test_the_built_in_sources_are_registered_and_their_modules_implement_them() -> None:
    assert registry.source_names() == ("nvml", "fake", "replay", "simulated")
    assert registry.source_names(exporter_only=True) == ("nvml", "fake", "replay")
    for entry in registry.registered_sources():
        module = importlib.import_module(entry.module)
        if entry.exporter:
            assert callable(module.from_args), entry.name
    assert hasattr(importlib.import_module("locust_llm.sim.gpu"), "SimGpuSource")


def test_an_unknown_name_lists_what_is_registered() -> None:
    with pytest.raises(InputError) as info:
        registry.lookup_source("dcgm")
    assert str(info.value) == (
        "--source: no GPU source 'dcgm'; registered: nvml, fake, replay, simulated"
    )
    with pytest.raises(InputError, match=r"served by `locust-llm sim`.*builds nvml, fake, replay"):
        registry.build_source("simulated", types.SimpleNamespace())
    with pytest.raises(ValueError, match="already registered"):
        registry.register_source(registry.SourceEntry(name="fake", module="x", summary="x"))


class _OneHotGpu:
    def read(self) -> HostSample:
        return HostSample(gpus=[GpuSample(index=0, uuid="GPU-test", utilization_ratio=0.42)])


def test_a_new_source_is_one_registered_module(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = types.ModuleType("test_gpu_registry_source")
    module.from_args = lambda args, *, nvml=None: _OneHotGpu()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    registry.register_source(
        registry.SourceEntry(name="onehot", module=module.__name__, summary="one busy GPU")
    )
    try:
        assert main(["gpu-exporter", "--source", "onehot", "--once", "--no-host"]) == 0
        out = capsys.readouterr().out
        families = {f.name: f.samples for f in text_string_to_metric_families(out)}
        assert families["nvml_gpu_utilization_ratio"][0].value == pytest.approx(0.42)
        with pytest.raises(InputError, match="registered: nvml, fake, replay, simulated, onehot"):
            registry.lookup_source("nope")
    finally:
        registry.unregister_source("onehot")
    assert "onehot" not in registry.source_names()


def test_the_command_in_the_docs_prints_what_the_docs_say() -> None:
    doc = (ROOT / "docs" / "gpu-exporter.md").read_text()
    block = re.search(r"\$ (locust-llm gpu-exporter --source bogus --once)\n\s*(.+)\n", doc)
    assert block, "docs/gpu-exporter.md lost its unknown-source example"
    command, expected = block.group(1), block.group(2).strip()
    argv = shlex.split(command)
    exe = Path(sys.executable).with_name(argv[0])
    result = subprocess.run(
        [str(exe), *argv[1:]], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 2
    assert result.stderr.strip() == expected
