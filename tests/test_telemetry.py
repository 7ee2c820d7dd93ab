"""The scraper: sampling step, timer on real HTTP servers, gaps, gevent, parquet, flags."""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import configargparse
import pandas as pd
import pytest
from test_telemetry_fakes import (
    ExporterServer,
    FakeExporter,
    SwitchableServer,
    exporter_text,
)

from locust_llm import options as options_module
from locust_llm.errors import InputError
from locust_llm.rundir import TELEMETRY_COLUMNS, TELEMETRY_FILE
from locust_llm.telemetry import (
    TelemetryScraper,
    locust_worker_cpu,
    server_metrics_url,
    targets_from_options,
)

TEXT = exporter_text(FakeExporter("ours", phase=3))
VLLM_TEXT = "vllm:num_requests_running 4\nvllm:num_requests_waiting 1\n"


def free_url() -> str:
    """A loopback URL nothing listens on (bind port 0, close)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


# -- sampling step, no sockets -------------------------------------------------------------------
def test_scrape_once_with_injected_fetch_records_signals_and_up() -> None:
    texts = {"http://a/metrics": TEXT, "http://b/metrics": VLLM_TEXT}
    scraper = TelemetryScraper(list(texts), 1.0, fetch=lambda url, timeout: texts[url])
    assert scraper.scrape_once(now=100.0) == 2
    rows = scraper.samples()
    assert all(r[0] == 100.0 for r in rows)
    assert ("http://b/metrics", "running", "", 4.0) in [r[1:] for r in rows]
    ups = {r[1]: r[4] for r in rows if r[2] == "scrape_up"}
    assert ups == {"http://a/metrics": 1.0, "http://b/metrics": 1.0}
    assert scraper.timeout_s == 1.0


def test_failure_after_success_gives_nan_gaps_and_one_warning(caplog) -> None:
    state = {"ok": True}

    def fetch(url: str, timeout: float) -> str:
        if state["ok"]:
            return VLLM_TEXT
        raise OSError("connection refused")

    scraper = TelemetryScraper(["http://a/metrics"], 0.5, fetch=fetch)
    with caplog.at_level(logging.WARNING, logger="locust_llm.telemetry"):
        scraper.scrape_once(1.0)
        state["ok"] = False
        scraper.scrape_once(2.0)
        scraper.scrape_once(3.0)
        state["ok"] = True
        scraper.scrape_once(4.0)
    frame = scraper.to_frame()
    at2 = frame[frame.time_s == 2.0]
    assert set(at2.signal) == {"running", "waiting", "scrape_up"}
    assert at2[at2.signal != "scrape_up"].value.isna().all()
    assert frame[frame.signal == "scrape_up"].value.tolist() == [1.0, 0.0, 0.0, 1.0]
    assert frame[(frame.time_s == 4.0) & (frame.signal == "running")].value.item() == 4.0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "http://a/metrics" in warnings[0].getMessage()
    assert len(scraper.warnings) == 1


def test_bad_inputs_are_input_errors() -> None:
    with pytest.raises(InputError, match="scrape-interval"):
        TelemetryScraper([], 0)
    with pytest.raises(InputError, match="scrape-interval"):
        TelemetryScraper([], math.nan)
    with pytest.raises(InputError, match="expected an http"):
        TelemetryScraper(["localhost:9400"], 1)


def test_cpu_probe_rows_and_locust_runner_adapter() -> None:
    master = SimpleNamespace(
        clients={
            "w1": SimpleNamespace(id="w1", cpu_usage=42),
            "w2": SimpleNamespace(id="w2", cpu_usage=7),
        }
    )
    assert locust_worker_cpu(master) == {"w1": 0.42, "w2": 0.07}
    assert locust_worker_cpu(SimpleNamespace(current_cpu_usage=50.0)) == {"local": 0.5}
    # Locust's 0 before its first CPU measurement is "no data yet", not an idle client
    assert math.isnan(locust_worker_cpu(SimpleNamespace(current_cpu_usage=0.0))["local"])

    def broken() -> dict[str, float]:
        raise RuntimeError("runner gone")

    scraper = TelemetryScraper([], 1.0, cpu_probe=lambda: locust_worker_cpu(master))
    scraper.scrape_once(5.0)
    assert scraper.samples() == [
        (5.0, "w1", "worker_cpu_util", "", 0.42),
        (5.0, "w2", "worker_cpu_util", "", 0.07),
    ]
    failing = TelemetryScraper([], 1.0, cpu_probe=broken)
    failing.scrape_once(1.0)
    failing.scrape_once(2.0)
    assert failing.samples() == [] and len(failing.warnings) == 1


# -- real HTTP servers ---------------------------------------------------------------------------
def test_timer_scrapes_real_exporter_at_interval_into_parquet(tmp_path: Path) -> None:
    exporter = ExporterServer(FakeExporter("ours"))
    server = SwitchableServer(VLLM_TEXT)
    interval = 0.2
    scraper = TelemetryScraper([exporter.url, server.url], interval)
    try:
        scraper.start()
        time.sleep(1.5)
    finally:
        scraper.stop()
        exporter.stop()
        server.stop()
    assert not scraper.running
    path = scraper.write(tmp_path)
    assert path == tmp_path / TELEMETRY_FILE
    frame = pd.read_parquet(path)
    assert tuple(frame.columns) == TELEMETRY_COLUMNS
    for url in (exporter.url, server.url):
        times = frame[(frame.source == url) & (frame.signal == "scrape_up")].time_s.to_numpy()
        assert 6 <= len(times) <= 9, len(times)
        gaps = times[1:] - times[:-1]
        assert abs(float(pd.Series(gaps).median()) - interval) < 0.05
    gpu = frame[(frame.source == exporter.url) & (frame.signal == "gpu_util")]
    assert set(gpu.gpu) == {"0", "1"} and gpu.value.between(0, 1).all()
    assert scraper.missed_ticks == 0
    assert frame.time_s.is_monotonic_increasing


def test_target_that_stops_answering_gives_gaps_and_one_warning(caplog) -> None:
    healthy = SwitchableServer(VLLM_TEXT)
    flaky = SwitchableServer(VLLM_TEXT)
    scraper = TelemetryScraper([healthy.url, flaky.url], 0.15, timeout_s=0.5)
    try:
        with caplog.at_level(logging.WARNING, logger="locust_llm.telemetry"):
            scraper.start()
            time.sleep(0.5)
            flaky.stop()  # now refuses connections
            t_down = time.time()
            time.sleep(0.8)
            scraper.stop()
    finally:
        healthy.stop()
        scraper.stop()
    frame = scraper.to_frame()
    after = frame[frame.time_s > t_down + 0.05]
    dead = after[after.source == flaky.url]
    assert len(dead[dead.signal == "scrape_up"]) >= 3
    assert (dead[dead.signal == "scrape_up"].value == 0).all()
    assert dead[dead.signal.isin(["running", "waiting"])].value.isna().all()
    assert len(dead[dead.signal == "running"]) >= 3
    alive = after[(after.source == healthy.url) & (after.signal == "running")]
    assert len(alive) >= 3 and (alive.value == 4.0).all()  # the other target went on
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(messages) == 1 and flaky.url in messages[0]


@pytest.mark.parametrize("mode", ["404", "500", "garbage"])
def test_missing_or_broken_metrics_endpoint_is_a_gap(mode: str) -> None:
    server = SwitchableServer(VLLM_TEXT)
    server.mode = mode
    try:
        scraper = TelemetryScraper([server.url], 1.0)
        assert scraper.scrape_once(1.0) == 0
        assert server_metrics_url(f"http://127.0.0.1:{server.port}/v1") is None
    finally:
        server.stop()
    assert scraper.samples() == [(1.0, server.url, "scrape_up", "", 0.0)]
    assert mode in scraper.warnings[0] or "Prometheus" in scraper.warnings[0]


def test_hung_target_does_not_delay_the_others() -> None:
    slow = SwitchableServer(VLLM_TEXT)
    slow.mode = "slow"  # answers after 1 s, past the 0.2 s timeout
    fast = SwitchableServer(VLLM_TEXT)
    scraper = TelemetryScraper([slow.url, fast.url], 0.2)
    try:
        scraper.start()
        time.sleep(1.2)
        scraper.stop()
    finally:
        slow.stop()
        fast.stop()
    frame = scraper.to_frame()
    fast_up = frame[(frame.source == fast.url) & (frame.signal == "scrape_up")]
    slow_up = frame[(frame.source == slow.url) & (frame.signal == "scrape_up")]
    assert len(fast_up) >= 5 and (fast_up.value == 1).all()
    assert (slow_up.value == 0).all()


def test_server_metrics_url_and_flags(monkeypatch) -> None:
    server = SwitchableServer(VLLM_TEXT)
    try:
        host = f"http://127.0.0.1:{server.port}/v1"
        assert server_metrics_url(host) == server.url
        parser = configargparse.ArgumentParser()
        options_module.add_arguments(parser)
        options = parser.parse_args(["--llm-gpu-metrics", "http://gpu:9400/metrics"])
        assert options.llm_scrape_interval == 1.0
        assert targets_from_options(options, host) == ["http://gpu:9400/metrics", server.url]
        off = parser.parse_args(["--llm-server-metrics", "none"])
        assert targets_from_options(off, host) == []
        monkeypatch.setenv("LOCUST_LLM_SCRAPE_INTERVAL", "0.5")
        assert parser.parse_args([]).llm_scrape_interval == 0.5
    finally:
        server.stop()
    dead = free_url()
    assert server_metrics_url(dead.removesuffix("/metrics")) is None
    assert targets_from_options(parser.parse_args([]), dead.removesuffix("/metrics")) == []


GEVENT_SCRIPT = r"""
import gevent.monkey
gevent.monkey.patch_all()
import json, time, gevent
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from locust_llm.telemetry import TelemetryScraper

class C:
    def collect(self):
        f = GaugeMetricFamily("vllm:num_requests_running", "x")
        f.add_metric([], 3.0)
        yield f

reg = CollectorRegistry(); reg.register(C())
server, thread = start_http_server(0, addr="127.0.0.1", registry=reg)
url = "http://127.0.0.1:%d/metrics" % server.server_address[1]
ticks = 0
def ticker():
    global ticks
    for _ in range(200):
        ticks += 1
        gevent.sleep(0.01)
g = gevent.spawn(ticker)
s = TelemetryScraper([url], 0.2).start()
gevent.sleep(1.1)
s.stop()
g.join(3)
server.shutdown()
rows = s.samples()
print(json.dumps({"ticks": ticks, "up": sum(r[2] == "scrape_up" and r[4] == 1 for r in rows),
                  "running": [r[4] for r in rows if r[2] == "running"][:2]}))
"""


def test_scraper_cooperates_under_gevent_monkey_patching() -> None:
    done = subprocess.run(
        [sys.executable, "-c", GEVENT_SCRIPT], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert 5 <= result["up"] <= 7
    assert result["running"] == [3.0, 3.0]
    assert result["ticks"] >= 60  # the hub kept running other greenlets while scraping


def test_simulator_metrics_land_in_parquet(tmp_path: Path) -> None:
    from locust_llm.sim.testing import running_sim

    with running_sim() as base:
        url = server_metrics_url(base)
        assert url == base + "/metrics"
        scraper = TelemetryScraper([url], 0.25).start()
        time.sleep(1.1)
        scraper.stop()
    frame = pd.read_parquet(scraper.write(tmp_path))
    up = frame[frame.signal == "scrape_up"]
    assert 4 <= len(up) <= 6 and (up.value == 1).all()
    assert {"running", "waiting", "kv_cache_usage", "preemptions", "gpu_util"} <= set(frame.signal)
    kv = frame[frame.signal == "kv_cache_usage"].value
    assert kv.between(0, 1).all()
