"""Send stamps: when a request's last byte went to the kernel, checked against a receiving
server's own clock and against the simulator's ground-truth arrival stamps at a burst."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from kernel_runs import traced_kernel_sweep

from locust_llm.cli import main
from locust_llm.client.http11 import Http11Client
from locust_llm.client.kernel_transport import kernel_stamps_available
from locust_llm.report.diagnosis.client_delay import host_contended
from locust_llm.report.diagnosis.thresholds import DEFAULT_THRESHOLDS

linux_only = pytest.mark.skipif(not kernel_stamps_available(), reason="needs SO_TIMESTAMPNS")

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def test_the_sent_stamp_falls_between_the_start_and_the_servers_receipt() -> None:
    """A server thread notes (perf_counter, the stamps' clock) when the whole request is in; the
    client's ``on_sent`` stamp is after the call began and no later than that receipt."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    received: list[float] = []
    body = b"x" * 200_000  # more than one send's worth on loopback: sendall loops

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            got = b""
            while not got.endswith(body):
                got += conn.recv(65536)
            received.append(time.perf_counter())
            conn.sendall(ANSWER)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = Http11Client("127.0.0.1", listener.getsockname()[1], connection_timeout=2,
                          network_timeout=2)  # fmt: skip
    sent: list[float] = []
    try:
        start = time.perf_counter()
        resp = client.request("POST", "/", body=body, on_sent=sent.append)
        assert resp.read() == b"ok"
    finally:
        client.close()
        thread.join(5)
        listener.close()
    assert len(sent) == 1 and len(received) == 1
    assert start < sent[0] <= received[0] + 0.001, (start, sent, received)


def test_a_failed_send_reports_no_sent_stamp() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens: the connect is refused before any send
    client = Http11Client("127.0.0.1", port, connection_timeout=2, network_timeout=2)
    sent: list[float] = []
    with pytest.raises(OSError):
        client.request("POST", "/", body=b"{}", on_sent=sent.append)
    assert sent == []


@linux_only
@pytest.mark.slow
def test_at_a_burst_the_send_delay_is_within_the_servers_arrival(tmp_path: Path) -> None:
    """64 users start together against the simulator: every record's sent stamp is no later
    than the simulator's arrival stamp (``time.time()`` once the request was parsed, the same
    host's clock as ``start_wall_s``), and the send delay is a real part of the gap between our
    start stamp and that arrival (a stamp taken at the start would make it ~0); the report shows
    it per stage. On the busy 2-core host it was 0.52-0.88 of it in 16 runs, and 0.29 in a
    fresh-clone run on a host then about twice as slow (a real vLLM's own inter-token median
    51 ms where it measures 20-30 ms): the rest is the simulator's own backlog, one asyncio loop
    accepting 64 connections and parsing their requests one after another, which grows as the
    host slows."""
    records, lines, run_dir = traced_kernel_sweep(tmp_path, users=64, requests=64, tokens=8)
    arrival = np.array([lines[i]["arrival"] for i in records.request_id])
    start = records.start_wall_s.to_numpy()
    send = records.sent_s.to_numpy()
    gap = arrival - start  # our start stamp to the server's: the request's way there
    assert np.isfinite(send).all() and (send > 0).all()
    late = start + send - arrival  # our sent stamp after the server had the request: impossible
    # a worker preempted between the send's return and its clock read stamps late: one such
    # on a loaded host, never more (in 6 runs printed here the latest sent stamp was 0.17-0.99
    # ms before the arrival; 8 more kept all 64 within 1 ms)
    assert (late > 0.001).sum() <= 1 and (late < 0.020).all(), np.sort(late)[-5:]
    share = send.sum() / gap.sum()
    print(f"send delay mean {send.mean() * 1e3:.2f} ms, gap mean {gap.mean() * 1e3:.2f} ms, "
          f"share {share:.2f}, median per request {np.median(send / gap):.2f}")  # fmt: skip
    assert share >= 0.15, (send.mean(), gap.mean())
    assert main(["report", str(run_dir), "--out", str(tmp_path / "report")]) in (0, 3)
    md = (tmp_path / "report" / "report.md").read_text()
    assert "send delay (start to last byte sent)" in md
    p50 = np.percentile(send * 1e3, 50)
    assert f"| {p50:.2f} | {np.percentile(send * 1e3, 99):.2f} | {send.max() * 1e3:.2f} |" in md
    # the burst's connects in every TTFT: the report says so where they are a share of it
    (row,) = pd.read_csv(tmp_path / "report" / "stages.csv").to_dict("records")
    th = DEFAULT_THRESHOLDS
    carried = p50 / 1e3 >= max(th.send_delay_min_s, th.send_delay_share * row["ttft_p50_s"])
    said = f"stage 0: requests left the client a median {p50:,.1f} ms" in md
    print(f"send delay p50 {p50:.2f} ms, TTFT p50 {row['ttft_p50_s'] * 1e3:.2f} ms, said {said}")
    assert said == (carried and not host_contended(row)), (p50, said)


def _counting_server(answers: int, *, close_first: bool = False) -> tuple[socket.socket, list]:
    """A listener thread that counts accepted connections and answers ``answers`` requests
    (``close_first``: the first connection is closed unanswered once a request came)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    accepted: list[float] = []

    def serve() -> None:
        served = 0
        while served < answers:
            conn, _ = listener.accept()
            accepted.append(time.perf_counter())
            with conn:
                while served < answers:
                    got = conn.recv(65536)
                    if not got:
                        break
                    if close_first and len(accepted) == 1:
                        break  # closed with the request unanswered: it was never processed
                    conn.sendall(ANSWER)
                    served += 1

    threading.Thread(target=serve, daemon=True).start()
    return listener, accepted


def test_preconnect_opens_the_connection_before_the_request_and_the_request_uses_it() -> None:
    from locust_llm.client.kernel_transport import KernelTransport

    listener, accepted = _counting_server(2)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    transport = KernelTransport(connect_timeout_s=2, read_timeout_s=2, insecure=False)
    try:
        assert transport.preconnect(url) is True
        deadline = time.monotonic() + 2
        while not accepted and time.monotonic() < deadline:
            time.sleep(0.005)
        assert len(accepted) == 1  # open before any request
        assert transport.preconnect(url) is False  # already open: nothing more
        starts: list[float] = []
        sent: list[float] = []
        for _ in range(2):
            resp = transport.post(url, "/", b"{}", {}, before_send=lambda: starts.append(
                time.perf_counter()), after_send=sent.append)  # fmt: skip
            assert resp.read() == b"ok"
            transport.release(url, resp)
        assert len(accepted) == 1 and len(sent) == 2  # both requests on that one connection
        assert all(0 < s - t < 0.05 for t, s in zip(starts, sent, strict=True))
    finally:
        transport.close()
        listener.close()


def test_a_preconnected_connection_the_server_closed_is_resent_once() -> None:
    from locust_llm.client.kernel_transport import KernelTransport

    listener, accepted = _counting_server(1, close_first=True)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    reconnects: list[int] = []
    transport = KernelTransport(connect_timeout_s=2, read_timeout_s=2, insecure=False,
                                on_reconnect=lambda: reconnects.append(1))  # fmt: skip
    try:
        transport.preconnect(url)
        resp = transport.post(url, "/", b"{}", {})
        assert resp.read() == b"ok"
        transport.release(url, resp)
    finally:
        transport.close()
        listener.close()
    assert len(accepted) == 2 and reconnects == [1]


def test_geventhttpclient_cannot_preconnect() -> None:
    from locust_llm.client.transport import Transport

    transport = Transport(connect_timeout_s=2, read_timeout_s=2, insecure=False)
    try:
        assert transport.preconnect("http://127.0.0.1:9") is False  # nothing opened, no error
    finally:
        transport.close()


@linux_only
@pytest.mark.slow
def test_with_preconnect_the_send_delay_leaves_the_connect_out(tmp_path: Path) -> None:
    """64 users with ``--llm-preconnect`` against the simulator: every request ok, none resent,
    and the send delay (start stamp to the final send's return: no connect, no wait in the
    worker in between) under a millisecond at the median."""
    records, _, run_dir = traced_kernel_sweep(
        tmp_path, users=64, requests=128, tokens=8, extra=["--llm-preconnect"]
    )
    info = json.loads((run_dir / "run.json").read_text())
    assert "reconnects" not in json.dumps(info)  # none resent (counted only when some were)
    assert np.median(records.sent_s) < 0.001, records.sent_s.describe()


@linux_only
@pytest.mark.slow
def test_the_burst_bench_runs_and_counts_every_request(tmp_path: Path) -> None:
    """bench/send_side.py at a small burst: every request matched to the trace, the floor's
    ratio 1, and the preconnected user's send delay under a millisecond."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "bench/send_side.py", "--streams", "8", "--runs", "1",
                          "--clients", "raw,ours-preconnect", "--json", str(tmp_path / "s.json"),
                          "--work", str(tmp_path / "work")], cwd=root, capture_output=True,
                         text=True, timeout=300, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {r["client"]: r for r in json.loads((tmp_path / "s.json").read_text())["rows"]}
    assert all(r["matched"] == r["requests"] == 8 for r in rows.values())
    assert rows["raw"]["ratio_to_raw"] == 1.0
    assert rows["ours-preconnect"]["send_mean_ms"] < 1.0
