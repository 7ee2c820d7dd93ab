"""The numbers behind the LLM web tab (locust_llm.webui.data), without Locust or a browser."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from locust_llm.capacity.measure import (
    BROKEN,
    MET,
    UNCLEAR,
    Reading,
    StageMeasurement,
    StageRule,
)
from locust_llm.capacity.search import CapacitySearch, SearchSettings
from locust_llm.capacity.slo import parse_slo
from locust_llm.live.capacity_planner import capacity_info
from locust_llm.live.llmstats import LiveStats
from locust_llm.metrics import RequestRecord
from locust_llm.rundir.layout import Stage
from locust_llm.webui import data as wd


def _record(
    ttft_s: float, *, ok: bool = True, out: int = 10, endpoint: str = "/chat"
) -> RequestRecord:
    return RequestRecord(
        request_id="r", endpoint=endpoint, ok=ok, error_kind="" if ok else "http_5xx",
        ttft_s=ttft_s, tpot_s=0.02, e2e_s=ttft_s + 0.02 * (out - 1), input_tokens=100,
        output_tokens=out if ok else 0,
    )  # fmt: skip


def _stats(ttfts: list[float]) -> LiveStats:
    stats = LiveStats()
    for t in ttfts:
        stats.add(_record(t), [0.02, 0.02], [1.0, 1.0])  # two per-token ITL samples
    return stats


def _row(payload: dict, name: str) -> dict:
    return next(e for e in payload["endpoints"] if e["name"] == name)


def _runtime(stats: LiveStats, **kw: object) -> SimpleNamespace:
    base = {"stats": stats, "stages": [], "current_stage": -1, "telemetry": None,
            "run_dir": None, "run_ended": False}  # fmt: skip
    return SimpleNamespace(**{**base, **kw})


def test_table_rows_show_the_payload_numbers_in_ms_and_dash_for_no_data() -> None:
    stats = _stats([0.1, 0.2, 0.3])
    stats.add(_record(math.nan, ok=False, endpoint="/other"), [], [])
    payload = wd.stats_payload(_runtime(stats), SimpleNamespace(state="running", user_count=3))
    rows = {r["name"]: r for r in wd.table_rows(payload["endpoints"])}
    assert set(rows) == {"/chat", "/other", "Aggregated"}
    chat = _row(payload, "/chat")
    assert rows["/chat"]["ttftp50"] == f"{chat['ttft_p50_s'] * 1e3:.1f}"
    assert abs(float(rows["/chat"]["ttftp50"]) - 200.0) < 2.5  # histogram error <= 0.8 %
    assert rows["/other"]["ttftp50"] == wd.NO_DATA  # a failed request has no TTFT, not 0
    assert rows["/other"]["failures"] == "1"
    cancelled = RequestRecord(request_id="c", endpoint="/chat", error_kind="cancelled")
    stats.add(cancelled, [], [])
    payload = wd.stats_payload(_runtime(stats), SimpleNamespace(state="running", user_count=3))
    rows = {r["name"]: r for r in wd.table_rows(payload["endpoints"])}
    assert _row(payload, "/chat")["requests"] == 3 and _row(payload, "/chat")["cancelled"] == 1
    # the tab counts like Locust's table: a request the test cancelled itself is not counted
    assert (rows["/chat"]["requests"], rows["/chat"]["failures"]) == ("3", "0")
    assert rows["/chat"]["cancelled"] == "1"
    assert rows["Aggregated"]["requests"] == "4"  # 3 + 1 failed
    keys = [c["key"] for c in wd.table_structure()]
    assert all(k.isalnum() and k.islower() for k in keys)  # Locust camel-cases keys
    assert set(rows["/chat"]) == set(keys)
    json.dumps(payload, allow_nan=False)  # NaN never reaches the JSON


def test_a_stopped_run_keeps_the_rates_it_ended_with() -> None:
    stats = _stats([0.1] * 5)
    last = stats.entries["/chat"].last_s
    running = SimpleNamespace(state="running", user_count=1)
    stopped = SimpleNamespace(state="stopped", user_count=0)
    later = last + 600.0
    rate_running = wd.stats_payload(_runtime(stats), running, now=later)["endpoints"][0]
    rate_stopped = wd.stats_payload(_runtime(stats), stopped, now=later)["endpoints"][0]
    assert rate_running["output_tokens_per_s"] == 0.0  # ten minutes later: nothing in the window
    assert rate_stopped["output_tokens_per_s"] == pytest.approx(50 / 10)  # 5 requests x 10 tokens
    assert wd.rates_time(stats, "stopped", later) == pytest.approx(last + 1.0)


def test_latest_signals_combine_gpus_and_treat_a_failed_scrape_as_no_data() -> None:
    rows = [
        (1.0, "gpu", "gpu_util", "0", 0.2), (1.0, "gpu", "gpu_util", "1", 0.4),
        (2.0, "gpu", "gpu_util", "0", 0.6), (2.0, "gpu", "gpu_util", "1", 0.8),
        (2.0, "gpu", "mem_used_bytes", "0", 4e9), (2.0, "gpu", "mem_used_bytes", "1", 6e9),
        (2.0, "srv", "running", "", 3.0), (2.0, "srv2", "running", "", 4.0),
        (1.0, "srv", "kv_cache_usage", "", 0.5), (2.0, "srv", "kv_cache_usage", "", math.nan),
        (2.0, "srv", "scrape_up", "", 0.0),
    ]  # fmt: skip
    latest = wd.latest_signals(rows)
    assert latest["gpu_util"] == pytest.approx(0.7)  # newest per GPU, averaged
    assert latest["mem_used_bytes"] == pytest.approx(10e9)  # summed
    assert latest["running"] == 7.0  # summed over servers
    assert latest["kv_cache_usage"] is None  # newest scrape failed: no data, never 0
    assert latest["waiting"] is None
    assert latest["time_s"] == 2.0
    series = wd.signal_series(rows, since_s=0.0)
    assert series["time_s"] == [1.0, 2.0]
    assert series["gpu_util"] == pytest.approx([0.3, 0.7])


def test_telemetry_is_read_defensively() -> None:
    assert wd.telemetry_rows(None) == []
    assert wd.telemetry_rows(SimpleNamespace()) == []

    def broken() -> list:
        raise RuntimeError("scraper stopped")

    assert wd.telemetry_rows(SimpleNamespace(samples=broken)) == []
    good = SimpleNamespace(samples=lambda: [(1.0, "s", "gpu_util", "0", 0.5), ("junk",)])
    assert wd.telemetry_rows(good) == [(1.0, "s", "gpu_util", "0", 0.5)]


def test_stage_history_and_report_in_the_payload(tmp_path: Path) -> None:
    stats = _stats([0.1, 0.2])
    stats.snapshot_history(now=100.0)
    stats.snapshot_history(now=101.0)
    stages = [Stage(index=0, name="c=1", start_wall_s=1.0, end_wall_s=2.0, concurrency=1),
              Stage(index=1, name="c=8", start_wall_s=2.0, concurrency=8)]  # fmt: skip
    rt = _runtime(stats, stages=stages, current_stage=1, run_dir=tmp_path, run_ended=True)
    payload = wd.stats_payload(rt, SimpleNamespace(state="stopped", user_count=0))
    assert payload["stage"]["name"] == "c=8" and payload["stage"]["concurrency"] == 8
    assert payload["history"]["time_s"] == [100.0, 101.0]
    assert payload["history"]["ttft_p50_s"][-1] == pytest.approx(0.15, rel=0.02)
    assert payload["report"]["ready"] is False
    assert payload["report"]["command"] == f"locust-llm report {tmp_path}"
    (tmp_path / "report.html").write_text("<html></html>")
    assert wd.report_info(rt)["ready"] is True
    rt.current_stage = -1  # the master may not track the index: the open stage is current
    assert wd.current_stage(rt)["name"] == "c=8"


def test_each_stage_begun_has_its_own_live_figures_settled_after_the_records_delay() -> None:
    """On a master the stage's figures wait out the workers' record batches (1 s + transit):
    a stage is "settled" once that long has passed since its end, or, at a request count,
    once all of its records are in; in one process records go straight in."""
    from locust_llm.client.recorder import Recorder

    recorder = Recorder(is_worker=False)
    # stage 0: 2 a second from 100 s; stage 1: 5 requests, all in by 108.3 s
    starts = [100.0 + i * 0.5 for i in range(15)] + [107.5 + i * 0.1 for i in range(5)]
    for i, start in enumerate(starts):
        stage = 0 if i < 15 else 1
        recorder.add(
            RequestRecord(
                request_id=str(i),
                endpoint="/chat",
                stage=stage,
                ok=True,
                start_wall_s=start,
                e2e_s=0.4 - 0.05 * stage,
                ttft_s=0.1 * (1 + stage),
                output_tokens=10,
            )
        )
    stages = [Stage(index=0, name="rate 2/s", start_wall_s=100.0, end_wall_s=107.5, rate=2.0),
              Stage(index=1, name="c=2", start_wall_s=107.5, end_wall_s=108.3, concurrency=2,
                    target_requests=5)]  # fmt: skip
    rt = _runtime(LiveStats(), stages=stages, current_stage=1, recorder=recorder,
                  options=SimpleNamespace(record_batch_s=1.0))  # fmt: skip
    master = SimpleNamespace(state="running", user_count=2, clients={}, worker_count=1)
    assert wd.record_delay_s(rt, master) == 1.5
    assert wd.record_delay_s(rt, SimpleNamespace(state="running")) == 0.0
    begun = wd.stats_payload(rt, master, now=108.5)["stages_begun"]
    assert [b["settled"] for b in begun] == [False, True]  # stage 1 has its 5 records
    assert begun[0]["qps"] == pytest.approx(14 / 7.0)  # ends in [100, 107): 14 of 15
    assert begun[0]["window_s"] == pytest.approx(7.0) and begun[0]["completed"] == 15
    assert begun[1]["ttft_p50_s"] == pytest.approx(0.2, rel=0.01)
    assert begun[1]["output_tokens_per_s"] == pytest.approx(50 / 0.8)  # 107.5 to 108.3 s
    later = wd.stats_payload(rt, master, now=109.0)["stages_begun"]
    assert later[0]["settled"] and later[0]["qps"] == pytest.approx(15 / 7.5)
    assert json.dumps(later, allow_nan=False)  # JSON-safe: no NaN
    bare = wd.stages_begun(SimpleNamespace(stages=stages), now=109.0)
    assert bare[0]["qps"] is None and bare[0]["done"] is None


def test_metrics_parse_as_prometheus_text_with_histograms_in_seconds() -> None:
    stats = _stats([0.1, 0.2, 0.3])
    stats.add(_record(math.nan, ok=False), [], [])
    text = wd.metrics_text(_runtime(stats), SimpleNamespace(user_count=4)).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    requests = families["locust_llm_requests"].samples[0]
    assert requests.labels == {"name": "/chat"} and requests.value == 4
    assert families["locust_llm_output_tokens"].samples[0].value == 30
    assert families["locust_llm_failures"].samples[0].labels["kind"] == "http_5xx"
    ttft = families["locust_llm_ttft_seconds"]
    buckets = {s.labels["le"]: s.value for s in ttft.samples if s.name.endswith("_bucket")}
    assert buckets["0.1"] == 0 and buckets["0.25"] == 2 and buckets["+Inf"] == 3
    total = next(s.value for s in ttft.samples if s.name.endswith("_sum"))
    assert total == pytest.approx(0.6)
    assert families["locust_llm_users"].samples[0].value == 4
    assert families["locust_llm_stage"].samples[0].value == -1


def test_stats_csv_has_the_run_dir_columns() -> None:
    lines = wd.stats_csv(_stats([0.1])).splitlines()
    assert lines[0].startswith("Name,Requests,Failures")
    assert lines[1].startswith("/chat,1,0,10,100,")
    assert lines[2].startswith("Aggregated,1,")


def test_extended_stats_carry_the_same_rows_as_the_payload() -> None:
    rt, runner = _runtime(_stats([0.1, 0.2])), SimpleNamespace(state="stopped", user_count=0)
    payload = wd.stats_payload(rt, runner)
    assert wd.extended_stats(rt, runner) == [
        {"key": "llm", "data": wd.table_rows(payload["endpoints"])}
    ]


def test_users_backing_off_are_live_in_the_payload_and_the_metrics() -> None:
    """The master's recorder: its own users waiting plus each worker's last batch; a lost
    worker's waiting users leave the total."""
    from locust_llm.client.messages import RecordBatch
    from locust_llm.client.recorder import Recorder

    recorder = Recorder(is_worker=False)
    recorder.backing_off, recorder.backoffs = 1, 2
    recorder.receive_batch(RecordBatch(worker="w1", backoffs=9, backing_off=3))
    rt = _runtime(LiveStats(), recorder=recorder)
    payload = wd.stats_payload(rt, SimpleNamespace(state="running", user_count=4))
    assert payload["backoff"] == {"users_waiting": 4, "waits": 11}
    families = {
        f.name: f.samples[0].value
        for f in text_string_to_metric_families(wd.metrics_text(rt, None).decode())
        if f.samples
    }
    assert families["locust_llm_users_backing_off"] == 4.0
    assert families["locust_llm_backoff_waits"] == 11.0
    recorder.forget_worker_waits("w1")
    assert wd.backoff_state(rt) == {"users_waiting": 1, "waits": 11}
    assert wd.backoff_state(_runtime(LiveStats())) == {"users_waiting": 0, "waits": 0}


def test_the_payload_s_errors_merge_the_workers_messages_per_kind() -> None:
    """Two workers' live stats (their deltas, as JSON) on the master: each kind's count and its
    most frequent message, numbers folded, over every endpoint; cancelled ones left out."""

    def failed(endpoint: str, kind: str, message: str) -> RequestRecord:
        return RequestRecord(
            request_id="f", endpoint=endpoint, error_kind=kind, error_message=message
        )

    workers = [LiveStats(), LiveStats()]
    for i in range(6):
        stats = workers[i % 2]
        stats.add(_record(0.1), [], [])
        stats.add(
            failed("/chat", "http_4xx", f"HTTP 400: prompt of {100 + i} tokens too long"), [], []
        )
    workers[0].add(failed("/other", "http_4xx", "HTTP 400: prompt of 7 tokens too long"), [], [])
    workers[1].add(failed("/chat", "timeout", "read timed out: timed out"), [], [])
    workers[1].add(failed("/chat", "cancelled", "stopped by the load test"), [], [])
    master = LiveStats()
    for stats in workers:
        master.merge_delta(json.loads(json.dumps(stats.take_delta())))
    payload = wd.stats_payload(_runtime(master), SimpleNamespace(state="stopped", user_count=0))
    json.dumps(payload, allow_nan=False)
    four, timeout = payload["errors"]
    requests = _row(payload, "Aggregated")["requests"]
    assert requests == 14  # 6 completed + 8 failed; the cancelled one is not a request
    assert (four["kind"], four["count"], four["message_count"]) == ("http_4xx", 7, 7)
    assert four["message"] == "HTTP 400: prompt of {n} tokens too long"
    assert four["share"] == pytest.approx(7 / 14)
    assert (timeout["kind"], timeout["count"], timeout["message"]) == (
        "timeout",
        1,
        "read timed out: timed out",
    )
    master.reset()
    assert wd.stats_payload(_runtime(master), SimpleNamespace(state="stopped"))["errors"] == []


def test_the_payload_follows_the_capacity_search_to_its_answer() -> None:
    def _fake(load: float, cap: float) -> StageMeasurement:  # P99 TTFT 2 s at ``cap`` users
        v = 2.0 * load / cap
        state = MET if v < 1.9 else BROKEN if v > 2.1 else UNCLEAR
        reading = Reading("ttft_p99", "P99 TTFT", 2.0, v, v * 0.95, v * 1.05, state)
        return StageMeasurement(
            load=load, readings=(reading,), requests=100, sent=120, throughput=load,
            warmup_s=0.0, warmup_requests=0,
        )  # fmt: skip

    search = CapacitySearch(SearchSettings(closed=True, flat_gain=1.02))
    slo = parse_slo("ttft_p99=2s")
    rt = _runtime(_stats([0.1]), capacity_info=lambda: capacity_info(search, slo, StageRule(), {}))
    idle = SimpleNamespace(state="running", user_count=1)
    assert wd.stats_payload(_runtime(_stats([0.1])), idle)["capacity"] is None
    first = wd.stats_payload(rt, idle)["capacity"]
    assert first == {
        "text": "capacity search: grow at 1 users; every SLO met up to -, broken at -",
        "done": False, "slo": "ttft_p99=2s",
    }  # fmt: skip
    for _ in range(3):
        search.record(_fake(search.next_load() or 0, 27.0))
    assert wd.stats_payload(rt, idle)["capacity"]["text"].startswith(
        "capacity search: grow at 8 users; every SLO met up to 4, broken at -"
    )
    while (load := search.next_load()) is not None:
        search.record(_fake(load, 27.0))
    done = wd.stats_payload(rt, idle)["capacity"]
    assert done["done"] and done["text"].startswith(
        "capacity 27 users (SLOs break between 27 and 29 users) at P99 TTFT"
    )
