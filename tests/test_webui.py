"""The LLM tab in Locust's web UI, driven in real headless Chromium; /llm/stats in distributed mode.

The simulator and Locust run as subprocesses (Locust must never be imported here); the browser is
the system Chromium driven by Playwright.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families
from webui_support import (
    BIN,
    chromium,
    free_port,
    get,
    get_json,
    locust_ui,
    running_sim,
    spawn,
    wait_for,
)

pytestmark = pytest.mark.browser

ENDPOINT = "/v1/chat/completions"
#: a fifth of the requests fail with the simulator's 500 and its message (the errors table)
SIM_ARGS = ("--output-len", "fixed:16", "--fault", "http500:0.2")
FIVE = "HTTP 500: Internal server error (injected fault)"


def _row(payload: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in payload["endpoints"] if r["name"] == name)


def _table_cells(page: Any, name: str) -> dict[str, str]:
    """The LLM tab's row ``name`` as {column title: cell text}."""
    table = page.locator("table").filter(has=page.locator("th", has_text="TTFT p50 (ms)"))
    titles = [t.strip() for t in table.locator("thead th").all_inner_texts()]
    for row in table.locator("tbody tr").all():
        cells = [c.strip() for c in row.locator("td").all_inner_texts()]
        if cells and cells[0] == name:
            return dict(zip(titles, cells, strict=True))
    return {}


def _number(text: str) -> float | None:
    return float(text) if re.fullmatch(r"-?\d+(\.\d+)?", text or "") else None


def test_llm_tab_in_the_browser(tmp_path: Path) -> None:
    web_port = free_port()
    ui = f"http://127.0.0.1:{web_port}"
    run_dir = tmp_path / "run"
    errors: list[str] = []
    with (
        running_sim(tmp_path / "sim.log", *SIM_ARGS) as host,
        spawn(locust_ui(host, web_port, run_dir, "-u", "4", "-r", "4"), tmp_path / "locust.log"),
    ):
        wait_for("Locust's web UI", lambda: get(ui + "/"), 30.0)
        with chromium(tmp_path / "profile") as page:
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(ui + "/")
            page.get_by_role("button", name=re.compile("^start$", re.I)).click()
            page.get_by_role("tab", name="LLM").click()
            assert "tab=llm" in page.url

            def live_numbers() -> dict[str, str] | None:
                cells = _table_cells(page, "Aggregated")
                ok = cells and _number(cells["TTFT p50 (ms)"]) and _number(cells["Output tokens/s"])
                return cells if ok else None

            live = wait_for("numbers in the LLM tab", live_numbers, 20.0, 0.25)
            assert _number(live["Requests"]) > 0
            frame = page.frame_locator("#llm-frame")  # the charts, embedded under the table
            wait_for("the TTFT chart", lambda: frame.locator("#c-ttft path").count() >= 2, 10.0)
            wait_for("the tokens/s chart", lambda: frame.locator("#c-tps path").count() >= 1, 5.0)
            assert "GPU" in frame.locator("#gpu").inner_text()
            wait_for("the GPU chart", lambda: frame.locator("#c-gpu path").count() >= 1, 10.0)
            # the latency charts show the recent window (the table stays cumulative)
            assert "last 10 s" in frame.locator("#l-ttft").inner_text()

            page.get_by_role("button", name=re.compile("^stop$", re.I)).click()
            wait_for("the run to stop", lambda: get_json(ui + "/llm/stats")["state"] == "stopped",
                     20.0)  # fmt: skip
            wait_for("the UI to show STOPPED", lambda: "STOPPED" in page.inner_text("header"), 10.0)
            time.sleep(0.5)  # the stopping poll's answer is rendered
            # the GPU panel keeps its last values, says how old they are and that it stopped
            asof = wait_for(
                "the GPU panel marked stale",
                lambda: (t := frame.locator("#gpu-asof").inner_text()) and "last values" in t and t,
                6.0,
            )
            assert re.search(r"as of \d\d:\d\d:\d\d \(\d+ s ago; the test is stopped\)", asof)
            assert "stale" in (frame.locator("#gpu").get_attribute("class") or "")
            # one time axis for all four charts, the GPU chart's included
            ticks = [frame.locator(f"#c-{c} text.tick").all_inner_texts()
                     for c in ("ttft", "tpot", "tps", "gpu")]  # fmt: skip
            assert len(ticks[0]) == 3 and all(t == ticks[0] for t in ticks), ticks
            stats = get_json(ui + "/llm/stats")
            for name in (ENDPOINT, "Aggregated"):
                cells, row = _table_cells(page, name), _row(stats, name)
                assert cells["Requests"] == str(row["requests"])  # cancelled ones are apart
                assert cells["Cancelled"] == str(row["cancelled"])
                assert cells["TTFT p50 (ms)"] == f"{row['ttft_p50_s'] * 1e3:.1f}"
                assert cells["TTFT p99 (ms)"] == f"{row['ttft_p99_s'] * 1e3:.1f}"
                assert cells["TPOT p50 (ms)"] == f"{row['tpot_p50_s'] * 1e3:.2f}"
                assert cells["Output tokens/s"] == f"{row['output_tokens_per_s']:.1f}"
                assert cells["Input tokens/s"] == f"{row['input_tokens_per_s']:.1f}"
            assert 0 < _row(stats, ENDPOINT)["ttft_p50_s"] < 5.0
            assert _row(stats, ENDPOINT)["output_tokens_per_s"] > 0
            # the errors table in the tab: each kind with the server's own message
            (five,) = stats["errors"]
            failed = _row(stats, "Aggregated")["failures"]  # cancelled ones are not failures
            assert five["kind"] == "http_5xx" and five["count"] == failed > 0
            assert five["message"] == FIVE and five["message_count"] == failed
            shown = [c.strip() for c in frame.locator("#errors-table tbody td").all_inner_texts()]
            share = f"{five['share'] * 100:.1f}"
            assert shown == ["http_5xx", str(failed), share, str(failed), FIVE], shown
            page.screenshot(path=str(tmp_path / "llm-tab.png"), full_page=True)
            assert (tmp_path / "llm-tab.png").stat().st_size > 10_000

            # Locust's own tabs still work next to ours, and count the same requests
            locust_stats = get_json(ui + "/stats/requests")
            own = next(s for s in locust_stats["stats"] if s["name"] == ENDPOINT)
            assert _table_cells(page, ENDPOINT)["Requests"] == str(own["num_requests"])
            expected = {
                "Statistics": ENDPOINT, "Failures": "Failure", "Exceptions": "",
                "Current ratio": "Chat", "Download Data": "Download LLM stats CSV", "Logs": "",
            }  # fmt: skip
            for title, text in expected.items():
                page.get_by_role("tab", name=title).click()
                wait_for(f"the {title} tab", lambda t=title: "tab=" in page.url and (
                    page.get_by_role("tab", name=t).get_attribute("aria-selected") == "true"),
                    5.0)  # fmt: skip
                if text:
                    wait_for(f"{text!r} in {title}", lambda x=text: x in page.inner_text("main"),
                             5.0)  # fmt: skip
                assert page.locator("#llm-embed").count() == 0  # our embed stays in our tab
            page.get_by_role("tab", name="Charts").click()
            wait_for("Locust's charts", lambda: page.locator("canvas").count() > 0, 5.0)
            page.get_by_role("tab", name="LLM").click()
            wait_for("the embed again", lambda: page.locator("#llm-frame").count() == 1, 5.0)

            # the Prometheus view of the same stats
            text = get(ui + "/llm/metrics").decode()
            families = {f.name: f for f in text_string_to_metric_families(text)}
            requests = families["locust_llm_requests"].samples[0]
            assert requests.labels == {"name": ENDPOINT}
            assert requests.value == _row(stats, ENDPOINT)["requests"]
            assert any(s.name == "locust_llm_ttft_seconds_bucket"
                       for s in families["locust_llm_ttft_seconds"].samples)  # fmt: skip

            # the report link: 404 with the command to run, then the file once it exists
            with pytest.raises(Exception, match="404"):
                get(ui + "/llm/report")
            wait_for("the run dir", lambda: (run_dir / "run.json").is_file(), 10.0)
            (run_dir / "report.html").write_text("<html><body>the LLM report</body></html>")
            assert b"the LLM report" in get(ui + "/llm/report")
            wait_for("the report link", lambda: frame.locator("#report-link").count() == 1, 6.0)

            # Locust's reset clears the LLM stats too
            page.get_by_role("button", name=re.compile("^reset$", re.I)).click()
            wait_for("empty LLM stats", lambda: get_json(ui + "/llm/stats")["endpoints"] == [],
                     5.0)  # fmt: skip
            # Locust's reset fires its event (ours empties) before it resets its own table: a
            # read in between saw 40 requests there once, so wait for the handler to finish
            wait_for("empty Locust stats",
                     lambda: get_json(ui + "/stats/requests")["stats"][-1]["num_requests"] == 0,
                     5.0)  # fmt: skip
            assert get_json(ui + "/llm/stats")["errors"] == []  # the errors table's tally too
            assert "locust_llm_requests_total{" not in get(ui + "/llm/metrics").decode()
    assert not errors, errors


def test_distributed_llm_stats_merge_both_workers(tmp_path: Path) -> None:
    web_port, master_port = free_port(), free_port()
    ui = f"http://127.0.0.1:{web_port}"
    run_dir = tmp_path / "run"
    master = locust_ui(
        "http://placeholder", web_port, run_dir, "--master", "--master-bind-host", "127.0.0.1",
        "--master-bind-port", str(master_port), "--expect-workers", "2", "--autostart",
        "-u", "4", "-r", "4", "-t", "5s", "--stop-timeout", "10",
    )  # fmt: skip
    worker = [str(BIN / "locust"), "-f", "locustfiles/chat.py", "--worker", "--master-host",
              "127.0.0.1", "--master-port", str(master_port)]  # fmt: skip
    with running_sim(tmp_path / "sim.log", *SIM_ARGS) as host:
        master[master.index("http://placeholder")] = host
        with (
            spawn(master, tmp_path / "master.log"),
            spawn(worker, tmp_path / "worker1.log"),
            spawn(worker, tmp_path / "worker2.log"),
        ):
            wait_for("the run to start", lambda: get_json(ui + "/llm/stats")["endpoints"], 30.0)
            assert get_json(ui + "/llm/stats")["worker_count"] == 2
            wait_for("the run dir", lambda: (run_dir / "requests.parquet").is_file(), 40.0, 0.5)
            per_worker = pd.read_parquet(run_dir / "requests.parquet").groupby("worker_id").size()
            assert len(per_worker) == 2 and (per_worker > 0).all(), per_worker

            def merged() -> dict[str, Any] | None:  # workers report every 3 s, also after stopping
                # every request merged, and the master's state past "stopping": its last
                # worker's stop report can come after that worker's last stats (a CI read saw
                # every request while the state still said "stopping")
                payload = get_json(ui + "/llm/stats")
                done = _row(payload, ENDPOINT)["requests"] == per_worker.sum()
                return payload if done and payload["state"] == "stopped" else None

            stats = wait_for("every request of both workers and the run stopped", merged, 15.0, 0.5)
            locust_rows = get_json(ui + "/stats/requests")["stats"]
    llm = _row(stats, ENDPOINT)
    own = next(s for s in locust_rows if s["name"] == ENDPOINT)
    # requests the test cancelled itself are counted apart (in errors), as Locust leaves them out
    assert llm["requests"] == own["num_requests"]
    assert llm["failures"] == own["num_failures"]
    assert _row(stats, "Aggregated")["requests"] == llm["requests"]
    assert llm["output_tokens"] > 0 and llm["ttft_p50_s"] is not None
    # both workers' error messages reached the master's tally: one message for all the 500s
    said = {e["kind"]: e for e in stats["errors"]}
    assert said["http_5xx"]["count"] == llm["errors"]["http_5xx"] > 0
    assert said["http_5xx"]["message"] == FIVE
    assert said["http_5xx"]["message_count"] == said["http_5xx"]["count"]
    assert sum(e["count"] for e in said.values()) == llm["failures"]
