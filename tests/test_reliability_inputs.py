"""Bad input is refused at start: one line naming the problem, exit 2, no request sent.

Each case runs the real ``locust`` command on the sweep locustfile against a loopback listener
that counts the connections it accepts: a refused run must have made none (no model discovery,
no request), printed no traceback, and named the input. ``locust-llm roofline`` and ``report``
get the same treatment for their inputs.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_utils import LOCUST, LOCUST_LLM, ROOT

from locust_llm.rundir.layout import RunInfo, write_run_info


class ConnectionCounter:
    """A loopback TCP listener that accepts, counts and closes every connection."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture(scope="module")
def counter() -> Iterator[ConnectionCounter]:
    server = ConnectionCounter()
    yield server
    server.close()


def _datasets(tmp: Path) -> dict[str, Path]:
    files = {
        "empty.jsonl": b"",
        "blank.jsonl": b"\n\n  \n",
        "binary.jsonl": bytes(range(256)) * 4,
        "utf16.jsonl": '{"prompt": "hello"}\n'.encode("utf-16"),
        "badline.jsonl": b'{"prompt": "a"}\nnot json\n',
        "nofields.json": b'[{"id": 1}]',
        "nohuman.json": b'[{"conversations": [{"from": "gpt", "value": "hi"}]}]',
    }
    out = {}
    for name, data in files.items():
        (tmp / name).write_bytes(data)
        out[name] = tmp / name
    return out


#: (extra arguments, a word the error line must hold); "@name" is a data set file
CASES: list[tuple[list[str], str]] = [
    (["--llm-dataset", "@empty.jsonl"], "no prompts"),
    (["--llm-dataset", "@blank.jsonl"], "no prompts"),
    (["--llm-dataset", "@binary.jsonl"], "not UTF-8"),
    (["--llm-dataset", "@utf16.jsonl"], "UTF-16"),
    (["--llm-dataset", "@badline.jsonl"], "badline.jsonl:2"),
    (["--llm-dataset", "@nofields.json"], "conversations"),
    (["--llm-dataset", "@nohuman.json"], "no prompts"),
    (["--llm-max-tokens", "0"], "--llm-max-tokens"),
    (["--llm-max-tokens", "uniform:5"], "uniform:5"),
    (["--llm-input-len", "-5"], "--llm-input-len"),
    (["--llm-concurrency", "0"], "--llm-concurrency"),
    (["--llm-concurrency", "a,b"], "--llm-concurrency"),
    (["--llm-stage-requests", "5,5,5"], "--llm-stage-requests"),
    (["--llm-soak", "forever"], "--llm-soak"),
    (["--llm-extra-body", "{not json"], "--llm-extra-body"),
    (["--llm-extra-body", "[1]"], "--llm-extra-body"),
    (["--llm-header", "NoColon"], "--llm-header"),
    (["--llm-scrape-interval", "0"], "--llm-scrape-interval"),
    (["--llm-stage-duration", "0"], "--llm-stage-duration"),
    (["--llm-burstiness", "-1"], "--llm-burstiness"),
    (["--llm-read-timeout", "0"], "--llm-read-timeout"),
    (["--llm-record-batch-s", "0"], "--llm-record-batch-s"),
    (["--llm-connect-timeout", "-1"], "--llm-connect-timeout"),
]


@pytest.mark.parametrize(("extra", "word"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_input_is_refused_before_any_request(
    extra: list[str], word: str, counter: ConnectionCounter, tmp_path: Path
) -> None:
    files = _datasets(tmp_path)
    args = [str(files[a[1:]]) if a.startswith("@") else a for a in extra]
    before = counter.accepted
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [LOCUST, "-f", "locustfiles/sweep.py", "--headless", "--host", counter.url,
         "--llm-concurrency", "2", "--llm-stage-duration", "5", "--llm-run-dir", str(run_dir),
         "--llm-server-metrics", "none", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output[-2000:]
    assert "Traceback" not in output, output[-3000:]
    errors = [line for line in output.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and word in errors[0] and "no load was sent" in errors[0], output
    assert counter.accepted == before, "a refused run connected to the server"
    assert not run_dir.exists() or not any(run_dir.iterdir())


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LOCUST_LLM, *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("args", "word"),
    [
        (["--weight-bits", "-4"], "--weight-bits"),
        (["--kv-bits", "0"], "--kv-bits"),
        (["--batch", "0"], "--batch"),
        (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization"),
    ],
)
def test_roofline_refuses_impossible_numbers(args: list[str], word: str) -> None:
    proc = _cli("roofline", "--model", "llama-3.1-8b", "--gpu", "h200", *args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert word in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize(
    "data", [bytes(range(64)), b"GGUF\x03\x00\x00\x00garbage"], ids=["random", "truncated"]
)
def test_roofline_refuses_a_corrupt_gguf(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(data)
    proc = _cli("roofline", "--model", str(path), "--gpu", "h200")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert str(path) in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("field", "value"),
    [("start_wall_s", "yesterday"), ("workers", "w1"), ("lost_workers", [1]), ("stages", {})],
)
def test_report_refuses_a_wrong_typed_run_json_field(
    field: str, value: object, tmp_path: Path
) -> None:
    write_run_info(tmp_path, RunInfo(run_id="r"))
    raw = json.loads((tmp_path / "run.json").read_text())
    raw[field] = value
    (tmp_path / "run.json").write_text(json.dumps(raw))
    proc = _cli("report", str(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert field in proc.stderr and "corrupt run.json" in proc.stderr, proc.stderr
