"""Shared test fixtures and guards.

Locust monkey-patches the whole process for gevent when it is imported, which would turn every
later test's threads into greenlets. So Locust only ever runs in subprocesses here; a test module
that imports it into the pytest process fails the session at collection (or, imported inside a
test, at that test's teardown).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
        "test_sim_faults.py", "test_sim_trace.py", "test_client_wiring.py", "test_base_urls.py",
        "test_capacity_virtual.py", "test_judgement.py", "test_first_token_steps.py",
        "test_quiet_host.py", "test_served_window.py", "test_host_cases_documented.py",
        "test_interval_coverage_bench.py", "test_capacity_bench.py", "test_read_path_bench.py",
    }
)  # fmt: skip


#: The longest files, longest first (a full run's durations on this 2-core machine). The three
#: test processes take whole files (``--dist loadfile``) in the order the items are collected
#: (``--no-loadscope-reorder`` in pyproject.toml): these start first, every other file outside
#: the quick tier follows, and the quick tier's many short files come last, so the processes end
#: together instead of one running a long file alone at the end while the others idle (the
#: vLLM budget file, 170-190 s, ran last when it was not listed). The vLLM files are apart: each
#: starts engines (~30 s of both cores each) before its measurements.
LONGEST_FIRST = (
    "test_vllm_regimes.py", "test_regimes.py", "test_cluster_faults.py",
    "test_vllm_conformance.py", "test_capacity_llamacpp.py", "test_vllm_budget.py",
    "test_capacity_run.py",
    "test_webui_capacity.py",
    "test_cluster_scaling.py", "test_sim_virtual.py", "test_demo.py", "test_run_devices.py",
    "test_run_dir_exclusive.py", "test_run_states.py", "test_verdict_accuracy.py",
    "test_calibration.py", "test_reliability_run.py", "test_sessions_sim.py",
)  # fmt: skip


def _run_order(item: pytest.Item) -> tuple[int, int]:
    """Where an item runs: the longest files first, the quick tier last."""
    name = item.path.name
    if name in LONGEST_FIRST:
        return (0, LONGEST_FIRST.index(name))
    return (2, 0) if item.get_closest_marker("quick") else (1, 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        full_only = {"slow", "browser", "gpu"} & {m.name for m in item.iter_markers()}
        if not full_only and item.path.name not in NOT_QUICK:
            item.add_marker(pytest.mark.quick)
    # a file runs where its first-placed test does, its tests in their own order (stable sort)
    by_file: dict[Path, tuple[int, int]] = {}
    for item in items:
        by_file[item.path] = min(by_file.get(item.path, (3, 0)), _run_order(item))
    items.sort(key=lambda item: by_file[item.path])


def pytest_collection_finish(session: pytest.Session) -> None:
    if "locust" in sys.modules or ("gevent.monkey" in sys.modules and _patched()):
        raise pytest.UsageError(
            "a test module imported locust into the pytest process (gevent monkey-patching); "
            "run Locust in a subprocess instead"
        )
    # What collection left (every test module, pandas, pyarrow ...: ~200,000 objects) lives
    # until the session ends: frozen, the collection after each test (_collect_leaks) and
    # Python's own skip it, and scan only what tests made (200-300 ms -> a few ms a test). No
    # test has run yet, so no object a test leaves is among the frozen.
    gc.collect()
    gc.freeze()


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


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Every test shares the host; a conformance measurement takes it alone (quiet_host). The
    share is taken around the whole test, outside pytest-timeout's timer: a test that waits
    while the other process's measurement holds the host (a real vLLM's runs took 9 minutes
    each on a CPU without AVX-512) is not timed for the wait."""
    with quiet_host.shared():
        yield


@pytest.fixture(autouse=True)
def _collect_after(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test outside the quick tier (those start servers and clients; a collection costs
    a few ms, see pytest_collection_finish), its garbage is collected and any socket it left
    unclosed is listed as its leak (:func:`_collect_leaks`)."""
    yield
    if request.node.get_closest_marker("quick") is None:  # the quick tier stays quick
        _collect_leaks(request.node.nodeid, _leaks_file(request.config))


#: Where the workers list the sockets tests left unclosed (set by the controlling process).
LEAKS_ENV = "LOCUST_LLM_TEST_LEAKS"


def _leaks_file(config: pytest.Config) -> str:
    worker = getattr(config, "workerinput", None)  # an xdist worker: its controller's file
    return str(worker.get(LEAKS_ENV, "")) if worker is not None else os.environ.get(LEAKS_ENV, "")


def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: hand each worker the controller's leak file."""
    node.workerinput[LEAKS_ENV] = os.environ.get(LEAKS_ENV, "")


def _collect_leaks(nodeid: str, path: str) -> None:
    """Collect the test's garbage now and list each ResourceWarning it raises against this test
    (a file the session's summary prints). An unclosed socket held in a reference cycle used to
    surface at a random later collection, failing whichever test was running then (a loopback
    client socket, in test_packaging or test_sessions_sim); now it is named by the test that
    left it, as a listed leak to fix rather than another test's failure."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    leaks = [w for w in caught if issubclass(w.category, ResourceWarning)]
    for other in caught:
        if other not in leaks:
            warnings.warn_explicit(other.message, other.category, other.filename, other.lineno)
    if leaks and path:
        with open(path, "a") as out:
            out.writelines(f"{nodeid}: {w.message}\n" for w in leaks)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controlling process: workers inherit it
        path = Path(tempfile.gettempdir()) / f"locust-llm-test-leaks-{os.getpid()}.txt"
        path.unlink(missing_ok=True)
        os.environ[LEAKS_ENV] = str(path)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if hasattr(terminalreporter.config, "workerinput"):  # an xdist worker: its controller lists
        return  # (a worker used to read the file first and delete it, unprinted)
    path = Path(os.environ.get(LEAKS_ENV, ""))
    if path.name and path.is_file():
        lines = path.read_text().splitlines()
        terminalreporter.section(f"sockets left unclosed ({len(lines)}): fix these tests")
        for line in lines:
            terminalreporter.write_line(line)
        path.unlink()


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "run"
