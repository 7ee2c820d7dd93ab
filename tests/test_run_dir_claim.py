"""The run dir's lock and default names (rundir/claim.py) and run's early checks (launch/
early_checks.py), in process and with small child processes.

* a default name is never reused: the same stamp gives ``-2``, ``-3`` ...;
* a held dir is refused (RunDirBusy naming the dir and the holder's pid) and its lock file is
  left as the holder wrote it; released, or its holder killed, the dir can be claimed again;
* a child handed the lock (inherited descriptor + variable) adopts it; a stranger's variable
  pointing elsewhere is ignored;
* URL, timeout and concurrency checks accept exactly what they promise.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from locust_llm.errors import InputError
from locust_llm.launch import early_checks
from locust_llm.launch.early_checks import (
    FD_RESERVE,
    check_concurrency,
    check_timeouts,
    check_url,
    user_capacity,
)
from locust_llm.options.validate import roofline_model
from locust_llm.rundir import claim
from locust_llm.rundir.claim import (
    INHERITED_ENV,
    LOCK_FILE,
    RunDirBusy,
    is_locked,
    lock_run_dir,
    new_run_dir,
)
from locust_llm.workloads.stages import StagePlan

ROOT = Path(__file__).resolve().parent.parent


def test_default_names_never_collide(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claim, "utc_stamp", lambda: "20260101T000000Z")
    made = [new_run_dir(tmp_path / "reports", "run-") for _ in range(3)]
    assert [p.name for p in made] == [
        "run-20260101T000000Z",
        "run-20260101T000000Z-2",
        "run-20260101T000000Z-3",
    ]
    assert all(p.is_dir() for p in made)


def test_a_held_dir_is_refused_without_touching_its_lock_file(tmp_path: Path) -> None:
    first = lock_run_dir(tmp_path / "run")
    written = (tmp_path / "run" / LOCK_FILE).read_bytes()
    assert written.startswith(f"pid {os.getpid()} ".encode())
    assert is_locked(tmp_path / "run")
    with pytest.raises(
        RunDirBusy, match=rf"run dir .*run is in use by another run \(pid {os.getpid()}"
    ):
        lock_run_dir(tmp_path / "run", flag="--out")  # a second open file: flock refuses it
    assert (tmp_path / "run" / LOCK_FILE).read_bytes() == written
    first.release()
    assert not is_locked(tmp_path / "run")
    lock_run_dir(tmp_path / "run").release()


def test_a_killed_holder_releases_the_dir(tmp_path: Path) -> None:
    code = (
        "import sys, time; from pathlib import Path; from locust_llm.rundir.claim import "
        "lock_run_dir; lock_run_dir(Path(sys.argv[1])); print('held', flush=True); time.sleep(60)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "run")], env=env,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        with pytest.raises(RunDirBusy, match=f"pid {child.pid}"):
            lock_run_dir(tmp_path / "run")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        child.stdout.close()  # type: ignore[union-attr]
    assert not is_locked(tmp_path / "run")  # the kernel dropped the crashed holder's lock
    assert claim.holder(tmp_path / "run").startswith(f"pid {child.pid} since ")
    lock_run_dir(tmp_path / "run").release()


def test_a_child_handed_the_lock_adopts_it(tmp_path: Path) -> None:
    held = lock_run_dir(tmp_path / "run")
    code = (
        "import sys; from pathlib import Path; from locust_llm.rundir.claim import lock_run_dir;"
        "c = lock_run_dir(Path(sys.argv[1])); print(c.fd)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), **held.child_env()}
    adopted = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")], env=env,
                             pass_fds=(held.fd,), capture_output=True, text=True, timeout=30,
                             check=False)  # fmt: skip
    assert adopted.returncode == 0, adopted.stderr
    assert adopted.stdout.strip() == str(held.fd)
    # the same variable for another dir's lock (or no descriptor at all) adopts nothing
    other = subprocess.run([sys.executable, "-c", code, str(tmp_path / "other")], env=env,
                           capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert other.returncode == 0, other.stderr
    assert not claim.holder(tmp_path / "other").startswith(f"pid {os.getpid()} ")
    assert claim.holder(tmp_path / "run").startswith(f"pid {os.getpid()} ")  # not rewritten
    assert INHERITED_ENV in held.child_env()
    held.release()


def test_an_out_that_cannot_be_a_dir_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for path in (blocker, blocker / "sub"):
        with pytest.raises(InputError, match=r"^--out .*: cannot create the run dir"):
            lock_run_dir(path, flag="--out")


@settings(max_examples=60, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https", "HTTP", "ftp", "file", "ws", ""]),
    host=st.sampled_from(["127.0.0.1", "example.com", "[::1]", ""]),
    port=st.sampled_from(["", ":8000", ":65535", ":0x1", ":70000"]),
)
def test_check_url_accepts_only_http_urls_with_a_host(scheme: str, host: str, port: str) -> None:
    url = f"{scheme}://{host}{port}" if scheme else f"{host}{port}"
    good = scheme.lower() in ("http", "https") and host != "" and port in ("", ":8000", ":65535")
    if good:
        check_url("--host", url)
    else:
        with pytest.raises(InputError, match=r"^--host "):
            check_url("--host", url)


def test_timeouts() -> None:
    check_timeouts(0.5, 0)  # --stop-timeout 0: streams still running at the end are cancelled
    for timeout_s, stop_s, flag in ((0, 5, "--timeout"), (-1, 5, "--timeout"),
                                    (float("nan"), 5, "--timeout"), (5, -5, "--stop-timeout"),
                                    (5, float("inf"), "--stop-timeout")):  # fmt: skip
        with pytest.raises(InputError, match=f"^{flag} "):
            check_timeouts(timeout_s, stop_s)


def test_concurrency_bound_comes_from_the_open_file_limit() -> None:
    assert user_capacity(2, 1, 1024) == 2 * (1024 - FD_RESERVE)
    assert user_capacity(0, 2, 1024) == (1024 - FD_RESERVE) // 2  # 0 workers: the master's own
    most = 2 * (1024 - FD_RESERVE)
    plan = [StagePlan(concurrency=10, requests=1), StagePlan(concurrency=most, requests=1)]
    check_concurrency(plan, workers=2, servers=1, open_files=1024)
    plan.append(StagePlan(concurrency=most + 1, requests=1))
    with pytest.raises(InputError, match=r"^--concurrency 1921: .*at most 1920.*1024 open files"):
        check_concurrency(plan, workers=2, servers=1, open_files=1024)
    check_concurrency([StagePlan(rate=1e9, duration_s=1)], workers=1, servers=1, open_files=100)


def test_worker_open_files_follows_locusts_own_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    inf = resource.RLIM_INFINITY
    for limits, expected in (((1024, 4096), 1024), ((1024, 1 << 20), 10_000),
                             ((1024, inf), 10_000), ((20_000, inf), 20_000)):  # fmt: skip
        monkeypatch.setattr(early_checks.resource, "getrlimit", lambda _r, v=limits: v)
        assert early_checks.worker_open_files() == expected


def test_roofline_model_lists_close_presets() -> None:
    roofline_model("--llm-roofline-model", "mistral-7b")
    roofline_model("--llm-roofline-model", "")
    with pytest.raises(InputError, match=r"^--llm-roofline-model: .*did you mean mistral-7b"):
        roofline_model("--llm-roofline-model", "mistral-7bb")
