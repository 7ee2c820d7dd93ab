"""Packaging: what runtime code imports is declared, and a built wheel ships the package data.

The import check reads every ``import`` in ``locust_llm/`` (lazy ones inside functions too) and
asks the installed distributions (``importlib.metadata.packages_distributions``) which
distribution provides each module; that distribution must be a runtime dependency, or an
optional extra for the few modules imported only behind a clear "install the extra" message.
The wheel check runs pip itself (``pip wheel . --no-deps``) and lists the wheel's files.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from locust_llm.webui.static import STATIC_FILES, static_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "locust_llm"
#: Extras a runtime module may import (lazily, with an install hint), besides the dependencies.
RUNTIME_EXTRAS = ("gguf", "tokenizer")
#: Extras that runtime code must never need.
NON_RUNTIME_EXTRAS = ("bench", "test")


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _dist_name(requirement: str) -> str:
    name = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    assert name, requirement
    return re.sub(r"[-_.]+", "-", name.group()).lower()


def _imported_modules(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Top-level module name -> files under ``root`` that import it (absolute imports only)."""
    found: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_import_in_the_package_is_declared() -> None:
    project = _project()
    runtime = {_dist_name(r) for r in project["dependencies"]}
    extras = project["optional-dependencies"]
    optional = {_dist_name(r) for extra in RUNTIME_EXTRAS for r in extras[extra]}
    providers = metadata.packages_distributions()
    undeclared = []
    for module, files in sorted(_imported_modules().items()):
        if module in sys.stdlib_module_names or module in ("locust_llm", "tomli"):
            continue  # tomli: the 3.10 fallback, declared with a python_version marker
        dists = {_dist_name(d) for d in providers.get(module, [])}
        if not dists & (runtime | optional):
            undeclared.append(f"{module} (from {sorted(dists) or 'nothing installed'}) in {files}")
    assert not undeclared, "imported but not a runtime dependency:\n" + "\n".join(undeclared)
    assert any(_dist_name(r) == "tomli" for r in project["dependencies"])


def test_the_test_extra_covers_what_the_benchmarks_and_tests_import() -> None:
    """``bootstrap.sh --test`` installs ``.[test]``; everything bench/ and tests/ import must
    come from it (or be their own helper modules, or torch: bench/gpu_hardware_check.py prints
    the install command when it is missing)."""
    project = _project()
    extras = project["optional-dependencies"]
    declared = {_dist_name(r) for r in project["dependencies"]}
    for extra in ("test", "bench", *RUNTIME_EXTRAS):
        declared |= {_dist_name(r) for r in extras[extra]}
    providers = metadata.packages_distributions()
    local = {p.stem for d in ("bench", "tests") for p in (ROOT / d).rglob("*.py")} | {"bench"}
    local |= {p.parent.name for d in ("bench", "tests") for p in (ROOT / d).rglob("__init__.py")}
    missing = []
    for root in (ROOT / "bench", ROOT / "tests"):
        for module, files in sorted(_imported_modules(root).items()):
            if module in sys.stdlib_module_names or module in local or module == "locust_llm":
                continue
            dists = {_dist_name(d) for d in providers.get(module, [])}
            if module not in ("torch", "tomli") and not dists & declared:  # tomli: 3.10 only
                missing.append(f"{module} in {sorted(files)[:3]}")
    assert not missing, "not installed by the test extra:\n" + "\n".join(missing)


def test_dependencies_are_only_what_runtime_code_imports() -> None:
    project = _project()
    imported = _imported_modules()
    providers = metadata.packages_distributions()
    provided = {_dist_name(d) for m in imported for d in providers.get(m, [])} | {"tomli"}
    unused = sorted({_dist_name(r) for r in project["dependencies"]} - provided)
    assert not unused, f"runtime dependencies no runtime module imports: {unused}"
    # the benchmarks' comparison libraries stay out of the runtime
    for name in ("aiohttp", "sseclient-py"):
        assert name not in {_dist_name(r) for r in project["dependencies"]}
        assert name in {_dist_name(r) for r in project["optional-dependencies"]["bench"]}
    assert "locust-llm[bench]" in project["optional-dependencies"]["test"]
    for extra in NON_RUNTIME_EXTRAS:
        assert extra in project["optional-dependencies"]


def test_static_files_load_through_importlib_resources() -> None:
    for name in STATIC_FILES:
        assert static_text(name).strip(), name
    page = static_text("page.html")
    assert '<link rel="stylesheet" href="llm/page.css">' in page
    assert '<script src="llm/page.js"></script>' in page
    assert "llm/stats" in static_text("page.js")
    assert "llm?embed=1" in static_text("tab.js")
    with pytest.raises(KeyError, match=r"no static file 'nope\.js'; known: page\.html"):
        static_text("nope.js")


def _wheel_files(out: Path, source: Path = ROOT, **env: str) -> set[str]:
    """Build the wheel of ``source`` with ``pip wheel . --no-deps`` into ``out`` (``env`` added
    to the environment); the names of its files."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-q", "-w", str(out)],
        cwd=source, capture_output=True, text=True, timeout=280, env={**os.environ, **env},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    (wheel,) = out.glob("locust_llm-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return set(archive.namelist())


@pytest.mark.slow
def test_the_wheel_builds_its_c_read_where_a_compiler_is_and_goes_on_without_one(
    tmp_path: Path,
) -> None:
    """The kernel transport's C read is optional: with no C compiler the wheel still builds,
    without it (and ``stamped_read`` runs its Python forms)."""
    compiled = [n for n in _wheel_files(tmp_path / "cc") if n.endswith(".so")]
    if shutil.which("cc") or shutil.which("gcc"):
        assert [n.rsplit(".", 2)[0] for n in compiled] == ["locust_llm/client/_stamped_read"]
    # a copy with no module built in place and no build/ folder (pip builds in the tree, and
    # setuptools would take a module compiled before as up to date)
    source = tmp_path / "source"
    shutil.copytree(
        ROOT / "locust_llm", source / "locust_llm",
        ignore=shutil.ignore_patterns("*.so", "__pycache__"),
    )  # fmt: skip
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    without = _wheel_files(tmp_path / "no-cc", source, CC="/nonexistent/cc")
    assert not [n for n in without if n.endswith(".so")]
    assert "locust_llm/client/stamped_read.py" in without


@pytest.mark.slow
def test_the_built_wheel_ships_the_static_files_and_declares_the_extras(tmp_path: Path) -> None:
    names = _wheel_files(tmp_path)
    with zipfile.ZipFile(next(tmp_path.glob("locust_llm-*.whl"))) as archive:
        (meta_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = archive.read(meta_name).decode()
    for name in STATIC_FILES:
        assert f"locust_llm/webui/static/{name}" in names
    for path in PACKAGE.glob("data/*"):
        assert f"locust_llm/data/{path.name}" in names
    assert "locust_llm/py.typed" in names
    assert "locust_llm/webtab_page.py" not in names
    requires = [line for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    aiohttp = [line for line in requires if "aiohttp" in line]
    assert aiohttp and all('extra == "bench"' in line for line in aiohttp), aiohttp
