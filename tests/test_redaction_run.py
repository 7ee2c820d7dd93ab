"""Redaction end to end: a real server on 127.0.0.1 echoes the API key back (the token alone,
JSON-escaped, URL-encoded, in a JSON error) at offsets that put it across every cut; the real
client, Locust and ``locust-llm run`` handle it; no form of the key, nor of the host's
credentials, is in anything the run writes: requests.parquet, locust.log, run.json, the report,
Locust's CSVs and HTML report, stdout and stderr.

The key holds a double and a single quote, a backslash and a non-ASCII (Latin-1) letter, and is
given the way the probe that found the leak gave it: ``--llm-header 'Authorization: Bearer KEY'``
(masked once only as the whole header value), and as ``--api-key``.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
from pathlib import Path
from urllib.parse import quote

import pandas as pd
import pytest
from cluster_utils import LOCUST, LOCUST_LLM, ROOT
from redaction_forms import assert_no_form
from reliability_servers import Quiet, serving

from locust_llm.client.stream import ERROR_BODY_LIMIT, MESSAGE_LIMIT

pytestmark = pytest.mark.slow

KEY = "sk-\"q\\ü'E2E-7k"
PASSWORD = "pw-E2E-5ecret"
REQUESTS = 10
#: where the echoed key starts in the body: at once, across the record's message, across the
#: error body's limit
PADS = (0, MESSAGE_LIMIT - 24, ERROR_BODY_LIMIT - 6)


class EchoToken(Quiet):
    """Answers every POST 401 with the bearer token it received, alone, in one of its forms."""

    served = itertools.count()

    def do_POST(self) -> None:
        self.read_body()
        token = self.headers.get("Authorization", "").removeprefix("Bearer ")
        n = next(self.served)
        pad = "." * PADS[n % len(PADS)]
        shown = (
            f"{pad}invalid token {token} end",
            f"{pad}invalid token {json.dumps(token)[1:-1]} end",
            f"{pad}invalid token {json.dumps(token, ensure_ascii=False)[1:-1]} end",
            f"{pad}invalid token {quote(token)} end",
            json.dumps({"error": {"message": f"{pad}invalid token {token}"}}),
        )[n % 5]
        self.reply(401, "text/plain; charset=utf-8", shown.encode("utf-8"))


def _artifacts(out: subprocess.CompletedProcess[str], *folders: Path) -> dict[str, str]:
    texts = {"stdout": out.stdout, "stderr": out.stderr}
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file():
                texts[str(path)] = path.read_bytes().decode("utf-8", "replace")
    return texts


def _check(texts: dict[str, str], run_dir: Path) -> pd.DataFrame:
    records = pd.read_parquet(run_dir / "requests.parquet")  # compressed: read its text too
    texts["requests.parquet rows"] = records.astype(str).to_csv()
    for where, text in texts.items():
        for secret in (KEY, PASSWORD, f"alice:{PASSWORD}"):
            assert_no_form(text, secret, where)
    return records


def _echoed(records: pd.DataFrame) -> None:
    """The server did echo the key: the answers padded by 0 show where it was masked (the
    others are cut before it, or show only the filler)."""
    messages = records["error_message"]
    shown = messages[messages.str.contains("invalid token \\*\\*\\*")]
    assert len(shown) >= REQUESTS // len(PADS), messages.tolist()
    assert messages.str.startswith("HTTP 401: ").all()


def test_locust_run_with_an_echoing_server_leaks_no_form_of_the_key(tmp_path: Path) -> None:
    run_dir, csv_dir, html = tmp_path / "run", tmp_path / "csv", tmp_path / "report.html"
    csv_dir.mkdir()
    with serving(EchoToken) as url:
        host = url.replace("http://", f"http://alice:{PASSWORD}@")
        out = subprocess.run(
            [LOCUST, "-f", "locustfiles/sweep.py", "--headless", "--host", host,
             "--llm-concurrency", "1", "--llm-stage-requests", str(REQUESTS), "--llm-run-dir",
             str(run_dir), "--llm-server-metrics", "none", "--llm-model", "m",
             "--stop-timeout", "5", "--llm-header", f"Authorization: Bearer {KEY}",
             "--csv", str(csv_dir / "locust"), "--html", str(html), "--loglevel", "DEBUG"],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    texts = _artifacts(out, run_dir, csv_dir)
    texts[str(html)] = html.read_text()
    records = _check(texts, run_dir)
    assert len(records) == REQUESTS and (records["error_kind"] == "http_4xx").all()
    _echoed(records)
    assert (records["error_message"].str.len() <= MESSAGE_LIMIT).all()
    failures = (csv_dir / "locust_failures.csv").read_text()
    assert "invalid token ***" in failures  # Locust's failures table got the masked text
    info = json.loads((run_dir / "run.json").read_text())
    assert info["host"].startswith("http://***@127.0.0.1:")


def test_locust_llm_run_leaks_no_form_of_the_key_nor_the_host_credentials(
    tmp_path: Path,
) -> None:
    run_dir, stats = tmp_path / "run", tmp_path / "stats"
    stats.mkdir()
    env = {**os.environ, "LOCUST_HOST": ""}
    with serving(EchoToken) as url:
        host = url.replace("http://", f"http://alice:{PASSWORD}@")
        out = subprocess.run(
            [LOCUST_LLM, "run", "--host", host, "--api-key", KEY, "--model", "m",
             "--server-metrics", "none", "--concurrency", "1", "--stage-requests",
             str(REQUESTS), "--workers", "1", "--out", str(run_dir), "--timeout", "120",
             "--", "--csv", str(stats / "locust"), "--loglevel", "DEBUG"],
            cwd=ROOT, capture_output=True, text=True, timeout=240, check=False, env=env,
        )  # fmt: skip
    assert out.returncode in (0, 1, 3), out.stdout[-2000:] + out.stderr[-2000:]
    records = _check(_artifacts(out, run_dir, stats), run_dir)
    assert len(records) == REQUESTS and (records["error_kind"] == "http_4xx").all()
    _echoed(records)
    assert "locust-llm run: http://***@127.0.0.1:" in out.stdout  # the announce line
    assert (stats / "locust_failures.csv").is_file() and (run_dir / "locust.log").is_file()
