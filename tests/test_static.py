"""Static checks: the code stays lint-clean (ruff) and type-clean (mypy, pyproject's config)."""

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
