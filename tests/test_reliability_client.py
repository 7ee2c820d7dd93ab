"""The client against servers we did not write (the standard library's, misbehaving on purpose).

* TLS with a self-signed certificate made by openssl: refused by default with a clear record,
  accepted with ``--llm-insecure`` (model discovery too) or ``--llm-ca-bundle``;
* a server echoing the Authorization header and header values in its error body: no secret in
  any artifact (records, run.json, Locust's CSVs and HTML report, stdout/stderr), even with
  abbreviated flags;
* a 200 answer that is HTML, plain JSON or binary: ``bad_payload`` naming the content type
  and quoting the first bytes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from cluster_utils import LOCUST, ROOT
from reliability_servers import (
    EchoSecrets,
    Streaming,
    answering,
    self_signed,
    serving,
    tls_context,
)

pytestmark = pytest.mark.slow


def _locust(
    url: str, run_dir: Path, *extra: str, requests: int = 3
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LOCUST, "-f", "locustfiles/sweep.py", "--headless", "--host", url,
         "--llm-concurrency", "1", "--llm-stage-requests", str(requests), "--llm-run-dir",
         str(run_dir), "--llm-server-metrics", "none", "--stop-timeout", "5", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=90, check=False,
    )  # fmt: skip


def _records(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "requests.parquet")


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


def test_tls_self_signed_is_refused_by_default(
    certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    with serving(Streaming, tls_context(*certificate)) as url:
        out = _locust(url, tmp_path / "run", "--llm-model", "m")
    records = _records(tmp_path / "run")
    assert len(records) == 3 and (records["error_kind"] == "connect").all(), out.stderr[-2000:]
    assert records["error_message"].str.contains("certificate").all()
    assert records["error_message"].str.contains("--llm-ca-bundle").all()


@pytest.mark.parametrize("how", ["insecure", "ca-bundle"])
def test_tls_self_signed_accepted_with_insecure_or_its_ca(
    how: str, certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    flag = ["--llm-insecure"] if how == "insecure" else ["--llm-ca-bundle", str(certificate[0])]
    with serving(Streaming, tls_context(*certificate)) as url:
        out = _locust(url, tmp_path / "run", *flag)  # no --llm-model: discovery over TLS too
    assert out.returncode == 0, out.stderr[-3000:]
    records = _records(tmp_path / "run")
    assert len(records) == 3 and records["ok"].all(), records["error_message"].tolist()
    assert set(records["model"]) == {"m"}  # discovered through /v1/models
    assert (records["output_tokens"] == 2).all()


def test_a_missing_ca_bundle_is_refused_at_start(tmp_path: Path) -> None:
    out = _locust("https://127.0.0.1:9", tmp_path / "run", "--llm-ca-bundle", "/no/such.pem")
    assert out.returncode == 2 and "--llm-ca-bundle /no/such.pem: no such file" in out.stderr


def test_a_server_echoing_secrets_leaves_none_in_any_artifact(tmp_path: Path) -> None:
    key, header_value = "sk-ECHO-SECRET-9f3a", "hush-tenant-4711"
    run_dir, csv_prefix, html = tmp_path / "run", tmp_path / "csv" / "locust", tmp_path / "r.html"
    csv_prefix.parent.mkdir()
    with serving(EchoSecrets) as url:
        out = _locust(
            url, run_dir, "--llm-model", "m", "--llm-api-k", key,  # abbreviated flags
            "--llm-head", f"X-Tenant: {header_value}", "--csv", str(csv_prefix),
            "--html", str(html), "--loglevel", "DEBUG",
        )  # fmt: skip
    records = _records(run_dir)
    assert len(records) == 3 and (records["error_kind"] == "http_4xx").all()
    # the echo is there, masked: the server did send the secrets back
    assert records["error_message"].str.contains("Authorization=Bearer \\*\\*\\*").all()
    assert records["error_message"].str.contains("X-Tenant=\\*\\*\\*").all()
    artifacts = {"stdout": out.stdout, "stderr": out.stderr}
    for path in [*run_dir.iterdir(), *csv_prefix.parent.iterdir(), html]:
        artifacts[str(path)] = path.read_bytes().decode("utf-8", "replace")
    assert len(artifacts) >= 6
    for where, text in artifacts.items():
        assert key not in text and header_value not in text, f"secret in {where}"
    command = json.loads((run_dir / "run.json").read_text())["command"]
    assert "***" in command


@pytest.mark.parametrize(
    ("content_type", "body", "expected"),
    [
        ("text/html; charset=utf-8", b"<html><body>Bad Gateway</body></html>",
         "expected text/event-stream, got text/html: b'<html><body>Bad Gateway"),
        ("application/json", b'{"choices": [{"message": {"content": "hi"}}]}',
         "expected text/event-stream, got application/json: b'{\"choices\""),
        ("application/octet-stream", bytes(range(1, 40)),
         "expected text/event-stream, got application/octet-stream: b'\\x01\\x02"),
    ],
    ids=["html", "json", "binary"],
)  # fmt: skip
def test_a_200_that_is_not_a_stream_is_bad_payload(
    content_type: str, body: bytes, expected: str, tmp_path: Path
) -> None:
    with serving(answering(200, content_type, body)) as url:
        _locust(url, tmp_path / "run", "--llm-model", "m")
    records = _records(tmp_path / "run")
    assert len(records) == 3 and (records["error_kind"] == "bad_payload").all()
    assert records["error_message"].str.startswith(expected).all(), records["error_message"][0]
