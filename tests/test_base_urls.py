"""Base URLs as users write them, and plain Locust against a dead server (issue 28 items 1-3),
the users' way: the real ``locust-llm run`` and ``locust`` as child processes against the
simulator (a child process on port 0), a path-recording 404 server, and a dead port.

* ``--host URL/v1`` and ``URL/v1/`` (the OpenAI SDK's ``base_url``) reach the same endpoints as
  ``URL``, for every API adapter and for model discovery: every record succeeds and the
  simulator finished exactly as many requests as the run dir holds;
* a gateway prefix is kept (``http://gw/team-a/v1`` asks ``/team-a/v1/models``), and a 404
  there names the URL asked;
* a host without a scheme is refused before anything is sent (exit 2, the URL to write);
* a dead port: no traceback, no ``nan``, one unreachable line with the count, every request one
  ``connect`` record, and a run dir ``locust-llm report`` reads and says nothing completed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from cluster_utils import http_get, metric_value
from conftest import free_port, run_locust
from reliability_servers import not_found, serving

from locust_llm.launch.sweep import simulator

CLI = [sys.executable, "-m", "locust_llm.cli"]
ROOT = Path(__file__).resolve().parent.parent
DONE = "vllm:request_success_total"
NO_SCHEME = "no scheme; write http://127.0.0.1:{port} (or https://127.0.0.1:{port} for TLS)"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("sim") / "sim.log"
    with simulator(["--model", "mistral-7b", "--gpu", "rtx4090", "--zero-cost"], log) as url:
        yield url


def _finished(url: str) -> float:
    return metric_value(http_get(url + "/metrics"), DONE)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([*CLI, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=env, check=False)  # fmt: skip


def _records(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "requests.parquet")


def test_run_with_the_sdk_base_url_reaches_the_server(sim: str, tmp_path: Path) -> None:
    before = _finished(sim)
    out = _cli("run", "--workers", "0", "--host", f"{sim}/v1", "--concurrency", "1",
               "--stage-requests", "4", "--max-tokens", "4",
               "--out", str(tmp_path / "run"))  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert out.stdout.startswith(f"locust-llm run: {sim}; model: the first of /v1/models;")
    records = _records(tmp_path / "run")
    assert len(records) == 4 and records["ok"].all(), records["error_message"].tolist()
    assert set(records["model"]) == {"mistral-7b"}  # discovered at /v1/models, not /v1/v1/models
    assert _finished(sim) - before == 4


def test_plain_locust_with_v1_slash_reaches_every_api(sim: str, tmp_path: Path) -> None:
    # the sweep's stage shape with the other APIs' user classes beside its chat user: one user
    # each, and a request-count stage, so every API is sent (bounded by count, not by time)
    files = ",".join(f"locustfiles/{name}.py" for name in
                     ("sweep", "completions", "responses", "embeddings"))  # fmt: skip
    before = _finished(sim)
    out = run_locust(["-f", files, "--headless", "--host", f"{sim}/v1/", "--llm-concurrency", "4",
                      "--llm-stage-requests", "24", "--llm-max-tokens", "4",
                      "--llm-run-dir", str(tmp_path / "run")])  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    records = _records(tmp_path / "run")
    assert len(records) == 24 and records["ok"].all(), records["error_message"].unique().tolist()
    assert set(records["endpoint"]) == {
        "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings",
    }  # fmt: skip
    assert _finished(sim) - before == 24
    assert "Traceback" not in out.stdout and not re.search(r"\bnan\b", out.stdout)


def test_a_host_without_a_scheme_is_refused_before_anything_is_sent(
    sim: str, tmp_path: Path
) -> None:
    port = sim.rsplit(":", 1)[1]
    bare = f"127.0.0.1:{port}"
    before = _finished(sim)
    out = _cli("run", "--workers", "0", "--host", bare, "--concurrency", "1",
               "--stage-requests", "1", "--out", str(tmp_path / "run"))  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        f"locust-llm run: error: --host '{bare}': " + NO_SCHEME.format(port=port)
    )
    assert not (tmp_path / "run").exists()
    out = run_locust(["-f", "locustfiles/chat.py", "--headless", "-u", "1", "-r", "1",
                      "-t", "60s", "--host", f"{bare}/v1",
                      "--llm-run-dir", str(tmp_path / "plain")])  # fmt: skip
    assert out.returncode == 2, out.stdout[-2000:]
    assert (
        f"locust-llm: Chat's host (--host) '{bare}/v1': no scheme; write http://{bare}/v1 (or "
        f"https://{bare}/v1 for TLS); no load was sent"
    ) in out.stdout
    assert _finished(sim) == before


def test_a_gateway_prefix_is_kept_and_a_404_names_the_url_asked(tmp_path: Path) -> None:
    seen: list[str] = []
    with serving(not_found(seen)) as url:
        # the 404 stops the run at start: -t only bounds a run that would not stop
        out = run_locust(["-f", "locustfiles/chat.py", "--headless", "-u", "2", "-r", "2",
                          "-t", "60s", "--host", f"{url}/team-a/v1/", "--llm-server-metrics",
                          "none", "--llm-run-dir", str(tmp_path / "run")])  # fmt: skip
    assert out.returncode == 2, out.stdout[-2000:]
    assert seen == ["/team-a/v1/models"]  # asked once, under the prefix, /v1 not doubled
    assert (
        f"locust-llm: GET {url}/team-a/v1/models: HTTP 404, no model list at this URL: check "
        "that --host is the server's base URL (with or without /v1); if it is, name the model "
        "with --llm-model (locust-llm run: --model)\n"
    ) in out.stdout
    assert "Traceback" not in out.stdout and "client error" not in out.stdout


def test_plain_locust_against_a_dead_port_says_so_once_and_leaves_a_readable_run_dir(
    tmp_path: Path,
) -> None:
    host = f"http://127.0.0.1:{free_port()}"
    run_dir = tmp_path / "run"
    out = run_locust(["-f", "locustfiles/chat.py", "--headless", "-u", "2", "-r", "2", "-t", "3s",
                      "--host", host, "--llm-run-dir", str(run_dir)])  # fmt: skip
    text = out.stdout
    assert out.returncode == 1, text[-3000:]  # Locust's exit code when requests failed
    assert "Traceback" not in text and not re.search(r"\bnan\b", text), text[-3000:]
    said = re.findall(
        rf"locust-llm: server unreachable at {re.escape(host)}: (\d+) requests failed as connect "
        r"errors, none completed \(is the server up and --host right\?\)\n",
        text,
    )
    assert len(said) == 1, text[-3000:]
    failed = int(said[0])
    assert f"\nLLM stats: no request completed (connect {failed})\n" in text
    records = _records(run_dir)
    assert len(records) == failed >= 2
    assert (records["error_kind"] == "connect").all()
    assert records["error_message"].str.contains(f"cannot reach {host} ").all()
    report = _cli("report", str(run_dir))
    assert report.returncode == 3, report.stdout[-2000:] + report.stderr  # the error-rate alert
    assert f"Reading: no request completed: all {failed} failed (see the verdict)." in report.stdout
    assert "Verdict: errors" in report.stdout and "connect 100.0%" in report.stdout
