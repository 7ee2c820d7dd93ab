"""Shared test fixtures and guards.

Locust monkey-patches the whole process for gevent when it is imported, which would turn every
later test's threads into greenlets. So Locust only ever runs in subprocesses here; a test module
that imports it into the pytest process fails the session at collection (or, imported inside a
test, at that test's teardown).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import quiet_host  # noqa: E402  (tests/ is on the path from the line above)

#: Test files outside the quick tier: they start processes (the CLI, Locust, servers, ruff and
#: mypy) or take seconds each. Every other test not marked slow, browser or gpu is marked
#: ``quick``: pure and in-process, the tier `pytest -m quick` runs in under a minute.
NOT_QUICK = frozenset(
    {
        # static checks and packaging (scripts/check.sh runs the tools themselves)
        "test_static.py", "test_packaging.py", "test_compose.py", "test_bootstrap.py",
        # the command line, run as a user runs it
        "test_options.py", "test_run_options.py", "test_run_devices.py", "test_report_cli.py",
        "test_reliability_inputs.py", "test_gpu_cli.py", "test_roofline.py", "test_sim_docs.py",
        "test_workloads_docs.py", "test_calibration.py", "test_cpu_demand.py",
        "test_worker_count.py",
        # real servers, Locust or long simulations
        "test_client_pure.py", "test_http11.py", "test_kernel_transport.py",
        "test_trace_replay.py", "test_sessions_sim.py", "test_verdict_accuracy.py",
        "test_workloads_report.py", "test_apis_responses_embeddings.py",
        "test_sim_reasoning.py", "test_telemetry.py", "test_verdict_batch_limit.py",
        "test_decompose.py", "test_report_document.py", "test_sim_virtual.py", "test_sim_tp.py",
        "test_sim_faults.py", "test_sim_trace.py", "test_client_wiring.py",
    }
)  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        full_only = {"slow", "browser", "gpu"} & {m.name for m in item.iter_markers()}
        if not full_only and item.path.name not in NOT_QUICK:
            item.add_marker(pytest.mark.quick)


def pytest_collection_finish(session: pytest.Session) -> None:
    if "locust" in sys.modules or ("gevent.monkey" in sys.modules and _patched()):
        raise pytest.UsageError(
            "a test module imported locust into the pytest process (gevent monkey-patching); "
            "run Locust in a subprocess instead"
        )


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """The same guard for an import inside a test: it would patch the process under the test
    runner's own threads (pytest-xdist's worker then dies with gevent's LoopExit)."""
    if "locust" in sys.modules:
        raise pytest.UsageError(
            f"{item.nodeid} imported locust into the pytest process (gevent monkey-patching); "
            "run Locust in a subprocess instead, or import a pure module"
        )


def _patched() -> bool:
    from gevent import monkey

    return bool(monkey.saved)


def locust_cmd() -> list[str]:
    """The locust executable of this virtualenv."""
    return [str(Path(sys.executable).parent / "locust")]


def run_locust(args: list[str], *, timeout: float = 120, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run Locust headless in a subprocess (cwd = repo root); output merged into stdout."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run(
        [*locust_cmd(), *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=timeout, env=full_env, check=False,
    )  # fmt: skip


def reap(*procs: subprocess.Popen) -> None:
    """Kill what still runs, wait for it and close its pipes (a test that timed out in
    ``communicate`` leaves them open, and their finaliser later fails an unrelated test)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_distributed(
    locustfile: str,
    master_args: list[str],
    *,
    workers: int,
    worker_cwd: Path,
    timeout: float = 120,
) -> tuple[int, str]:
    """A headless Locust master (cwd = repo root) and ``workers`` workers (cwd = ``worker_cwd``,
    so nothing is shared through files). Returns the master's exit code and output."""
    port = free_port()
    master = subprocess.Popen(
        [*locust_cmd(), "-f", locustfile, "--headless", "--master",
         "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
         "--expect-workers", str(workers), "--expect-workers-max-wait", "30", *master_args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    procs = [master] + [
        subprocess.Popen(
            [*locust_cmd(), "-f", str(ROOT / locustfile), "--worker", "--master-host",
             "127.0.0.1", "--master-port", str(port)],
            cwd=worker_cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]  # fmt: skip
    try:
        output, _ = master.communicate(timeout=timeout)
        for proc in procs[1:]:
            proc.wait(timeout=30)
    finally:
        reap(*procs)
    return master.returncode, output


@pytest.fixture(autouse=True)
def _host_shared() -> Iterator[None]:
    """Every test shares the host; a conformance measurement takes it alone (quiet_host)."""
    with quiet_host.shared():
        yield


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "run"
