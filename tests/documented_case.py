"""Runs a `bench/verdict_case.py` command that docs/report.md shows, exactly as written
(tests/test_host_cases_documented.py, tests/test_first_token_steps.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def documented_case_output(command: str) -> str:
    """The standard output of ``command`` (``.venv/bin/python bench/verdict_case.py ...``, run
    with this interpreter from the repository's root), after checking that docs/report.md shows
    it in backticks."""
    assert f"`{command}`" in (ROOT / "docs" / "report.md").read_text(), command
    return subprocess.run(
        [sys.executable, *command.split()[1:]], cwd=ROOT, capture_output=True, text=True,
        timeout=120, check=True,
    ).stdout  # fmt: skip
