"""Connections, request ids and prompts against a raw-socket server written here (Locust in a
subprocess, the server in this process).

The server speaks just enough HTTP/1.1 to stream a chat answer and can behave like llama.cpp's
``llama-server``: close the connection after every response without ``Connection: close``.
It logs every request it received, so "sent once" is checked on the server's side.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_distributed, run_locust

from locust_llm.rundir.layout import read_run_info

pytestmark = pytest.mark.slow

SWEEP = "locustfiles/sweep.py"


@dataclass
class Policy:
    close_after: bool = False  # close shortly after each response, without saying so
    close_delay_s: float = 0.05  # (llama-server): the client's next request is already sent
    say_close: bool = False  # send Connection: close, then close
    cut_reused: bool = False  # on a connection's 2nd+ request: head and one chunk, then close
    empty_400: bool = False  # answer 400 with an empty body
    requests: list[dict] = field(default_factory=list)  # what arrived: headers, body, conn
    connections: int = 0


def _read_request(conn: socket.socket, buf: bytearray) -> tuple[dict[str, str], bytes] | None:
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        data = conn.recv(65536)
        if not data:
            return None
        rest += data
    buf[:] = rest[length:]
    return headers, rest[:length]


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _event(obj: object) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def _serve_connection(conn: socket.socket, policy: Policy, index: int) -> None:
    buf = bytearray()
    served = 0
    with conn:
        while True:
            got = _read_request(conn, buf)
            if got is None:
                return
            headers, body = got
            policy.requests.append({"headers": headers, "body": json.loads(body), "conn": index})
            if policy.empty_400:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                served += 1
                continue
            close = b"Connection: close\r\n" if policy.say_close else b""
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n" + close + b"\r\n"
            )
            delta = {"choices": [{"index": 0, "delta": {"content": "tok"}}]}
            if policy.cut_reused and served >= 1:
                conn.sendall(_chunk(_event(delta)))
                return  # a byte of the answer arrived: the client must not resend
            for _ in range(3):
                conn.sendall(_chunk(_event(delta)))
            usage = {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 3}}
            conn.sendall(_chunk(_event(usage)) + _chunk(_event(b"[DONE]")) + b"0\r\n\r\n")
            served += 1
            if policy.say_close:
                return
            if policy.close_after:  # whatever the client sends meanwhile is never answered
                time.sleep(policy.close_delay_s)
                return


@contextmanager
def raw_server(policy: Policy) -> Iterator[str]:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def accept_loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(30)
            policy.connections += 1
            thread = threading.Thread(
                target=_serve_connection, args=(conn, policy, policy.connections), daemon=True
            )
            thread.start()
            threads.append(thread)

    acceptor = threading.Thread(target=accept_loop, daemon=True)
    acceptor.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        acceptor.join(5)
        listener.close()
        for thread in threads:
            thread.join(5)


def _sweep(url: str, run_dir: Path, requests: int, *extra: str) -> pd.DataFrame:
    out = run_locust([
        "-f", SWEEP, "--host", url, "--headless", "--only-summary", "--stop-timeout", "10s",
        "--llm-run-dir", str(run_dir), "--llm-concurrency", "2", "--llm-stage-requests",
        str(requests), "--llm-model", "m", "--llm-server-metrics", "none", *extra,
    ], timeout=90)  # fmt: skip
    assert out.returncode in (0, 1), out.stdout[-3000:]
    assert "Traceback" not in out.stdout, out.stdout[-3000:]
    return pd.read_parquet(run_dir / "requests.parquet")


def _ids(policy: Policy) -> list[str]:
    return [r["headers"].get("x-request-id", "") for r in policy.requests]


def test_a_server_that_closes_each_connection_silently_costs_no_failure(tmp_path: Path) -> None:
    policy = Policy(close_after=True)
    with raw_server(policy) as url:
        records = _sweep(url, tmp_path / "run", 20)
    assert len(records) == 20 and records.ok.all(), records.error_message.unique()
    assert sorted(_ids(policy)) == sorted(records.request_id)  # each sent exactly once
    users = records.user_id.nunique()
    # requests sent on a kept connection the server then closed were resent on a fresh one
    reconnects = read_run_info(tmp_path / "run").extra["reconnects"]
    assert 1 <= reconnects <= 20 - users
    assert policy.connections >= 20


def test_connection_close_is_honoured_without_any_resend(tmp_path: Path) -> None:
    policy = Policy(say_close=True)
    with raw_server(policy) as url:
        records = _sweep(url, tmp_path / "run", 16)
    assert len(records) == 16 and records.ok.all(), records.error_message.unique()
    assert len(policy.requests) == 16 and policy.connections == 16
    assert "reconnects" not in read_run_info(tmp_path / "run").extra


def test_a_request_is_never_resent_once_a_byte_of_its_answer_arrived(tmp_path: Path) -> None:
    policy = Policy(cut_reused=True)
    with raw_server(policy) as url:
        records = _sweep(url, tmp_path / "run", 12)
    assert len(records) == 12
    broken = records[~records.ok]
    assert len(broken) >= 4 and (broken.error_kind == "stream_broken").all()
    assert sorted(_ids(policy)) == sorted(records.request_id)  # none sent twice
    assert "reconnects" not in read_run_info(tmp_path / "run").extra


def test_request_ids_are_uuid4_joined_to_records_and_can_be_left_out(tmp_path: Path) -> None:
    policy = Policy()
    with raw_server(policy) as url:
        records = _sweep(url, tmp_path / "run", 6)
    ids = _ids(policy)
    assert all(uuid.UUID(i).version == 4 for i in ids) and set(ids) == set(records.request_id)
    assert policy.connections == 2  # a keep-alive server: one connection per user
    quiet = Policy()
    with raw_server(quiet) as url:
        records = _sweep(url, tmp_path / "run2", 4, "--llm-no-request-id")
    assert len(quiet.requests) == 4 and _ids(quiet) == [""] * 4
    assert records.request_id.is_unique


def test_a_4xx_with_an_empty_body_says_so_and_invents_no_cause(tmp_path: Path) -> None:
    policy = Policy(empty_400=True)
    with raw_server(policy) as url:
        records = _sweep(url, tmp_path / "run", 5)
    assert len(records) == 5 and (records.error_kind == "http_4xx").all()
    assert (records.status_code == 400).all()
    assert set(records.error_message) == {"HTTP 400: (empty body)"}


def _prompts(policy: Policy) -> list[str]:
    return [json.dumps(r["body"]["messages"]) for r in policy.requests]


def test_prompts_differ_across_workers_unless_sharing_is_asked(tmp_path: Path) -> None:
    runs = {}
    for name, extra in (("distinct", []), ("shared", ["--llm-share-prompts"])):
        policy = Policy()
        with raw_server(policy) as url:
            code, output = run_distributed(
                SWEEP,
                ["--host", url, "--only-summary", "--stop-timeout", "10s", "--llm-run-dir",
                 str(tmp_path / name), "--llm-concurrency", "4", "--llm-stage-requests", "40",
                 "--llm-model", "m", "--llm-server-metrics", "none", *extra],
                workers=2, worker_cwd=tmp_path,
            )  # fmt: skip
        assert code == 0, output[-3000:]
        records = pd.read_parquet(tmp_path / name / "requests.parquet")
        assert records.worker_id.nunique() == 2 and len(records) == 40
        runs[name] = _prompts(policy)
    assert len(set(runs["distinct"])) == len(runs["distinct"]) == 40
    assert len(set(runs["shared"])) < len(runs["shared"])  # user N of each worker: same prompts
