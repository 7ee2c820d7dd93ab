"""Exclusive run dirs and every `run` option checked before the first request (real processes).

* two `locust-llm run`s started together with the default --out get different dirs, and each
  keeps all its records (the simulator finished exactly as many requests as both hold);
* a run dir held by a live run is refused (exit 2, naming the dir and the holder's pid) by
  `run` (even with --overwrite) and by a plain `locust --llm-run-dir`, before any request, with
  every file of the first byte-identical; a live run's locust.log is not truncated;
* each bad option is refused before any request reaches a server the test starts (it counts
  every request it receives), with a message naming the option and no traceback.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from cluster_utils import LOCUST, LOCUST_LLM, ROOT, Cluster, http_get, metric_value, wait_until
from reliability_servers import Quiet, serving

from locust_llm.rundir.states import EXIT_CODES, INTERRUPTED

pytestmark = pytest.mark.slow

SIM_ARGS = ("--zero-cost", "--step-overhead-ms", "20", "--output-len", "fixed:20")
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _finished(sim_url: str) -> float:
    return metric_value(http_get(sim_url + "/metrics"), "vllm:request_success_total")


def _short_run(sim_url: str, *extra: str, requests: int = 20) -> list[str]:
    """A one-stage run of ``requests`` (20: two runs started together overlap for seconds)."""
    return [LOCUST_LLM, "run", "--host", sim_url, "--concurrency", "2", "--stage-requests",
            str(requests), "--max-tokens", "20", "--workers", "1", "--quiet", *extra]  # fmt: skip


def _done(cmd: list[str], *, timeout_s: float = 60, cwd: Path = ROOT
          ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True,
                          timeout=timeout_s, check=False)  # fmt: skip


def _digests(run_dir: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run_dir.iterdir())
        if p.is_file()
    }


def test_two_runs_started_together_get_their_own_dirs_and_all_their_records(
    tmp_path: Path,
) -> None:
    with Cluster(tmp_path) as cluster:
        _, sim_url = cluster.sim(*SIM_ARGS)
        work = tmp_path / "work"
        work.mkdir()
        runs = [
            subprocess.Popen(_short_run(sim_url), cwd=work, env=ENV, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            for _ in range(2)
        ]  # fmt: skip
        outputs = [run.communicate(timeout=180)[0] for run in runs]
        for run, output in zip(runs, outputs, strict=True):
            assert run.returncode in (0, 3), output[-3000:]  # 3: alerts fired
        dirs = sorted((work / "reports").iterdir())
        assert len(dirs) == 2, dirs
        printed = sorted(line.split("Run dir: ")[1].strip() for o in outputs
                         for line in o.splitlines() if line.startswith("Run dir: "))  # fmt: skip
        assert printed == sorted(str(d.relative_to(work)) for d in dirs)
        frames = [pd.read_parquet(d / "requests.parquet") for d in dirs]
        for frame in frames:
            assert len(frame) >= 20 and frame["request_id"].is_unique
            assert (frame["error_kind"].fillna("") == "").all()
        assert not set(frames[0]["request_id"]) & set(frames[1]["request_id"])
        # every request the simulator finished is a record in exactly one of the two dirs
        assert sum(len(f) for f in frames) == _finished(sim_url)


HOLDER = """
import sys
from pathlib import Path
from locust_llm.rundir.claim import lock_run_dir
claim = lock_run_dir(Path(sys.argv[1]))
print("held", flush=True)
sys.stdin.read()
"""


def test_a_locked_run_dir_is_refused_and_its_files_stay_byte_identical(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        _, sim_url = cluster.sim(*SIM_ARGS)
        out = tmp_path / "run"
        # a finished run's dir (4 requests: what is judged is its files, not its figures)
        first = _done(_short_run(sim_url, "--out", str(out), requests=4), timeout_s=180)
        assert first.returncode in (0, 3), first.stdout[-2000:] + first.stderr[-2000:]
        served = _finished(sim_url)
        # a live run holding the dir: a process that took its lock (as a run does at start)
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], env=ENV, text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            before = _digests(out)  # the first run's files and the holder's lock file
            assert "locust.log" in before and "requests.parquet" in before
            refused = subprocess.run(
                _short_run(sim_url, "--out", str(out), "--overwrite"), cwd=ROOT, env=ENV,
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
            assert f"run dir {out} is in use by another run (pid {holder.pid}" in refused.stderr
            assert "Traceback" not in refused.stderr
            plain = subprocess.run(
                [LOCUST, "-f", "locustfiles/sweep.py", "--headless", "--host", sim_url,
                 "--llm-concurrency", "1", "--llm-stage-requests", "2", "--llm-run-dir",
                 str(out), "--llm-overwrite", "--llm-server-metrics", "none"],
                cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert plain.returncode == 2, plain.stderr[-2000:]
            assert f"pid {holder.pid}" in plain.stderr and "no load was sent" in plain.stderr
            assert _digests(out) == before  # nothing of the first run touched
            assert _finished(sim_url) == served  # and nothing sent
        finally:
            holder.communicate(timeout=10)  # closing its stdin ends it: the lock goes with it
        again = _done(_short_run(sim_url, "--out", str(out), "--overwrite", requests=4),
                      timeout_s=180)  # fmt: skip
        assert again.returncode in (0, 3), again.stderr[-2000:]
        assert (out / "run.lock").read_text().split()[:2] != ["pid", str(holder.pid)]
        assert _finished(sim_url) > served


def test_a_second_run_on_a_live_runs_dir_is_refused_and_leaves_its_log_whole(
    tmp_path: Path,
) -> None:
    with Cluster(tmp_path) as cluster:
        _, sim_url = cluster.sim(*SIM_ARGS)
        out = tmp_path / "live"
        cmd = [LOCUST_LLM, "run", "--host", sim_url, "--concurrency", "2", "--stage-duration",
               "60", "--max-tokens", "20", "--workers", "1", "--stop-timeout", "5", "--quiet",
               "--out", str(out)]  # fmt: skip
        first = cluster.start("first", cmd, env={"PYTHONPATH": str(ROOT)})
        wait_until(lambda: (out / "requests.arrows").is_file(), 60, "the first run started")
        log_before = (out / "locust.log").read_bytes()
        assert log_before
        started = time.monotonic()
        second = _done([*cmd[:-2], "--out", str(out)])
        assert second.returncode == 2, second.stderr[-2000:]
        assert time.monotonic() - started < 30
        assert f"run dir {out} is in use by another run (pid {first.pid}" in second.stderr
        assert (out / "locust.log").read_bytes().startswith(log_before)  # not truncated
        # the first run has answers before it is cut (its journal is open before its worker has
        # sent anything: a busy host once refused the second run before the first had any)
        wait_until(lambda: _finished(sim_url) >= 2, 60, "the first run's first answers")
        first.send(signal.SIGTERM)
        assert first.wait(60) == EXIT_CODES[INTERRUPTED], first.text()[-3000:]  # cut by the signal
        assert (out / "locust.log").read_bytes().startswith(log_before)
        assert len(pd.read_parquet(out / "requests.parquet")) > 0


class Counting(Quiet):
    """Counts every request it receives (GET or POST) and refuses each POST."""

    received = 0

    def do_GET(self) -> None:
        type(self).received += 1
        super().do_GET()

    def do_POST(self) -> None:
        type(self).received += 1
        self.read_body()
        self.reply(500, "text/plain", b"no")


BAD_OPTIONS = [
    (("--roofline-model", "mistral-7bb"), "--roofline-model", "did you mean mistral-7b"),
    (("--roofline-gpu", "h10"), "--roofline-gpu", "did you mean a10"),
    (("--timeout", "0"), "--timeout 0", "> 0"),
    (("--stop-timeout", "-5"), "--stop-timeout -5", ">= 0"),
    (("--concurrency", "100000000", "--stage-requests", "10"), "--concurrency 100000000",
     "at most"),
    (("--out", "{file}/sub"), "--out", "cannot create the run dir"),
    (("--out", "{file}"), "--out", "a file of that name"),
    (("--host", "ftp://{hostport}"), "--host 'ftp://", "http:// or https://"),
    (("--host", "http://"), "--host 'http://'", "no host"),
    (("--host", "http://{hostport}", "--llm-hosts", "ftp://{hostport}"), "--llm-hosts",
     "http:// or https://"),
]  # fmt: skip


def test_each_bad_option_is_refused_before_any_request(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a dir")
    work = tmp_path / "work"
    work.mkdir()
    with serving(Counting) as url:
        hostport = url.removeprefix("http://")
        for args, names, expects in BAD_OPTIONS:
            filled = [a.format(file=afile, hostport=hostport) for a in args]
            host = [] if "--host" in filled else ["--host", url]
            proc = subprocess.run(
                [LOCUST_LLM, "run", *host, "--workers", "1", "--quiet", *filled], cwd=work,
                env=ENV, capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert proc.returncode == 2, (filled, proc.stderr[-2000:])
            assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
            assert names in proc.stderr and expects in proc.stderr, (filled, proc.stderr)
            assert Counting.received == 0, filled
            assert not (work / "reports").exists(), filled  # no run dir made either
        # a plain Locust run checks --llm-roofline-model and the server URLs at start too
        plain_cases = [
            (["--host", url, "--llm-roofline-model", "mistral-7bb"], "--llm-roofline-model"),
            (["--host", f"ftp://{hostport}"], "(--host) 'ftp://"),
            (["--host", url, "--llm-hosts", f"{url},ftp://{hostport}"], "--llm-hosts 'ftp://"),
        ]
        for args, names in plain_cases:
            plain = subprocess.run(
                [LOCUST, "-f", "locustfiles/sweep.py", "--headless", *args,
                 "--llm-concurrency", "1", "--llm-stage-requests", "2", "--llm-run-dir",
                 str(tmp_path / "plain"), "--llm-server-metrics", "none"],
                cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert plain.returncode == 2, (args, plain.stderr[-2000:])
            assert names in plain.stderr and "no load was sent" in plain.stderr, plain.stderr
            assert Counting.received == 0, args
