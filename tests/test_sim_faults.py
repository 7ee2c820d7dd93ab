"""Every injected fault behaves as declared, over real sockets."""

from __future__ import annotations

import http.client
import itertools
import json
import socket
import time
from urllib.parse import urlparse

import pytest

from locust_llm.sim.testing import running_sim
from locust_llm.sim.trace import read_trace

FAST = {"step_overhead_s": 0.002, "zero_cost": True}
BODY = {
    "messages": [{"role": "user", "content": "x"}],
    "max_tokens": 6,
    "ignore_eos": True,
    "stream": True,
}


def request(url: str) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse, float]:
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    t0 = time.monotonic()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(BODY))
    return conn, conn.getresponse(), t0


@pytest.mark.parametrize(("fault", "status"), [("http500", 500), ("503", 503), ("http429", 429)])
def test_http_error_faults(fault: str, status: int, tmp_path) -> None:
    trace = tmp_path / "t.jsonl"
    with running_sim(faults=[f"{fault}:1:7"], trace_path=str(trace), **FAST) as url:
        conn, resp, _ = request(url)
        body = json.loads(resp.read())
        conn.close()
    assert resp.status == status and body["error"]["code"] == status
    if status == 429:
        assert resp.getheader("Retry-After") == "7"
    (record,) = read_trace(trace)
    assert record["status"] == status and record["outcome"].startswith("fault:")


def test_disconnect_mid_stream() -> None:
    with running_sim(faults=["disconnect:1:3"], **FAST) as url:
        conn, resp, _ = request(url)
        assert resp.status == 200
        with pytest.raises(http.client.IncompleteRead) as info:
            resp.read()
        conn.close()
    data = info.value.partial.decode()
    assert data.count('"content":') == 4  # role chunk + 3 tokens, then the cut
    assert "[DONE]" not in data


def test_malformed_chunk() -> None:
    with running_sim(faults=["malformed:1:2"], **FAST) as url:
        conn, resp, _ = request(url)
        events = [e[6:] for e in resp.read().decode().split("\n\n") if e.startswith("data: ")]
        conn.close()
    bad = []
    for e in events[:-1]:
        try:
            json.loads(e)
        except ValueError:
            bad.append(e)
    assert len(bad) == 1 and events[-1] == "[DONE]"
    # chunk 2 (the second token) is the broken one; the others still count 5 tokens
    assert sum(1 for e in events if '"content":" ' in e) == 5


def raw_stream(url: str) -> list[tuple[float, bytes]]:
    """(arrival time, bytes) of every recv of one streamed answer, until its end."""
    u = urlparse(url)
    body = json.dumps(BODY).encode()
    got = []
    with socket.create_connection((u.hostname, u.port), timeout=5) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%b"
            % (len(body), body)
        )
        while not got or not got[-1][1].endswith(b"0\r\n\r\n"):
            data = s.recv(65536)
            if not data:
                break
            got.append((time.monotonic(), data))
    return got


def test_stall_then_resume() -> None:
    with running_sim(faults=["stall:1:0.4"], **FAST) as url:
        got = raw_stream(url)
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(got)]
    assert b'"content":" ' in got[0][1]  # the first token came at once
    assert max(gaps) >= 0.38
    assert b"[DONE]" in got[-1][1]


def test_slow_first_byte() -> None:
    with running_sim(faults=["slow_first_byte:1:0.4"], **FAST) as url:
        u = urlparse(url)
        body = json.dumps(BODY).encode()
        with socket.create_connection((u.hostname, u.port), timeout=5) as s:
            t0 = time.monotonic()
            s.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%b"
                % (len(body), body)
            )
            first = s.recv(1)
            waited = time.monotonic() - t0
    assert first == b"H" and 0.38 <= waited < 2.0


def test_fault_rate_is_respected_and_seeded() -> None:
    def statuses(seed: int) -> list[int]:
        with running_sim(faults=["http503:0.3"], seed=seed, **FAST) as url:
            u = urlparse(url)
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
            out = []
            for _ in range(60):
                conn.request(
                    "POST", "/v1/chat/completions", body=json.dumps({**BODY, "stream": False})
                )
                resp = conn.getresponse()
                resp.read()
                out.append(resp.status)
            conn.close()
            return out

    first = statuses(5)
    assert first == statuses(5)
    assert set(first) == {200, 503} and 8 <= first.count(503) <= 30
