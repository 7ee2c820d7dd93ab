"""The host lock of the suite (:mod:`quiet_host`): a measurement inside a test body (the host held
shared by the autouse fixture) takes it alone instead of waiting for itself, and one process's
exclusive hold waits for another's shared one. Each check runs in fresh processes with a lock
name of its own, bounded by a timeout."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
HOLD = """
import sys, time, quiet_host
with quiet_host.shared():
    print("shared", flush=True)
    time.sleep(float(sys.argv[1]))
"""
NESTED = """
import time, quiet_host
with quiet_host.shared():
    with quiet_host.exclusive():
        print("exclusive", time.time(), flush=True)
    with quiet_host.exclusive():  # and again: the shared hold was taken back between
        print("again", flush=True)
"""


@pytest.fixture
def run() -> Iterator[str]:
    """A lock name of this test's own; its lock files are removed after."""
    name = uuid.uuid4().hex
    yield name
    for path in Path(tempfile.gettempdir()).glob(f"locust-llm-tests-{name}.*.lock"):
        path.unlink()


def _python(code: str, run: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTEST_XDIST_TESTRUNUID": run, "PYTHONPATH": str(TESTS)}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], env=env, stdout=subprocess.PIPE, text=True
    )


def test_a_measurement_inside_a_test_body_does_not_wait_for_itself(run: str) -> None:
    proc = _python(NESTED, run)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert out.split()[0] == "exclusive" and out.split()[-1] == "again", out


def test_an_exclusive_hold_waits_for_another_processes_shared_one(run: str) -> None:
    holder = _python(HOLD, run, "3")
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "shared"
        asked = time.time()
        measurer = _python(NESTED, run)
        out, _ = measurer.communicate(timeout=20)
    finally:
        holder.communicate(timeout=20)
    assert measurer.returncode == 0, out
    took = float(out.split()[1]) - asked
    assert took >= 1.0, took  # it held off until the other process let the host go
