"""The GPU sources the exporter knows, registered by name (``--source NAME``).

Each entry names the module that implements the source. A source module the exporter can build
defines ``from_args(args, *, nvml=None) -> GpuSource`` (``args``: the exporter's parsed flags;
``nvml``: a stand-in for ``pynvml`` in tests); the module is imported only when its source is
chosen, so ``pynvml`` is never loaded for ``--source fake``. Adding a source is one new module
plus one :func:`register_source` call (here for the built-in ones). An unknown name is a one-line
error that lists what is registered.

==============  ================================================================================
``nvml``        the NVIDIA driver through nvidia-ml-py (the default)
``fake``        deterministic, scriptable fake GPUs (``--fake-*``)
``replay``      a recorded CSV timeline (``--replay-*``)
``simulated``   the simulator's GPU, read from its engine; served by ``locust-llm sim`` on its own
                ``/metrics``, not by the exporter
==============  ================================================================================
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from typing import Any

from locust_llm.errors import InputError
from locust_llm.gpu.source import GpuSource
from locust_llm.registry import Registry


@dataclass(frozen=True, kw_only=True)
class SourceEntry:
    """One registered GPU source."""

    name: str
    module: str  # the module that implements it
    summary: str  # one line, for --help and errors
    exporter: bool = True  # the exporter can build it (the module defines ``from_args``)


_REGISTRY: Registry[SourceEntry] = Registry("GPU source")


def register_source(entry: SourceEntry) -> SourceEntry:
    """Add ``entry`` under its name (a name can be registered once); returns it."""
    return _REGISTRY.register(entry.name, entry)


def unregister_source(name: str) -> None:
    """Remove a registered source (tests that register their own)."""
    _REGISTRY.unregister(name)


def registered_sources() -> tuple[SourceEntry, ...]:
    """Every registered source, in registration order."""
    return tuple(_REGISTRY)


def source_names(*, exporter_only: bool = False) -> tuple[str, ...]:
    """The registered names (only those the exporter can build, when asked)."""
    return tuple(e.name for e in _REGISTRY if e.exporter or not exporter_only)


def lookup_source(name: str) -> SourceEntry:
    """The entry registered as ``name``; an InputError listing the registered names otherwise."""
    if name not in _REGISTRY:
        raise InputError(f"--source: {_REGISTRY.unknown(name)}")
    return _REGISTRY.get(name)


def build_source(name: str, args: argparse.Namespace, *, nvml: Any = None) -> GpuSource:
    """The source registered as ``name``, built from the exporter's flags ``args``."""
    entry = lookup_source(name)
    if not entry.exporter:
        raise InputError(
            f"--source {name}: {entry.summary}; the exporter builds "
            f"{', '.join(source_names(exporter_only=True))}"
        )
    module = importlib.import_module(entry.module)
    source: GpuSource = module.from_args(args, nvml=nvml)
    return source


register_source(SourceEntry(
    name="nvml", module="locust_llm.gpu.nvml_source",
    summary="the NVIDIA driver through nvidia-ml-py",
))  # fmt: skip
register_source(SourceEntry(
    name="fake", module="locust_llm.gpu.fake_source",
    summary="deterministic fake GPUs (--fake-gpus, --fake-profile, --fake-no-gpm)",
))  # fmt: skip
register_source(SourceEntry(
    name="replay", module="locust_llm.gpu.replay_source",
    summary="a recorded CSV timeline (--replay-file, --replay-loop)",
))  # fmt: skip
register_source(SourceEntry(
    name="simulated", module="locust_llm.sim.gpu",
    summary="the simulator's GPU is served by `locust-llm sim` on its own /metrics",
    exporter=False,
))  # fmt: skip
