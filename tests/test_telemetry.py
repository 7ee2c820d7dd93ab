"""The scraper: sampling step, timer on real HTTP servers, gaps, gevent, parquet, flags."""

from __future__ import annotations

import functools
import json
import logging
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import configargparse
import pandas as pd
import pytest
from test_telemetry_fakes import (
    ExporterServer,
    FakeClock,
    FakeExporter,
    SwitchableServer,
    exporter_text,
)

from locust_llm.errors import InputError
from locust_llm.options import table as options_module
from locust_llm.rundir.layout import TELEMETRY_COLUMNS, TELEMETRY_FILE
from locust_llm.telemetry.scraper import (
    SCRAPE_TIMEOUT_S,
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
    assert scraper.timeout_s == SCRAPE_TIMEOUT_S  # not bound to the interval


def test_a_runs_last_scrape_reads_the_targets_and_leaves_the_idle_cpu_unprobed() -> None:
    probed = []
    scraper = TelemetryScraper(
        ["http://b/metrics"], 1.0, fetch=lambda url, timeout: VLLM_TEXT,
        cpu_probe=lambda: probed.append(1) or {"w": 0.5},
    )  # fmt: skip
    assert scraper.scrape_once(now=5.0, probe=False) == 1
    assert not probed and {r[2] for r in scraper.samples()} >= {"running", "scrape_up"}
    assert "worker_cpu_util" not in {r[2] for r in scraper.samples()}
    scraper.scrape_once(now=6.0)  # the timers' step probes
    assert probed == [1] and ("w", "worker_cpu_util", "", 0.5) in [r[1:] for r in scraper.samples()]


def test_failure_after_success_gives_nan_gaps_and_one_warning(caplog) -> None:
    state = {"ok": True}

    def fetch(url: str, timeout: float) -> str:
        if state["ok"]:
            return VLLM_TEXT
        raise OSError("connection refused")

    scraper = TelemetryScraper(["http://a/metrics"], 0.5, fetch=fetch)
    with caplog.at_level(logging.WARNING, logger="locust_llm.telemetry.scraper"):
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
    clock = FakeClock(ticks=7)
    scraper = TelemetryScraper([exporter.url, server.url], interval, clock=clock)
    try:
        scraper.start()
        assert scraper.join(timeout_s=20)  # each timer ends after its 7 ticks
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
        assert list(times) == pytest.approx([1_000.0 + k * interval for k in range(7)])
    gpu = frame[(frame.source == exporter.url) & (frame.signal == "gpu_util")]
    assert set(gpu.gpu) == {"0", "1"} and gpu.value.between(0, 1).all()
    assert scraper.missed_ticks == 0
    assert frame.time_s.is_monotonic_increasing


def test_an_overrunning_tick_skips_the_deadlines_it_missed() -> None:
    clock = FakeClock(ticks=4)

    def slow_fetch(url: str, timeout_s: float) -> str:
        clock.advance(0.5)  # each scrape takes 2.5 intervals
        return VLLM_TEXT

    scraper = TelemetryScraper(["http://a/metrics"], 0.2, fetch=slow_fetch, clock=clock)
    scraper.run_timer(functools.partial(scraper.scrape_target, "http://a/metrics"))
    times = [r[0] for r in scraper.samples() if r[2] == "scrape_up"]
    # ticks at 0, 0.6, 1.2, 1.8: each overran to +0.5 and skipped the two deadlines it missed
    assert times == pytest.approx([1_000.0, 1_000.6, 1_001.2, 1_001.8])
    assert scraper.missed_ticks == 8


def test_target_that_stops_answering_gives_gaps_and_one_warning(caplog) -> None:
    healthy = SwitchableServer(VLLM_TEXT)
    flaky = SwitchableServer(VLLM_TEXT)

    def switch_off(thread: str, waits: int) -> None:
        if thread.endswith(flaky.url) and waits == 3:
            flaky.stop()  # now refuses connections

    clock = FakeClock(ticks=8, on_wait=switch_off)
    scraper = TelemetryScraper([healthy.url, flaky.url], 0.15, timeout_s=0.5, clock=clock)
    try:
        with caplog.at_level(logging.WARNING, logger="locust_llm.telemetry.scraper"):
            scraper.start()
            assert scraper.join(timeout_s=30)
            scraper.stop()
    finally:
        healthy.stop()
        scraper.stop()
    frame = scraper.to_frame()
    flaky_up = frame[(frame.source == flaky.url) & (frame.signal == "scrape_up")].value
    assert list(flaky_up) == [1.0] * 3 + [0.0] * 5
    dead = frame[(frame.source == flaky.url) & (frame.time_s >= 1_000.0 + 3 * 0.15 - 1e-9)]
    assert len(dead[dead.signal == "running"]) == 5
    assert dead[dead.signal.isin(["running", "waiting"])].value.isna().all()
    alive = frame[(frame.source == healthy.url) & (frame.signal == "running")]
    assert len(alive) == 8 and (alive.value == 4.0).all()  # the other target went on
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(messages) == 1 and flaky.url in messages[0]


def test_an_answer_slower_than_the_interval_is_a_sample_not_a_gap() -> None:
    """llama.cpp answers /metrics between decode steps: on a busy host an answer took longer
    than a 0.2 s interval, and the scrape, timed out at the interval, lost it as a gap."""
    server = SwitchableServer(VLLM_TEXT)
    server.mode, server.slow_s = "slow", 0.5
    try:
        scraper = TelemetryScraper([server.url], 0.2)
        assert scraper.scrape_once(1.0) == 1, scraper.warnings
    finally:
        server.stop()
    assert (1.0, server.url, "scrape_up", "", 1.0) in scraper.samples()
    assert (1.0, server.url, "running", "", 4.0) in scraper.samples()


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
    slow.mode = "slow"  # answers after 1 s, past the 0.3 s timeout
    fast = SwitchableServer(VLLM_TEXT)
    scraper = TelemetryScraper([slow.url, fast.url], 0.2, timeout_s=0.3, clock=FakeClock(ticks=3))
    try:
        scraper.start()
        assert scraper.join(timeout_s=30)
        scraper.stop()
    finally:
        slow.stop()
        fast.stop()
    frame = scraper.to_frame()
    fast_up = frame[(frame.source == fast.url) & (frame.signal == "scrape_up")]
    slow_up = frame[(frame.source == slow.url) & (frame.signal == "scrape_up")]
    assert len(fast_up) == 3 and (fast_up.value == 1).all()
    assert len(slow_up) == 3 and (slow_up.value == 0).all()
    assert scraper.missed_ticks == 0  # the fake clock does not count real seconds


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
from locust_llm.telemetry.scraper import TelemetryScraper

class C:
    def collect(self):
        time.sleep(0.2)  # a slow target: the scrape must yield to the hub while it waits
        f = GaugeMetricFamily("vllm:num_requests_running", "x")
        f.add_metric([], 3.0)
        yield f

class Clock:  # fake time for the timer: five ticks, no real sleeps between them
    waits = 0
    def wall(self):
        return 1000.0 + self.waits
    def monotonic(self):
        return 1000.0 + self.waits
    def wait(self, stop, timeout_s):
        self.waits += 1
        return self.waits >= 5

reg = CollectorRegistry(); reg.register(C())
server, thread = start_http_server(0, addr="127.0.0.1", registry=reg)
url = "http://127.0.0.1:%d/metrics" % server.server_address[1]
ticks = 0
scraping = True
def ticker():
    global ticks
    while scraping and ticks < 10_000:
        ticks += 1
        gevent.sleep(0.01)
g = gevent.spawn(ticker)
s = TelemetryScraper([url], 1.0, clock=Clock()).start()
ended = s.join(timeout_s=20)
scraping = False
s.stop()
g.join(3)
server.shutdown()
rows = s.samples()
print(json.dumps({"ended": ended, "ticks": ticks,
                  "up": sum(r[2] == "scrape_up" and r[4] == 1 for r in rows),
                  "running": [r[4] for r in rows if r[2] == "running"][:2]}))
"""


def test_scraper_cooperates_under_gevent_monkey_patching() -> None:
    done = subprocess.run(
        [sys.executable, "-c", GEVENT_SCRIPT], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ended"] and result["up"] == 5
    assert result["running"] == [3.0, 3.0]
    # five scrapes of at least 0.2 s each: the hub kept running other greenlets meanwhile
    assert result["ticks"] >= 40


def test_simulator_metrics_land_in_parquet(tmp_path: Path) -> None:
    from locust_llm.sim.testing import running_sim

    with running_sim() as base:
        url = server_metrics_url(base)
        assert url == base + "/metrics"
        scraper = TelemetryScraper([url], 0.25, clock=FakeClock(ticks=5)).start()
        assert scraper.join(timeout_s=20)
        scraper.stop()
    frame = pd.read_parquet(scraper.write(tmp_path))
    up = frame[frame.signal == "scrape_up"]
    assert len(up) == 5 and (up.value == 1).all()
    assert {"running", "waiting", "kv_cache_usage", "preemptions", "gpu_util"} <= set(frame.signal)
    kv = frame[frame.signal == "kv_cache_usage"].value
    assert kv.between(0, 1).all()


def test_a_scrape_answered_with_an_http_error_closes_its_socket() -> None:
    """An HTTPError holds the answer's socket; left open, it is closed only when collected, and
    collected in a reference cycle its socket may go first: an unraisable ResourceWarning in
    some later test (pytest makes that an error)."""
    import http.server
    import threading

    from locust_llm.telemetry.scraper import ScrapeError, fetch_text

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_error(404)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(ScrapeError, match="HTTP 404") as raised:
            fetch_text(f"http://127.0.0.1:{server.server_address[1]}/metrics", 2.0)
        answer = raised.value.__cause__
        assert answer is not None and answer.fp.closed  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
