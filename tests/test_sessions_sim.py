"""Multi-turn sessions against the real simulator (Locust in a subprocess).

The simulator's request trace is the judge: what it received (prompt tokens, cached tokens)
proves the history was carried and that its prefix cache served it.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import free_port, locust_cmd, reap, run_distributed, run_locust

from locust_llm.report.diagnosis.decompose import predicted_prefill_s
from locust_llm.roofline.floors import get_gpu, get_model
from locust_llm.sim.testing import running_sim

LOCUSTFILE = """
from locust_llm.client.workload_users import SessionUser

class Talk(SessionUser):
    sessions = "synthetic"
    session_turns = "fixed:{turns}"
    turn_input_len = "fixed:{words}"
    turn_output_len = "fixed:{answer}"
    max_tokens = {answer}
    think_time_s = {think}
"""
PHYSICS = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "output_len": "fixed:16"}


def _trace(path: Path) -> dict[str, dict]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return {r["client_request_id"]: r for r in rows}


def _run(tmp_path: Path, name: str, *, cache: bool, users: int, seconds: int, **kw: object):
    trace, run_dir = tmp_path / f"{name}.jsonl", tmp_path / name
    locustfile = tmp_path / f"{name}.py"
    locustfile.write_text(
        LOCUSTFILE.format(**{"turns": 4, "words": 256, "answer": 16, "think": 0, **kw})
    )
    with running_sim(trace_path=str(trace), enable_prefix_caching=cache, **PHYSICS) as url:
        out = run_locust([
            "-f", str(locustfile), "--headless", "--host", url, "-u", str(users),
            "-r", str(users), "-t", f"{seconds}s", "--stop-timeout", "10",
            "--llm-run-dir", str(run_dir),
        ])  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    records = pd.read_parquet(run_dir / "requests.parquet")
    return records[records.ok], _trace(trace)


def test_each_turn_carries_the_history_and_the_cache_serves_it(tmp_path: Path) -> None:
    records, sent = _run(tmp_path, "on", cache=True, users=3, seconds=6)
    assert len(records) >= 12 and set(records.turn) == {0, 1, 2, 3}
    assert (records.session_id != "").all()
    for session_id, turns in records.sort_values("start_wall_s").groupby("session_id"):
        assert list(turns.turn) == list(range(len(turns))), session_id  # in order, no repeat
        assert turns.user_id.nunique() == 1  # one user runs the whole conversation
        server = [sent[r] for r in turns.request_id]
        for before, now in itertools.pairwise(server):
            # history carried: the last prompt + the server's answer + 256 new words
            assert now["prompt_tokens"] == before["prompt_tokens"] + before["tokens_sent"] + 256
            # and cached: everything but the last partial 16-token block of the history
            history = before["prompt_tokens"] + before["tokens_sent"]
            assert now["cached_tokens"] >= history // 16 * 16 - 16
        for rid, row in zip(turns.request_id, turns.itertuples(), strict=True):
            assert row.cached_tokens == sent[rid]["cached_tokens"]  # usage read by the client
            assert row.input_tokens == sent[rid]["prompt_tokens"]


def test_ttft_by_turn_falls_by_what_the_cached_prefix_predicts(tmp_path: Path) -> None:
    """Without the cache, TTFT grows with the prompt; a line through those (TTFT against
    prompt tokens) predicts each cached turn's TTFT from its uncached tokens alone."""
    on, _ = _run(tmp_path, "on", cache=True, users=1, seconds=5, words=1024)
    off, _ = _run(tmp_path, "off", cache=False, users=1, seconds=5, words=1024)
    by_turn_off = off.groupby("turn").ttft_s.median()
    by_turn_on = on.groupby("turn").ttft_s.median()
    assert by_turn_off.is_monotonic_increasing and by_turn_off[3] > 2 * by_turn_off[0]
    # the line through the uncached run's per-turn medians (one late request on a busy host
    # cannot tilt it), and how far those medians stray from it: this host's timing noise in
    # this run, the slack every comparison below allows
    tokens_off = off.input_tokens.groupby(off.turn).median()
    slope, base = np.polyfit(tokens_off.to_numpy(float), by_turn_off.to_numpy(float), 1)
    uncached = (on.input_tokens - on.cached_tokens).groupby(on.turn).median()
    predicted = base + slope * uncached
    # the cached run is another 5 s of this host: its first turn (nothing cached yet) strays
    # from the line by that run's own noise, which its later turns bear as well
    assert uncached[0] == on.input_tokens.groupby(on.turn).median()[0]
    noise_off = (by_turn_off - (base + slope * tokens_off)).abs().max()
    noise = float(max(noise_off, abs(by_turn_on[0] - predicted[0])))
    # the uncached tokens also attend to the cached ones: the roofline says how much longer
    # that prefill is than one of the uncached tokens alone (a few % per cached turn)
    model, gpu = get_model(PHYSICS["model"]), get_gpu(PHYSICS["gpu"])
    prompt = on.input_tokens.groupby(on.turn).median()
    for turn in (1, 2, 3):
        alone = predicted_prefill_s(model, gpu, uncached[turn], 16, 1)
        attending = predicted_prefill_s(
            model, gpu, prompt[turn], 16, 1, cached_tokens=prompt[turn] - uncached[turn]
        )
        upper = base + slope * uncached[turn] * attending / alone
        low, high = 0.75 * predicted[turn] - noise, 1.25 * upper + noise
        assert low <= by_turn_on[turn] <= high, (turn, noise, by_turn_on)
    # the saving against no cache is the cached tokens' prefill time
    cached = on.cached_tokens.groupby(on.turn).median()
    saving = by_turn_off - by_turn_on
    for turn in (1, 2, 3):
        assert saving[turn] == pytest.approx(slope * cached[turn], rel=0.2, abs=2 * noise), turn
    assert saving[3] > saving[2] > saving[1] > 0


def test_sessions_spread_over_two_workers_without_duplication(tmp_path: Path) -> None:
    locustfile = tmp_path / "talk.py"
    locustfile.write_text(LOCUSTFILE.format(turns=3, words=32, answer=4, think="'uniform:0,0.05'"))
    run_dir = tmp_path / "run"
    with running_sim(zero_cost=True, output_len="fixed:4") as url:
        code, output = run_distributed(
            str(locustfile),
            ["--host", url, "-u", "6", "-r", "6", "-t", "4s", "--llm-run-dir", str(run_dir)],
            workers=2,
            worker_cwd=tmp_path,
        )
    assert code == 0, output[-3000:]
    records = pd.read_parquet(run_dir / "requests.parquet")
    records = records[records.ok]
    by_worker = records.groupby("worker_id").session_id.unique()
    assert len(by_worker) == 2
    a, b = (set(v) for v in by_worker)
    assert a and b and not a & b  # no session runs on both workers
    numbers = sorted(int(s.rsplit("-", 1)[1]) for s in a | b)
    assert len(set(n % 2 for n in sorted(int(s.rsplit("-", 1)[1]) for s in a))) == 1
    assert numbers[:6] == list(range(6))  # the first sessions, each once
    turns = records.groupby("session_id").turn.apply(lambda t: sorted(t) == list(range(len(t))))
    assert turns.all()


# Locust's worker runner handles its master's messages while its constructor still waits for
# the connection; held there a second, a worker's first spawn comes before it has a runner
# (the race that once hung a late worker's run for the whole stop timeout), every time
SLOW_CONNECT = """
import gevent
from locust.runners import WorkerRunner

_connect = WorkerRunner.connect_to_master


def _slow_connect(self):
    _connect(self)
    gevent.sleep(1.0)


WorkerRunner.connect_to_master = _slow_connect
"""


def test_a_worker_joining_a_running_test_takes_no_session(tmp_path: Path) -> None:
    locustfile = tmp_path / "talk.py"
    locustfile.write_text(
        LOCUSTFILE.format(turns=3, words=32, answer=4, think="'0.05'") + SLOW_CONNECT
    )
    run_dir, port = tmp_path / "run", free_port()
    with running_sim(zero_cost=True, output_len="fixed:4") as url:
        master = subprocess.Popen(
            [*locust_cmd(), "-f", str(locustfile), "--headless", "--master",
             "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
             "--expect-workers", "1", "--host", url, "-u", "6", "-r", "6", "-t", "12s",
             "--llm-run-dir", str(run_dir)],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        worker = [*locust_cmd(), "-f", str(locustfile), "--worker", "--master-host",
                  "127.0.0.1", "--master-port", str(port)]  # fmt: skip
        procs = [subprocess.Popen(worker, cwd=tmp_path, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)]  # fmt: skip
        try:
            assert master.stdout is not None
            seen = []
            for line in master.stdout:  # the test runs on the first worker: then the second
                seen.append(line)
                if "All users spawned" in line:
                    break
            time.sleep(1.0)
            procs.append(subprocess.Popen(worker, cwd=tmp_path, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))  # fmt: skip
            rest, _ = master.communicate(timeout=60)
            output = "".join(seen) + rest
        finally:
            reap(master, *procs)
    assert master.returncode == 0, output[-3000:]
    assert "2 workers connected" in output  # the late worker did join (and got users)
    records = pd.read_parquet(run_dir / "requests.parquet")
    sent = records[records.error_kind != "cancelled"]
    assert sent.worker_id.nunique() == 1  # the late one sent nothing
    assert not sent.duplicated(["session_id", "turn"]).any()
