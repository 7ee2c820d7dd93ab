"""The Locust user end to end (Locust in a subprocess, a small streaming server in this one).

Exactly one record per request, in one process and across workers; merged live histograms agree
with the raw records; a server without usage gives estimated token counts; the API key never
reaches the run dir or the log.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, run_distributed, run_locust
from fake_openai import FakeConfig, fake_openai_server

from locust_llm.client.kernel_transport import kernel_stamps_available

pytestmark = pytest.mark.slow

SECRET = "sk-test-SECRET-0123456789"


def _locust_requests(output: str, name: str = "/v1/chat/completions") -> int:
    """Locust's own request count for ``name`` from its final end-of-run table."""
    counts = [int(parts[2]) for parts in map(str.split, output.splitlines())
              if len(parts) > 3 and parts[0] == "POST" and parts[1] == name]  # fmt: skip
    assert counts, f"no Locust row for {name} in output:\n{output[-2000:]}"
    # the last table is the percentile table (its last column is the count); the one before
    # it is the final request table
    return counts[-2]


def _llm_csv(run_dir: Path) -> dict[str, dict[str, str]]:
    with (run_dir / "llm_stats.csv").open() as f:
        return {row["Name"]: row for row in csv.DictReader(f)}


def test_single_process_records_match_locust_and_histograms(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with fake_openai_server(FakeConfig(tokens=12, interval_s=0.004)) as url:
        out = run_locust([
            "-f", "locustfiles/chat.py", "--host", url, "--headless", "-u", "5", "-r", "5",
            "-t", "3s", "--stop-timeout", "5", "--llm-run-dir", str(run_dir),
            "--llm-api-key", SECRET,
        ])  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    records = pd.read_parquet(run_dir / "requests.parquet")
    assert len(records) == _locust_requests(out.stdout) > 20
    assert records.request_id.is_unique and records.ok.all()
    assert (records.output_tokens == 12).all() and not records.tokens_estimated.any()
    assert (records.input_tokens == 7).all() and not records.input_tokens_estimated.any()
    # live (histogram) percentiles agree with the exact percentiles of the raw records
    row = _llm_csv(run_dir)["/v1/chat/completions"]
    assert int(row["Requests"]) == len(records)
    for col, field, q in [
        ("TTFT p50 (ms)", "ttft_s", 50),
        ("TTFT p99 (ms)", "ttft_s", 99),
        ("TPOT p50 (ms)", "tpot_s", 50),
        ("E2E p99 (ms)", "e2e_s", 99),
    ]:
        exact = np.percentile(records[field], q) * 1e3
        assert float(row[col]) == pytest.approx(exact, rel=0.01), col
    # the secret is nowhere
    assert SECRET not in out.stdout
    for path in run_dir.iterdir():
        assert SECRET.encode() not in path.read_bytes(), path.name
    info = json.loads((run_dir / "run.json").read_text())
    assert "***" in info["command"] and info["model"] == "fake-model"


def test_server_without_usage_gives_estimated_tokens(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    cfg = FakeConfig(tokens=6, interval_s=0.002, usage=False, reasoning_tokens=2)
    with fake_openai_server(cfg) as url:
        out = run_locust([
            "-f", "locustfiles/chat.py", "--host", url, "--headless", "-u", "2", "-r", "2",
            "-t", "2s", "--stop-timeout", "5", "--llm-run-dir", str(run_dir),
        ])  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    records = pd.read_parquet(run_dir / "requests.parquet")
    assert len(records) > 5 and records.tokens_estimated.all()
    assert (records.output_tokens == 8).all()  # 2 reasoning + 6 content chunks
    # TTFT is taken on the reasoning token: never after the first content token, and before it
    # unless both tokens' bytes arrived merged in one segment (the kernel transport then stamps
    # both with that segment's arrival; docs/timing.md)
    assert (records.ttfc_s >= records.ttft_s).all()
    assert (records.ttfc_s > records.ttft_s).mean() > 0.5


def test_master_and_two_workers_lose_nothing(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with fake_openai_server(FakeConfig(tokens=10, interval_s=0.005)) as url:
        code, output = run_distributed(
            "locustfiles/chat.py",
            ["--host", url, "-u", "6", "-r", "6", "-t", "4s", "--stop-timeout", "5",
             "--llm-run-dir", str(run_dir)],
            workers=2, worker_cwd=tmp_path,
        )  # fmt: skip
    assert code == 0, output[-3000:]
    records = pd.read_parquet(run_dir / "requests.parquet")
    assert len(records) == _locust_requests(output) > 20
    assert records.request_id.is_unique and records.worker_id.nunique() == 2
    if kernel_stamps_available():  # the workers' batches carry the send stamp to the master
        done = records[records.ok]
        assert len(done) > 20 and (done.sent_s > 0).all() and (done.sent_s < done.e2e_s).all()
    info = json.loads((run_dir / "run.json").read_text())
    assert len(info["workers"]) == 2 and not info["lost_workers"]
    row = _llm_csv(run_dir)["/v1/chat/completions"]
    assert int(row["Requests"]) == len(records)
    exact = np.percentile(records["tpot_s"], 50) * 1e3
    assert float(row["TPOT p50 (ms)"]) == pytest.approx(exact, rel=0.01)


def test_unwritable_run_dir_fails_before_any_load(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    with fake_openai_server(FakeConfig()) as url:
        started = time.monotonic()
        out = run_locust([
            "-f", "locustfiles/chat.py", "--host", url, "--headless", "-u", "1", "-t", "5s",
            "--llm-run-dir", str(blocker / "run"),
        ], timeout=60)  # fmt: skip
    assert out.returncode == 2 and "not writable" in out.stdout
    assert time.monotonic() - started < 5
    assert "/v1/chat/completions" not in out.stdout.split("not writable")[-1].split("Type")[0]


def test_every_option_parses_and_is_used() -> None:
    """Each --llm-* option the plugin reads raw exists (a typo would crash every run at start),
    and the ClientOptions field of each is read somewhere past its declaration."""
    import re

    from locust_llm.options import table as options

    declared = set(vars(options.defaults()))
    read = set(re.findall(r"(?:opts|options)\.(llm_[a-z_]+)\b", _all_sources()))
    assert read <= declared, sorted(read - declared)
    sources = _all_sources()  # a field is declared as `name: type`, read as `.name`
    unused = [o.flag for o in options.OPTIONS if not re.search(rf"\.{o.field_name}\b", sources)]
    assert not unused, f"declared but never read: {unused}"


def _all_sources() -> str:
    return "\n".join(p.read_text() for p in (ROOT / "locust_llm").rglob("*.py"))
