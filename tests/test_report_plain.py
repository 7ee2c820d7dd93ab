"""A plain Locust run (no stages): the report's concurrency is the user count Locust ran.

One real Locust process (``locustfiles/chat.py``, ``-u 3``) against the small streaming server
in this process; then the same run dir with the ``-u`` taken out of run.json, where the report
falls back to the peak of requests in flight and says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import run_locust
from fake_openai import FakeConfig, fake_openai_server

from locust_llm.report.build import build_report, locust_users, peak_in_flight
from locust_llm.report.load import load_run
from locust_llm.report.render_md import render_markdown

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("plain") / "run"
    with fake_openai_server(FakeConfig(tokens=6, interval_s=0.01)) as url:
        out = run_locust([
            "-f", "locustfiles/chat.py", "--host", url, "--headless", "--only-summary",
            "-u", "3", "-r", "10", "--run-time", "3s", "--stop-timeout", "10s",
            "--llm-run-dir", str(run_dir),
        ])  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    return run_dir


def test_plain_run_reports_the_user_count(plain_run: Path) -> None:
    report = build_report(load_run(plain_run))
    assert [r["concurrency"] for r in report.rows] == [3]
    req = report.run.requests
    # the records agree: three users, so at most three requests in flight, and three reached
    assert peak_in_flight(req["start_wall_s"].to_numpy(float), req["e2e_s"].to_numpy(float)) == 3
    md = render_markdown(report)
    seed_rows = md.split("\n\n")[2].splitlines()[2:]
    assert len(seed_rows) == 1 and seed_rows[0].startswith("| 3 | ")


def test_without_a_user_count_the_peak_in_flight_is_used_and_said(
    plain_run: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "run"
    copy.mkdir()
    for f in plain_run.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    info = json.loads((copy / "run.json").read_text())
    info["command"] = [a for a in info["command"] if a not in ("-u", "3")]
    (copy / "run.json").write_text(json.dumps(info))
    report = build_report(load_run(copy))
    assert [r["concurrency"] for r in report.rows] == [3]
    assert any("peak of requests in flight" in w for w in report.warnings)


@pytest.mark.parametrize(
    ("command", "users"),
    [
        (["locust", "-f", "x.py", "-u", "8"], 8),
        (["locust", "--users=12", "-f", "x.py"], 12),
        (["locust", "-u5"], 5),
        (["locust", "--users", "2", "--users", "4"], 4),
        (["locust", "-f", "x.py"], None),
        (["locust", "-u"], None),
    ],
)
def test_user_count_from_the_command_line(command: list[str], users: int | None) -> None:
    assert locust_users(command) == users


def test_peak_in_flight_counts_overlaps_and_not_back_to_back() -> None:
    start = np.array([0.0, 0.5, 1.0, 2.0, np.nan])
    e2e = np.array([1.0, 1.0, 1.0, 0.5, 1.0])
    # [0,1) [0.5,1.5) [1,2) [2,2.5): at most 2 at once; an end and a start at t=1 do not overlap
    assert peak_in_flight(start, e2e) == 2
