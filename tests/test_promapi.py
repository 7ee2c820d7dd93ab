"""Reading signals back from Prometheus' HTTP API: canned responses, errors, a real Prometheus."""

from __future__ import annotations

import itertools
import json
import math
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from test_telemetry_fakes import PHASE_S, ExporterServer, FakeExporter

from locust_llm.errors import InputError
from locust_llm.telemetry.promapi import MAX_STEPS_PER_QUERY, default_query, read_prometheus
from locust_llm.telemetry.scraper import TelemetryScraper
from locust_llm.telemetry.vocabularies import known_metrics


def matrix(*series: dict) -> bytes:
    return json.dumps(
        {"status": "success", "data": {"resultType": "matrix", "result": list(series)}}
    ).encode()


def canned(body: bytes, calls: list | None = None):
    def post(url: str, form: dict[str, str], timeout: float) -> bytes:
        if calls is not None:
            calls.append((url, form))
        return body

    return post


def test_maps_series_per_instance_and_time() -> None:
    body = matrix(
        {
            "metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "instance": "h:9400"},
            "values": [[100, "50"], [101, "NaN"]],
        },
        {
            "metric": {"__name__": "DCGM_FI_DEV_FB_USED", "gpu": "0", "instance": "h:9400"},
            "values": [[100, "1024"]],
        },
        {
            "metric": {"__name__": "DCGM_FI_DEV_FB_FREE", "gpu": "0", "instance": "h:9400"},
            "values": [[100, "1024"]],
        },
        {"metric": {"__name__": "up", "instance": "h:9400", "job": "gpu"}, "values": [[100, "1"]]},
        {
            "metric": {"__name__": "vllm:num_requests_running", "instance": "s:8000"},
            "values": [[100, "7"]],
        },
    )
    calls: list = []
    frame = read_prometheus("http://prom:9090/", 100, 101, 1, post=canned(body, calls))
    assert calls[0][0] == "http://prom:9090/api/v1/query_range"
    assert calls[0][1]["query"] == default_query()
    rows = {(r.time_s, r.source, r.signal, r.gpu): r.value for r in frame.itertuples()}
    assert rows[(100.0, "h:9400", "gpu_util", "0")] == 0.5
    assert math.isnan(rows[(101.0, "h:9400", "gpu_util", "0")])
    assert rows[(100.0, "h:9400", "mem_total_bytes", "0")] == 2048 * 1024**2
    assert rows[(100.0, "h:9400", "scrape_up", "")] == 1.0
    assert rows[(100.0, "s:8000", "running", "")] == 7.0
    assert len(rows) == 6


def test_default_query_names_every_known_metric() -> None:
    query = default_query()
    assert all(name in query for name in known_metrics()) and query.endswith('|up"}')


def test_long_windows_are_split_below_prometheus_point_limit() -> None:
    calls: list = []
    read_prometheus("http://p:9090", 0, 25_000, 1, post=canned(matrix(), calls))
    windows = [(float(f["start"]), float(f["end"])) for _, f in calls]
    assert windows[0][0] == 0 and windows[-1][1] == 25_000
    assert all(hi - lo + 1 <= MAX_STEPS_PER_QUERY for lo, hi in windows)
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(windows))


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"<html>proxy</html>", "not JSON"),
        (json.dumps({"status": "error", "error": "parse error"}).encode(), "parse error"),
        (
            json.dumps(
                {"status": "success", "data": {"resultType": "vector", "result": []}}
            ).encode(),
            "expected a matrix",
        ),
    ],
)
def test_bad_responses_are_one_line_input_errors(body: bytes, match: str) -> None:
    with pytest.raises(InputError, match=match) as info:
        read_prometheus("http://p:9090", 0, 10, 1, post=canned(body))
    assert "\n" not in str(info.value)


def test_bad_arguments_and_unreachable_server() -> None:
    with pytest.raises(InputError, match="expected an http"):
        read_prometheus("p:9090", 0, 1)
    with pytest.raises(InputError, match="start <= end"):
        read_prometheus("http://p:9090", 10, 1)
    with pytest.raises(InputError, match="finite"):
        read_prometheus("http://p:9090", 0, math.inf)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(InputError, match="unreachable"):
        read_prometheus(f"http://127.0.0.1:{port}", 0, 10, 1, timeout_s=1)


# -- a real Prometheus ---------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_ready(url: str, proc: subprocess.Popen, limit_s: float = 15.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prometheus exited with {proc.returncode}; see its log")
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError("prometheus not ready in time")


def _wait_first_scrapes(url: str, targets: int, limit_s: float = 12.0) -> None:
    """Prometheus' scrape manager starts its loops up to ~5 s after it reports ready."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url + "/api/v1/query?query=up", timeout=2) as response:
            if len(json.loads(response.read())["data"]["result"]) >= targets:
                return
        time.sleep(0.2)
    raise RuntimeError("prometheus did not scrape the targets in time")


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_real_prometheus_agrees_with_direct_scrapes(tmp_path: Path) -> None:
    binary = shutil.which("prometheus")
    assert binary, "the Debian package 'prometheus' is a test dependency"
    exporters = [ExporterServer(FakeExporter("ours")), ExporterServer(FakeExporter("dcgm"))]
    port = _free_port()
    prom_url = f"http://127.0.0.1:{port}"
    targets = ", ".join(f"'127.0.0.1:{e.port}'" for e in exporters)
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
        f"scrape_configs:\n  - job_name: fake\n    static_configs:\n      - targets: [{targets}]\n"
    )
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=1h",
            "--log.level=error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    scraper = TelemetryScraper([e.url for e in exporters], 0.5)
    try:
        _wait_ready(prom_url, proc)
        _wait_first_scrapes(prom_url, len(exporters))
        start = time.time()
        scraper.start()
        time.sleep(6.0)
        scraper.stop()
        end = time.time()
        prom = read_prometheus(prom_url, start, end, 0.5)
    finally:
        scraper.stop()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()
        for exporter in exporters:
            exporter.stop()
    direct = scraper.to_frame()
    gpu_signals = {"gpu_util", "mem_used_bytes", "mem_total_bytes", "power_w", "dram_bw_util"}
    for exporter in exporters:
        instance = f"127.0.0.1:{exporter.port}"
        mine = direct[direct.source == exporter.url]
        theirs = prom[prom.source == instance]
        assert (theirs[theirs.signal == "scrape_up"].value == 1).all()
        theirs = theirs[theirs.signal != "scrape_up"]
        assert gpu_signals <= set(theirs.signal)
        assert set(theirs[theirs.signal.isin(gpu_signals)].gpu) == {"0", "1"}
        assert theirs[theirs.signal == "gpu_util"].value.nunique() >= 2  # values really moved
        # A value at evaluation time t was scraped by Prometheus in (t - ~1.9 s, t]; away from the
        # window's edges the direct scraper saw the same phase of the fake exporter.
        inner = theirs[(theirs.time_s >= start + 3.0) & (theirs.time_s <= end - 1.5)]
        assert len(inner) >= 2 * 2 * len(gpu_signals)
        matched = 0
        for row in inner.itertuples():
            near = mine[
                (mine.signal == row.signal)
                & (mine.gpu == row.gpu)
                & ((mine.time_s - row.time_s).abs() <= PHASE_S + 1.5)
            ]
            assert (near.value - row.value).abs().min() <= 1e-9 * max(abs(row.value), 1), row
            matched += 1
        assert matched == len(inner)
    # ours and DCGM's vocabularies land on the same signal names through Prometheus too
    ours, dcgm = (set(prom[prom.source == f"127.0.0.1:{e.port}"].signal) for e in exporters)
    assert ours - {"host_cpu_util"} == dcgm
