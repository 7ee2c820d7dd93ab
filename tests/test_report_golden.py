"""Golden test: the committed example report is what ``locust-llm report`` makes of its run dir.

The inputs of ``reports/example/`` (run.json, requests.parquet, telemetry.parquet, the logs and
live-stats files) are copied to a fresh dir without the outputs; ``locust-llm report`` rebuilds
them there, and every text output must equal the committed file byte for byte: report.md,
report.html, stages.csv and summary.json. No normalisation is needed: the report holds no
timestamps of its own making and no paths (the run's own times come from run.json). The exit
code is 3 because the example's stages cross the default alert thresholds, as committed.

When the report's output changes on purpose, regenerate the example (``.venv/bin/locust-llm
report reports/example``) and commit the new files with the change.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from locust_llm.cli import main

EXAMPLE = Path(__file__).resolve().parents[1] / "reports" / "example"
OUTPUTS = ("report.md", "report.html", "stages.csv", "summary.json")


def test_the_committed_example_report_regenerates_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "example"
    shutil.copytree(EXAMPLE, run, ignore=shutil.ignore_patterns(*OUTPUTS))
    assert not any((run / name).exists() for name in OUTPUTS)
    assert main(["report", str(run)]) == 3  # the example's alerts fire, as committed
    printed = capsys.readouterr().out
    for name in OUTPUTS:
        produced = (run / name).read_bytes()
        committed = (EXAMPLE / name).read_bytes()
        assert produced == committed, f"{name} differs from reports/example/{name}"
    # the console summary printed on stdout carries report.md's reading and verdict
    report_md = (EXAMPLE / "report.md").read_text()
    said = [line for line in printed.splitlines() if line.startswith(("Reading:", "Verdict:"))]
    assert len(said) == 2
    assert all(line.split(":", 1)[1].strip() in report_md for line in said)
