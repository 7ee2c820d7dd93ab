"""A busy host end to end: the simulator is frozen (SIGSTOP) during a Locust sweep and the report
names every stage in which it fell behind, while the verdict still rests on the numbers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from locust_llm.launch.sweep import LOCUSTFILE

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
LOCUST = str(Path(sys.executable).parent / "locust")


def _freeze_repeatedly(pid: int, stop: threading.Event) -> None:
    """A host too busy for the simulator: 0.3 s of every 1.0 s it does not run."""
    while not stop.wait(0.7):
        os.kill(pid, signal.SIGSTOP)
        time.sleep(0.3)
        os.kill(pid, signal.SIGCONT)


def test_report_flags_every_stage_in_which_the_simulator_lagged(tmp_path: Path) -> None:
    sim = subprocess.Popen(
        [sys.executable, "-m", "locust_llm.cli", "sim", "--port", "0", "--seed", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
    )  # fmt: skip
    stop = threading.Event()
    freezer = threading.Thread(target=_freeze_repeatedly, args=(sim.pid, stop))
    try:
        assert sim.stdout is not None
        url = sim.stdout.readline().strip()
        assert url.startswith("http://")
        freezer.start()
        run_dir, out = tmp_path / "run", tmp_path / "report"
        cmd = [
            LOCUST, "-f", str(LOCUSTFILE), "--headless", "--only-summary", "--host", url,
            "--stop-timeout", "5s", "--llm-run-dir", str(run_dir), "--llm-ignore-eos",
            "--llm-scrape-interval", "0.5", "--llm-server-metrics", f"{url}/metrics",
            "--llm-concurrency", "1,2", "--llm-stage-duration", "4", "--llm-max-tokens", "32",
            "--llm-input-len", "64",
        ]  # fmt: skip
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=90)
        assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    finally:
        stop.set()
        if freezer.is_alive():  # let it end its freeze (and resume the simulator) first
            freezer.join(timeout=5)
        os.kill(sim.pid, signal.SIGCONT)
        os.killpg(sim.pid, signal.SIGTERM)
        sim.wait(timeout=10)
        if sim.stdout is not None:
            sim.stdout.close()
    report = subprocess.run(
        [sys.executable, "-m", "locust_llm.cli", "report", str(run_dir), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert report.returncode in (0, 3), report.stdout[-2000:] + report.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    lagged = [w for w in summary["warnings"] if "fell behind its real-time schedule" in w]
    assert len(lagged) == 2, summary["warnings"]  # both stages, each named once
    assert len({w.split(":")[0] for w in lagged}) == 2
    assert "fell behind" in (out / "report.md").read_text()
