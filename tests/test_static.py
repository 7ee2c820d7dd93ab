"""Static checks: the code stays lint-clean (ruff) and type-clean (mypy, pyproject's config),
and every dotted reference into the package still points at something."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=240
    )


def test_ruff_clean() -> None:
    result = _run("ruff", "check", "locust_llm", "tests", "bench", "locustfiles")
    assert result.returncode == 0, f"ruff failed:\n{result.stdout}\n{result.stderr}"


def test_mypy_clean() -> None:
    result = _run("mypy", "locust_llm")
    assert result.returncode == 0, f"mypy failed:\n{result.stdout}\n{result.stderr}"


def test_ruff_format_clean() -> None:
    result = _run("ruff", "format", "--check", "locust_llm", "tests", "bench", "locustfiles")
    assert result.returncode == 0, f"ruff format would change:\n{result.stdout}\n{result.stderr}"


REFERENCE_CHECK = r"""
import importlib, pathlib, re, sys
pattern = re.compile(r"\b(locust_llm(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
roots = [pathlib.Path(p) for p in ("locust_llm", "bench", "tests", "docs")]
files = [f for r in roots for f in r.rglob("*") if f.suffix in (".py", ".md")]
files.append(pathlib.Path("README.md"))

def resolves(dotted):
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False

bad = sorted({f"{f}: {m.group(1)}" for f in files for m in pattern.finditer(f.read_text())
              if not m.group(1).endswith((".py", ".md")) and not resolves(m.group(1))})
print("\n".join(bad))
sys.exit(1 if bad else 0)
"""


def test_every_dotted_reference_to_the_package_resolves() -> None:
    """Every dotted path into the package that docstrings, comments and docs name exists (a
    moved function leaves no stale pointer). In a subprocess: it imports every module, Locust's
    monkey-patching included."""
    result = subprocess.run(
        [sys.executable, "-c", REFERENCE_CHECK], cwd=ROOT, capture_output=True, text=True,
        timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, f"stale references:\n{result.stdout}\n{result.stderr[-2000:]}"
