"""Hints that say what is wrong (issue 19 item 4), end to end as a user meets them.

A dead host is a connection problem, not a missing --llm-model; a server without a model list
names the flag of the command used; a stage whose every request failed is ``errors`` even with
few requests; an unreachable --gpu-metrics exporter is named on the console, with the source
the GPU figures came from instead. The servers are real sockets: nothing listening, the
standard library's HTTP server, the simulator.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import free_port, run_locust
from reliability_servers import not_found, serving

from locust_llm.launch.sweep import simulator
from locust_llm.report.sources import source_summaries

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-m", "locust_llm.cli"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "run", "--workers", "0", *args], capture_output=True, text=True, timeout=180,
        check=False,
    )  # fmt: skip


def test_a_dead_host_is_a_connection_problem_not_a_missing_model(tmp_path: Path) -> None:
    host = f"http://127.0.0.1:{free_port()}"
    out = _run("--host", host, "--concurrency", "1", "--stage-requests", "1",
               "--out", str(tmp_path / "run"))  # fmt: skip
    text = out.stdout + out.stderr
    assert (
        f"server unreachable at {host}: 1 request failed as connect errors, none completed "
        "(is the server up and --host right?)"
    ) in text, text[-2000:]
    assert "--llm-model" not in text and "--model" not in text, text[-2000:]
    records = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert len(records) == 1 and records["error_message"][0].startswith(f"cannot reach {host} (")


def test_no_model_list_names_the_flag_of_each_command(tmp_path: Path) -> None:
    with serving(not_found()) as host:  # the 404 stops the run at start (a 3 s limit could first)
        out = run_locust([
            "-f", "locustfiles/chat.py", "--host", host, "--headless", "-u", "1", "-r", "1",
            "-t", "60s", "--llm-run-dir", str(tmp_path / "run"), "--llm-server-metrics", "none",
        ])  # fmt: skip
    assert f"GET {host}/v1/models: HTTP 404, no model list" in out.stdout, out.stdout[-2000:]
    assert "--llm-model (locust-llm run: --model)" in out.stdout


def test_every_request_failing_reads_errors_even_in_a_short_stage(tmp_path: Path) -> None:
    host = f"http://127.0.0.1:{free_port()}"
    out = _run("--host", host, "--model", "m", "--concurrency", "1", "--stage-requests", "3",
               "--out", str(tmp_path / "run"))  # fmt: skip
    assert "Verdict: errors" in out.stdout, out.stdout[-3000:]
    assert "connect 100.0%" in out.stdout
    assert "insufficient_data" not in out.stdout


def test_an_unreachable_gpu_exporter_is_named_with_the_source_used_instead(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}/metrics"
    run_dir = tmp_path / "run"
    with simulator(["--model", "mistral-7b", "--gpu", "rtx4090"], tmp_path / "sim.log") as url:
        out = _run("--host", url, "--gpu-metrics", dead, "--concurrency", "1,2",
                   "--stage-requests", "3,6", "--max-tokens", "16",
                   "--out", str(run_dir))  # fmt: skip
    assert out.returncode in (0, 3), out.stdout[-3000:] + out.stderr[-2000:]
    warnings = out.stdout.split("Warnings:", 1)[1]
    said = [line for line in warnings.splitlines() if dead in line]
    assert any("unreachable" in line for line in said), said  # the scraper's own, at the time
    assert any("never answered" in line and f"come from {url}/metrics only" in line
               for line in said), said  # fmt: skip

    sources = {
        s.source: s for s in source_summaries(pd.read_parquet(run_dir / "telemetry.parquet"))
    }
    assert sources[dead].answered == 0 and sources[dead].scrapes > 0
    assert "gpu_util" in sources[f"{url}/metrics"].signals
    report = (run_dir / "report.md").read_text()
    sources_section = report.split("## Telemetry sources", 1)[1]
    assert (
        f"{dead}: 0 of {sources[dead].scrapes} scrapes answered; gave no figures" in sources_section
    )
    assert f"{url}/metrics: " in sources_section and "gpu_util" in sources_section
