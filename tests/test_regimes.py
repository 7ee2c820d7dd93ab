"""Each bottleneck regime end to end: the simulator set up in it by physics, a sweep, a report.

For every regime of the seed's bottleneck table (plus overload, client-bound and no telemetry) the
test starts ``locust-llm sim`` with a configuration that puts the server in that regime, runs a
short stepped sweep with Locust (one process, in a subprocess: Locust never enters the pytest
process), writes the report with ``locust-llm report`` and checks the overall verdict's kind in
``summary.json`` and that its evidence quotes the numbers it rests on. The configurations and what
they produced are written down in docs/report.md ("Regimes").
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from locust_llm.launch.sweep import LOCUSTFILE, simulator
from locust_llm.report.diagnosis.thresholds import Thresholds

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
LOCUST = str(Path(sys.executable).parent / "locust")
NUMBER = re.compile(r"\d")

#: A deliberately CPU-heavy locustfile: before each request a user hashes data for 0.2 s in a
#: native thread of gevent's pool (hashlib releases the GIL), so the Locust process uses more
#: than one core's worth of CPU even on a machine where other work competes for the cores; the
#: requests wait on it, so the load generator, not the server, is the limit. Locust's CPU monitor
#: samples every 10 s and its first psutil reading is only a baseline (a worker's CPU is first
#: known 20 s in), so its interval is shortened here to keep the stage short; the path monitor ->
#: runner -> telemetry -> report is unchanged.
HEAVY_LOCUSTFILE = '''\
"""Chat users that burn CPU before every request (a deliberately CPU-heavy locustfile)."""

import hashlib
import time
from typing import Any

import gevent
import locust.runners
from locust import constant

from locust_llm.client.shapes import StagesShape
from locust_llm.client.user import ChatUser

locust.runners.CPU_MONITOR_INTERVAL = 1.0
BLOCK = bytes(1 << 20)


def burn(seconds: float) -> None:
    """Hash a 1 MiB block until this thread has used ``seconds`` of CPU."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        hashlib.sha256(BLOCK).digest()


class HeavyChat(ChatUser):
    """Burns 0.2 s of CPU (in a native thread) while building each request."""

    wait_time = constant(0)

    def build_body(self, prompt: Any, max_tokens: int) -> dict[str, Any]:
        gevent.get_hub().threadpool.spawn(burn, 0.2).get()
        return super().build_body(prompt, max_tokens)


class Stages(StagesShape):
    """The stages of --llm-concurrency / --llm-stage-duration."""
'''


@dataclass(frozen=True)
class Regime:
    """A simulator configuration and the sweep run against it."""

    sim: list[str]
    sweep: list[str]
    roofline: tuple[str, str] = ("mistral-7b", "rtx4090")
    metrics: bool = True
    locustfile: str = ""  # source of a locustfile to use instead of the sweep locustfile
    pin: bool = False  # run Locust on core 0 only (taskset)
    extra_env: dict[str, str] = field(default_factory=dict)


def run_regime(tmp_path: Path, regime: Regime, *, timeout_s: float = 60) -> dict[str, Any]:
    """Start the simulator, sweep it with Locust, report; returns summary.json (parsed)."""
    run_dir, out = tmp_path / "run", tmp_path / "report"
    locustfile = LOCUSTFILE
    if regime.locustfile:
        locustfile = tmp_path / "heavy_locustfile.py"
        locustfile.write_text(regime.locustfile)
    model, gpu = regime.roofline
    started = time.monotonic()
    with simulator(["--model", model, "--gpu", gpu, "--seed", "1", *regime.sim],
                   tmp_path / "sim.log") as url:  # fmt: skip
        cmd = [
            LOCUST, "-f", str(locustfile), "--headless", "--only-summary", "--host", url,
            "--stop-timeout", "5s", "--llm-run-dir", str(run_dir), "--llm-ignore-eos",
            "--llm-scrape-interval", "0.5", "--llm-roofline-model", model,
            "--llm-roofline-gpu", gpu,
            "--llm-server-metrics", f"{url}/metrics" if regime.metrics else "none",
            *regime.sweep,
        ]  # fmt: skip
        if regime.pin:
            cmd = ["taskset", "-c", "0", *cmd]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **regime.extra_env}
        proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=timeout_s, env=env, check=False)  # fmt: skip
    (tmp_path / "locust.log").write_text(proc.stdout)
    assert proc.returncode in (0, 1), proc.stdout[-3000:]
    report = subprocess.run(
        [sys.executable, "-m", "locust_llm.cli", "report", str(run_dir), "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert report.returncode in (0, 3), report.stdout[-3000:]
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    summary["_elapsed_s"] = time.monotonic() - started
    summary["_report_md"] = (out / "report.md").read_text()
    return summary


def _evidence(summary: dict[str, Any]) -> str:
    """The overall verdict's evidence, checked to quote numbers in every line."""
    evidence = summary["verdict"]["evidence"]
    assert evidence and all(NUMBER.search(e) for e in evidence), evidence
    return " ".join(evidence)


MISTRAL_4090 = ("mistral-7b", "rtx4090")

#: name -> (regime, expected overall kind, evidence fragments). Output lengths vary per request
#: where it matters so closed-loop users do not stay in lock-step (which would alias with the
#: 0.5 s scrapes of running / waiting).
REGIMES: dict[str, tuple[Regime, str, tuple[str, ...]]] = {
    # 7B on ~1 TB/s, 64-token prompts: each decode step reads the 14.5 GB of weights (~19 ms);
    # max-num-seqs 32 (told to the report) so 16 users fill half the batch.
    "decode": (
        Regime(
            sim=["--max-num-seqs", "32"],
            sweep=[
                "--llm-server-max-num-seqs",
                "32",
                "--llm-concurrency",
                "4,16",
                "--llm-stage-requests",
                "12,48",
                "--llm-max-tokens",
                "uniform:24,40",
                "--llm-input-len",
                "64",
            ],
        ),
        "decode_bound",
        ("steps memory-bound", "TPOT avg", "MBU", "source: server"),
    ),
    # 2048-token prompts, 4-token answers on an H100: one prompt fills the 2048-token step
    # budget (~55 ms of compute), so 8 users queue behind each other's prefills.
    "prefill": (
        Regime(
            sim=["--max-num-batched-tokens", "2048"],
            sweep=[
                "--llm-concurrency",
                "1,8",
                "--llm-stage-requests",
                "12,64",
                "--llm-max-tokens",
                "4",
                "--llm-input-len",
                "2048",
            ],
            roofline=("mistral-7b", "h100-sxm"),
        ),
        "prefill_bound",
        ("steps compute-bound", "prompt tokens"),
    ),
    # --gpu-memory-utilization 0.62 leaves 200 KV blocks (3,200 tokens) beside 14.5 GB of
    # weights: ~5 sequences of 512 + 64 tokens; 8 users overflow it and --oom fails them.
    # --max-model-len fits that cache, as vLLM demands before it starts.
    "oom": (
        Regime(
            sim=["--oom", "--gpu-memory-utilization", "0.62", "--max-model-len", "3200"],
            sweep=[
                "--llm-concurrency",
                "2,8",
                "--llm-stage-requests",
                "6,24",
                "--llm-max-tokens",
                "64",
                "--llm-input-len",
                "512",
            ],
        ),
        "memory_oom",
        ("out-of-memory", "GPU memory peaked"),
    ),
    # 1 and 4 users against max-num-seqs 256 and ~650 sequences of KV room: a small batch on a
    # device busy with memory-bound decode steps is decode_bound (memory is not idle: issue
    # 26), its headroom in the evidence ("of its limit", "no queue") and the first action
    "low_concurrency": (
        Regime(
            sim=["--max-num-seqs", "256"],
            sweep=[
                "--llm-server-max-num-seqs",
                "256",
                "--llm-concurrency",
                "1,4",
                "--llm-stage-requests",
                "6,32",
                "--llm-max-tokens",
                "uniform:16,48",
                "--llm-input-len",
                "64",
            ],
        ),
        "decode_bound",
        ("of its limit", "no queue", "the server has headroom"),
    ),
    # 64 KV blocks (1,024 tokens) hold ~6 sequences of 128 + 32 tokens; 24 users queue and
    # preempt each other.
    "overloaded": (
        Regime(
            sim=["--num-gpu-blocks-override", "64"],
            sweep=[
                "--llm-concurrency",
                "4,24",
                "--llm-stage-requests",
                "8,48",
                "--llm-max-tokens",
                "uniform:24,40",
                "--llm-input-len",
                "128",
            ],
        ),
        "overloaded",
        ("waiting", "preemptions"),
    ),
    # Users that burn 0.2 s of CPU per request (HEAVY_LOCUSTFILE): the client saturates.
    "client_bound": (
        Regime(
            sim=[],
            sweep=[
                "--llm-concurrency",
                "8",
                "--llm-stage-duration",
                "7",
                "--llm-max-tokens",
                "16",
                "--llm-input-len",
                "64",
            ],
            locustfile=HEAVY_LOCUSTFILE,
        ),
        "client_bound",
        ("CPU",),
    ),
    # The decode-bound server again, with the /metrics scrape switched off.
    "no_telemetry": (
        Regime(
            sim=["--max-num-seqs", "32"],
            sweep=[
                "--llm-concurrency",
                "4,16",
                "--llm-stage-requests",
                "12,48",
                "--llm-max-tokens",
                "uniform:24,40",
                "--llm-input-len",
                "64",
            ],
            metrics=False,
        ),
        # missing signals are not "not saturated": the resource model on client timings
        # names the bound, says it is client-side evidence, and its confidence is low
        "decode_bound",
        ("decided on client-side evidence", "MBU", "source: model"),
    ),
}


#: a worker's CPU at or above this share of a core is the client's limit (the verdict's own line)
CLIENT_CPU = Thresholds().client_cpu


@pytest.mark.parametrize("name", list(REGIMES))
def test_regime_verdict(tmp_path: Path, name: str) -> None:
    regime, kind, fragments = REGIMES[name]
    for attempt in range(3):
        (tmp_path / f"attempt{attempt}").mkdir()
        summary = run_regime(tmp_path / f"attempt{attempt}", regime)
        if kind == "client_bound" and summary["verdict"]["kind"] != "client_bound":
            # the burning client wanted a core and a busy host gave it less: the report says so
            # (a caveat; more workers would share the same cores) and keeps the server's
            # verdict, which says nothing of this regime; run it again (at most twice)
            stage = summary["stages"][0]
            took = (stage["worker_cpu_demand_max"], stage["worker_cpu_max"])
            assert took[0] >= CLIENT_CPU > took[1], summary["_report_md"]
            assert "quieter host" in summary["_report_md"], summary["_report_md"]
            continue
        if kind == "client_bound" or summary["verdict"]["kind"] != "client_bound":
            break
        # a busy host starved the load generator itself: that verdict rests on what was
        # measured (CPU demand, or tokens read late by the kernel's stamps), so it is right
        # for that run and says nothing of the server; run the regime again (at most twice)
        assert summary["verdict"]["rule"] == "client_cpu", summary["_report_md"]
        assert re.search(r"CPU|after the kernel received", _evidence(summary)), _evidence(summary)
    got = summary["verdict"]["kind"]
    if name == "no_telemetry":
        # client timings alone: the resource model names the bound (bandwidth, a decode batch
        # of 16); whether 4 -> 16 users still "scales" (low_concurrency) or not (decode_bound)
        # varies run to run, the cause does not
        assert summary["verdict"]["cause"] == "bandwidth_bound_decode", summary["_report_md"]
        assert summary["verdict"]["confidence"] == "low"
        assert got in ("decode_bound", "low_concurrency"), f"{name}: {got}"
    else:
        assert got == kind, f"{name}: {got}\n{summary['_report_md']}"
    text = _evidence(summary)
    for fragment in fragments:
        assert fragment in text, text
    assert summary["verdict"]["actions"]
