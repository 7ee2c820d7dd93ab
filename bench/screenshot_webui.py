"""Take the README's screenshot of the LLM tab: docs/img/llm-tab.png.

    .venv/bin/python bench/screenshot_webui.py [--out docs/img/llm-tab.png] [--at-stage 3]

Starts the simulator and Locust's web UI running the sweep locustfile (concurrency 4, 16, 48;
15 s a stage) on free ports, with the simulator's ``/metrics`` scraped for the GPU panel, opens
the LLM tab in headless system Chromium once the last stage has data, and saves a full-page PNG.
Everything it starts is stopped when it ends (about 40 s).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from webui_support import (  # noqa: E402 - the tests' helpers, found through sys.path
    chromium,
    free_port,
    get,
    get_json,
    locust_ui,
    running_sim,
    spawn,
    wait_for,
)

# The sweep's user and shape, plus a scraper of the simulator's /metrics for the GPU panel when
# the plugin does not start one itself.
LOCUSTFILE = f"""
import sys
sys.path.insert(0, {str(ROOT / "locustfiles")!r})
from sweep import Chat, Stages  # noqa: F401
from locust import events
from locust_llm.client.runtime import runtime
from locust_llm.telemetry.scraper import TelemetryScraper


@events.test_start.add_listener
def _scrape_sim(environment, **_kw):
    rt = runtime(environment)
    if rt.telemetry is None and not rt.is_worker:
        rt.telemetry = TelemetryScraper([environment.host.rstrip("/") + "/metrics"], 1.0).start()
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "llm-tab.png")
    parser.add_argument("--at-stage", type=int, default=3, help="1-based stage to shoot in")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="llm-shot-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "locustfile.py").write_text(LOCUSTFILE)
        port = free_port()
        ui = f"http://127.0.0.1:{port}"
        with running_sim(tmp / "sim.log", "--output-len", "uniform:48:96") as host:
            cmd = locust_ui(host, port, tmp / "run", "--autostart", "--llm-concurrency",
                            "4,16,48", "--llm-stage-duration", "15s")  # fmt: skip
            cmd[cmd.index("locustfiles/chat.py")] = str(tmp / "locustfile.py")
            with spawn(cmd, tmp / "locust.log"):
                wait_for("the web UI", lambda: get(ui + "/"), 30.0)

                def in_stage() -> bool:
                    stats = get_json(ui + "/llm/stats")
                    stage = stats["stage"]
                    return bool(stage and stage["index"] + 1 >= args.at_stage)

                wait_for(f"stage {args.at_stage}", in_stage, 60.0, 0.5)
                time.sleep(4.0)  # a few seconds of the stage in the charts
                with chromium(tmp / "profile", width=1400, height=900) as page:
                    page.goto(ui + "/?tab=llm")
                    page.get_by_role("tab", name="LLM").click()
                    frame = page.frame_locator("#llm-frame")
                    wait_for("the charts", lambda: frame.locator("#c-ttft path").count() >= 2, 15.0)
                    time.sleep(2.5)  # the embed grows to its page's height
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(args.out), full_page=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
