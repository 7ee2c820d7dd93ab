"""One definition per canonical signal: the live web tab and the report's stage table combine
several servers and GPUs the same way; vocabularies are registered entries."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from locust_llm.report.tables import combined_timeline, stage_table
from locust_llm.rundir.layout import TELEMETRY_COLUMNS, Stage
from locust_llm.telemetry.signals import (
    Signal,
    combine,
    get_signal,
    reduce_values,
    registered_signals,
    signal_docs,
)
from locust_llm.telemetry.vocabularies import (
    MetricMap,
    Vocabulary,
    extract_signals,
    metric_maps,
    register_vocabulary,
    unregister_vocabulary,
)
from locust_llm.webui import data as webtab

ROOT = Path(__file__).resolve().parents[1]


def _two_servers_one_exporter(seconds: int = 10) -> list[tuple]:
    """Server A scraped on whole seconds, server B half a second later, an exporter with two
    GPUs on whole seconds; every value constant, so the right combined value is known."""
    rows: list[tuple] = []
    for k in range(seconds):
        t = 100.0 + k
        rows += [(t, "http://a/metrics", "running", "", 3.0),
                 (t, "http://a/metrics", "waiting", "", 1.0),
                 (t, "http://a/metrics", "kv_cache_usage", "", 0.2),
                 (t + 0.5, "http://b/metrics", "running", "", 4.0),
                 (t + 0.5, "http://b/metrics", "waiting", "", 5.0),
                 (t + 0.5, "http://b/metrics", "kv_cache_usage", "", 0.6),
                 (t, "http://gpu/metrics", "gpu_util", "0", 0.5),
                 (t, "http://gpu/metrics", "gpu_util", "1", 0.9),
                 (t, "http://gpu/metrics", "dram_bw_util", "0", 0.25),
                 (t, "http://gpu/metrics", "dram_bw_util", "1", 0.75)]  # fmt: skip
    return rows


def test_the_web_tab_and_the_report_agree_with_several_servers() -> None:
    rows = _two_servers_one_exporter()
    live = webtab.latest_signals(rows)
    telemetry = pd.DataFrame.from_records(rows, columns=list(TELEMETRY_COLUMNS))
    stage = Stage(index=0, name="c=8", start_wall_s=101.0, end_wall_s=109.0, concurrency=8)
    requests = pd.DataFrame({"start_wall_s": [102.0], "ok": [True], "error_kind": [""]})
    (table,) = stage_table(requests, telemetry, [stage]).to_dict("records")
    expected = {"running": 7.0, "waiting": 6.0, "kv_cache_usage": 0.4, "gpu_util": 0.7,
                "dram_bw_util": 0.5}  # fmt: skip
    for signal, value in expected.items():
        assert live[signal] == pytest.approx(value), signal
        assert table[signal] == pytest.approx(value), signal
    assert table["running_max"] == pytest.approx(7.0)  # the peak of the total, not of one server
    series = webtab.signal_series(rows, since_s=0.0)
    assert series["kv_cache_usage"][1:] == pytest.approx([0.4] * 9)


def test_a_failed_scrape_is_no_data_from_that_source_until_it_answers() -> None:
    t = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 2.5])
    src = np.array(["a", "b", "a", "b", "a", "b"], dtype=object)
    v = np.array([3.0, 4.0, 3.0, math.nan, 3.0, 4.0])
    times, values = combined_timeline(t, v, src, np.array([""] * 6, dtype=object),
                                      get_signal("running"))  # fmt: skip
    assert list(times) == list(t)
    assert list(values) == [3.0, 7.0, 7.0, 3.0, 3.0, 7.0]  # b's gap leaves a alone, not 0 or stale
    none = combined_timeline(t, np.full(6, math.nan), src, src, get_signal("running"))[1]
    assert np.isnan(none).all()


def test_reductions_leave_nan_out_and_give_nan_for_nothing() -> None:
    assert reduce_values("sum", [1.0, math.nan, 2.0]) == 3.0
    assert reduce_values("mean", [1.0, math.nan, 2.0]) == 1.5
    assert reduce_values("max", [1.0, 2.0]) == 2.0 and reduce_values("min", [1.0, 2.0]) == 1.0
    assert math.isnan(reduce_values("sum", [math.nan])) and math.isnan(reduce_values("mean", []))
    assert combine("mem_used_bytes", {("x", "0"): 1.0, ("x", "1"): 2.0, ("y", "0"): 4.0}) == 7.0
    two_exporters = {("x", "0"): 0.2, ("x", "1"): 0.4, ("y", "0"): 0.9}
    assert combine("gpu_util", two_exporters) == pytest.approx(0.6)  # mean of x's mean and y
    with pytest.raises(KeyError, match="no signal 'nope'; registered: gpu_util"):
        get_signal("nope")
    with pytest.raises(ValueError, match="reduction 'median'"):
        Signal(name="x", unit="ratio", doc="x", over_instances="median")  # type: ignore[arg-type]


def test_one_definition_feeds_the_run_dir_contract_and_every_vocabulary() -> None:
    recorded = {s.name for s in registered_signals() if not s.derived}
    assert set(signal_docs()) == recorded and "gpu_mem_util" not in recorded
    assert {m.signal for _, m in metric_maps()} <= recorded
    for path in (ROOT / "locust_llm").rglob("*.py"):  # no second reduction table anywhere
        text = path.read_text()
        assert "SIGNAL_REDUCE" not in text and "SUMMED_SIGNALS" not in text, path


def test_a_server_vocabulary_is_one_registered_entry() -> None:
    text = "myserver_active_requests 5\nmyserver_queue 2\nmyserver_queue 1\n"
    assert extract_signals(text) == []
    register_vocabulary(Vocabulary("myserver", "a test server", (
        MetricMap("myserver_active_requests", "running"),
        MetricMap("myserver_queue", "waiting"),
    )))  # fmt: skip
    try:
        # two series of one metric (two ranks) add up, as running/waiting say
        assert extract_signals(text) == [("running", "", 5.0), ("waiting", "", 3.0)]
        with pytest.raises(ValueError, match="already mapped by myserver"):
            register_vocabulary(Vocabulary("again", "x", (MetricMap("myserver_queue", "running"),)))
        with pytest.raises(KeyError, match="no signal 'queue_depth'"):
            register_vocabulary(Vocabulary("bad", "x", (MetricMap("m", "queue_depth"),)))
    finally:
        unregister_vocabulary("myserver")
    assert extract_signals(text) == []
