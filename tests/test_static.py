"""Static checks: the check script (ruff, ruff format, mypy, import-linter) passes, the quick
tier runs, and every dotted reference into the package still points at something."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=240
    )


def test_the_check_script_passes_as_documented() -> None:
    """`bash scripts/check.sh` (README, docs/architecture.md): ruff, ruff format, mypy and
    import-linter's contracts (families layered, no import circles, Locust only in the
    client)."""
    result = subprocess.run(
        ["bash", "scripts/check.sh"], cwd=ROOT, capture_output=True, text=True, timeout=400
    )
    assert result.returncode == 0, f"check failed:\n{result.stdout}\n{result.stderr}"
    assert "check: all passed" in result.stdout
    assert "Contracts: 3 kept, 0 broken." in result.stdout


def test_the_quick_tier_runs_as_documented() -> None:
    """`.venv/bin/python -m pytest -m quick` (README) selects the pure, in-process tier: most of
    the suite, nothing marked slow, browser or gpu. Collected only: the suite runs those tests
    itself, and bench/test_tiers.py runs and times the command as written."""
    result = subprocess.run(
        [str(Path(sys.executable).parent / "python"), "-m", "pytest", "-m", "quick",
         "-p", "no:cacheprovider", "--collect-only", "-q", "-n", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:]
    ids = [line for line in result.stdout.splitlines() if "::" in line]
    assert len(ids) >= 500, result.stdout[-500:]
    outside = {"test_static.py", "test_vllm_conformance.py", "test_report_browser.py"}
    assert not [i for i in ids if i.split("::")[0].rsplit("/", 1)[-1] in outside]


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
