"""Client behaviours found in review: connection reuse, garbled heads, masking, stage edges."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import free_port, locust_cmd, reap, run_distributed, run_locust
from fake_openai import FakeConfig, fake_openai_server

from locust_llm.rundir.layout import read_run_info, stage_of

pytestmark = pytest.mark.slow

SWEEP = "locustfiles/sweep.py"


def test_connections_are_reused_when_the_terminator_comes_late(tmp_path: Path) -> None:
    connections: list[int] = []
    cfg = FakeConfig(tokens=3, interval_s=0.002, terminator_delay_s=0.003, connections=connections)
    with fake_openai_server(cfg) as url:
        out = run_locust([
            "-f", SWEEP, "--host", url, "--headless", "--only-summary", "--stop-timeout", "10s",
            "--llm-run-dir", str(tmp_path / "run"), "--llm-concurrency", "2",
            "--llm-stage-requests", "30", "--llm-model", "m", "--llm-server-metrics", "none",
        ])  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    assert len(pd.read_parquet(tmp_path / "run" / "requests.parquet")) == 30
    assert len(connections) == 2  # one per user (a reconnect per request would be 30)


def test_a_garbled_response_head_is_a_record_not_a_crash(tmp_path: Path) -> None:
    secret = "sk-HEADER-SECRET-42"
    with fake_openai_server(FakeConfig(garbage_head=True)) as url:
        out = run_locust([
            "-f", SWEEP, "--host", url, "--headless", "--only-summary", "--stop-timeout", "10s",
            "--llm-run-dir", str(tmp_path / "run"), "--llm-concurrency", "2",
            "--llm-stage-requests", "6", "--llm-model", "m", "--llm-header", f"api-key: {secret}",
        ])  # fmt: skip
    assert out.returncode in (0, 1), out.stdout[-3000:]
    records = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert len(records) == 6 and (records.error_kind == "bad_payload").all()
    assert "Traceback" not in out.stdout, out.stdout[-4000:]
    command = json.loads((tmp_path / "run" / "run.json").read_text())["command"]
    assert "api-key: ***" in command and secret not in json.dumps(command)


def test_open_loop_stages_then_a_soak_across_two_workers(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with fake_openai_server(FakeConfig(tokens=3, interval_s=0.01)) as url:
        code, output = run_distributed(
            SWEEP,
            ["--host", url, "--only-summary", "--stop-timeout", "10s", "--llm-run-dir",
             str(run_dir), "--llm-rate", "8,24", "--llm-stage-duration", "3",
             "--llm-burstiness", "100", "--llm-max-users", "16", "--llm-soak", "2s@2"],
            workers=2, worker_cwd=tmp_path,
        )  # fmt: skip
    assert code == 0, output[-3000:]
    info = read_run_info(run_dir)
    records = pd.read_parquet(run_dir / "requests.parquet")
    window = np.array([stage_of(s, info.stages) for s in records.start_wall_s])
    for stage, rate in ((0, 8.0), (1, 24.0)):
        # each worker sends its share: the two together make the stage's rate, and no slot of
        # a stage is sent in the next one
        mine = records[records.stage == stage]
        sched = np.sort(mine.scheduled_wall_s.to_numpy())
        assert (len(sched) - 1) / (sched[-1] - sched[0]) == pytest.approx(rate, rel=0.1)
        # no slot is carried over: a stage's requests start before the next stage's window
        # opens, give or take the few ms the stage message takes to reach a worker
        assert (mine.start_wall_s < info.stages[stage + 1].start_wall_s + 0.5).all()
    soak = records[records.stage == 2]  # the stage the worker was in when it sent
    assert len(soak) > 10 and soak.scheduled_wall_s.isna().all()  # closed loop again
    # a worker learns of the soak a few ms after the master opens its window: open-loop sends
    # in that gap belong to stage 1 by the record, and only sit at the window's very start
    late = records[(window == 2) & (records.stage == 1)]
    assert (late.start_wall_s - info.stages[2].start_wall_s < 0.5).all()


def _post(url: str, **form: str) -> None:
    data = urllib.parse.urlencode(form).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=10) as resp:
        assert resp.status == 200


def _state(base: str) -> str:
    with urllib.request.urlopen(base + "/stats/requests", timeout=10) as resp:
        return str(json.loads(resp.read())["state"])


def test_a_sweep_started_twice_from_the_web_ui_gives_two_complete_runs(tmp_path: Path) -> None:
    import subprocess

    from conftest import ROOT

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with fake_openai_server(FakeConfig(tokens=3, interval_s=0.005)) as url:
        proc = subprocess.Popen(
            [*locust_cmd(), "-f", SWEEP, "--host", url, "--web-port", str(port),
             "--stop-timeout", "10", "--llm-run-dir", str(tmp_path / "run"),
             "--llm-concurrency", "1,3", "--llm-stage-requests", "3,9", "--llm-model", "m"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    _state(base)
                    break
                except OSError:
                    time.sleep(0.2)
            for _ in range(2):
                _post(base + "/swarm", user_count="1", spawn_rate="1", host=url)
                time.sleep(1.5)
                deadline = time.monotonic() + 40
                while _state(base) not in ("stopped",) and time.monotonic() < deadline:
                    time.sleep(0.3)
                assert _state(base) == "stopped"
                time.sleep(0.5)
        finally:
            proc.terminate()
            try:
                output, _ = proc.communicate(timeout=30)
            finally:
                reap(proc)
    runs = sorted(p for p in tmp_path.iterdir() if (p / "requests.parquet").exists())
    assert len(runs) == 2, output[-3000:]
    for run in runs:
        info = read_run_info(run)
        records = pd.read_parquet(run / "requests.parquet")
        counts = [sum(stage_of(s, info.stages) == st.index for s in records.start_wall_s)
                  for st in info.stages]  # fmt: skip
        assert counts == [3, 9], (run.name, counts)
