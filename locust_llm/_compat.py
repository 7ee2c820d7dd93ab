"""Old import paths of modules that moved into their families, kept working for locustfiles.

Before the package was arranged by family, locustfiles imported flat modules
(``from locust_llm.user import ChatUser``, ``from locust_llm.shapes import StagesShape``). Each
such path still imports, as the module's new home, with a ``DeprecationWarning`` naming it. The
table below is the only list of moves; :func:`install` puts one finder on ``sys.meta_path``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any

#: old dotted path -> where the module lives now
MOVED: dict[str, str] = {
    "locust_llm.user": "locust_llm.client.user",
    "locust_llm.shapes": "locust_llm.client.shapes",
    "locust_llm.sweep_locustfile": "locust_llm.client.sweep_locustfile",
    "locust_llm.sse": "locust_llm.client.sse",
    "locust_llm.datasets": "locust_llm.workloads.datasets",
    "locust_llm.distributions": "locust_llm.workloads.distributions",
    "locust_llm.promapi": "locust_llm.telemetry.promapi",
    "locust_llm.signals": "locust_llm.telemetry.signals",
    "locust_llm.vocabularies": "locust_llm.telemetry.vocabularies",
    "locust_llm.workloads.users": "locust_llm.client.workload_users",
    "locust_llm.verdict": "locust_llm.report.diagnosis.verdict",
    "locust_llm.thresholds": "locust_llm.report.diagnosis.thresholds",
}

#: packages that were modules: their old attributes are read from the module named here
PACKAGE_WAS: dict[str, str] = {
    "locust_llm.roofline": "locust_llm.roofline.floors",
    "locust_llm.telemetry": "locust_llm.telemetry.scraper",
    "locust_llm.rundir": "locust_llm.rundir.layout",
    "locust_llm.options": "locust_llm.options.table",
}


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}; import it from there", DeprecationWarning, stacklevel=3)


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: Any) -> ModuleType:
        _warn(spec.name, self.new)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """The module was executed under its new name already."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(new))


def install() -> None:
    """Put the finder for old module paths on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())


def forward(package: str, name: str) -> Any:
    """``package.name`` where ``package`` was a module: read from its old content's new home.

    A submodule's name is left to the import system (``from package import submodule`` asks
    for the attribute first), so a submodule never imports the new home as a side effect.
    """
    if name.startswith("__") or importlib.util.find_spec(f"{package}.{name}") is not None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    new = PACKAGE_WAS[package]
    value = getattr(importlib.import_module(new), name)
    _warn(f"{package}.{name}", f"{new}.{name}")
    return value
