"""The "LLM" tab in Locust's web UI, ``/llm/stats`` (JSON) and ``/llm/metrics`` (Prometheus).

:func:`install` runs on the master (or single process) when it has a web UI. It adds, under
Locust's ``--web-base-path``:

==================  ===========================================================================
``/llm``            self-contained page: endpoint table, GPU/server panel, live charts
``/llm/stats``      JSON of :func:`locust_llm.webui.data.stats_payload` (NaN -> null)
``/llm/stats.csv``  the live ``llm_stats.csv``
``/llm/metrics``    Prometheus text of the live stats (private registry, custom collector)
``/llm/report``     the run dir's ``report.html`` once ``locust-llm report RUN_DIR`` wrote it
``/llm/tab.js``     the script that embeds ``/llm?embed=1`` under the tab's table
``/llm/page.css``   the page's style and script (static files: :mod:`locust_llm.webui.static`)
``/llm/page.js``
==================  ===========================================================================

The tab itself uses Locust's undocumented web-UI extension points, checked against locust 2.47
(see docs/webui.md): ``template_args["extended_tabs"]`` / ``["extended_tables"]`` /
``["extended_csv_files"]``, and an ``extended_stats`` list added to every ``/stats/requests``
answer by an ``after_request`` hook. A second ``after_request`` hook adds ``/llm/tab.js`` to the
index page. Locust's "reset stats" fires ``reset_stats``, which clears the LLM stats too (on a
master: the merged stats of all workers).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from locust_llm.webui import data
from locust_llm.webui.static import STATIC_FILES, static_text

logger = logging.getLogger("locust_llm")

TAB_KEY = "llm"
TAB_TITLE = "LLM"
STATS_ENDPOINT = "locust.request_stats"  # Flask endpoint of Locust's /stats/requests
INDEX_ENDPOINT = "locust.index"


def _append(args: dict[str, Any], key: str, items: list[dict[str, Any]]) -> None:
    """Add ``items`` to a list in Locust's template args, keeping what others put there."""
    current = [i for i in (args.get(key) or []) if i not in items]
    args[key] = [*current, *items]


def install(environment: Any, runtime: Any) -> None:
    """Add the LLM tab and its routes to ``environment.web_ui`` (call before the UI starts)."""
    from flask import Response, request

    web_ui = environment.web_ui
    app = web_ui.app
    auth = web_ui.auth_required_if_enabled
    base = (getattr(environment.parsed_options, "web_base_path", None) or "").rstrip("/")

    def payload() -> dict[str, Any]:
        return data.stats_payload(runtime, environment.runner)

    def static(name: str) -> Any:
        def view() -> Response:
            return Response(static_text(name), mimetype=STATIC_FILES[name])

        return view

    def stats_json() -> Response:
        body = json.dumps(payload(), allow_nan=False, default=str)
        return Response(body, mimetype="application/json", headers={"Cache-Control": "no-store"})

    def stats_csv() -> Response:
        return Response(
            data.stats_csv(runtime.stats), mimetype="text/csv",
            headers={"Content-Disposition": "attachment; filename=llm_stats.csv"},
        )  # fmt: skip

    def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        body = data.metrics_text(runtime, environment.runner)
        return Response(body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def report() -> Response:
        run_dir = runtime.run_dir
        path = None if run_dir is None else run_dir / "report.html"
        if path is None or not path.is_file():
            text = (
                "No LLM report: no run dir yet\n" if run_dir is None else
                f"No LLM report: {path} does not exist yet; when the run has ended, "
                f"run: locust-llm report {run_dir}\n"
            )  # fmt: skip
            return Response(text, status=404, mimetype="text/plain")
        return Response(
            path.read_bytes(), mimetype="text/html",
            headers={"Content-Disposition": f"inline; filename={run_dir.name}-report.html"},
        )  # fmt: skip

    routes = (
        ("/llm", "llm_page", static("page.html")),
        ("/llm/stats", "llm_stats", stats_json),
        ("/llm/stats.csv", "llm_stats_csv", stats_csv),
        ("/llm/metrics", "llm_metrics", metrics),
        ("/llm/report", "llm_report", report),
        ("/llm/tab.js", "llm_tab_js", static("tab.js")),
        ("/llm/page.css", "llm_page_css", static("page.css")),
        ("/llm/page.js", "llm_page_js", static("page.js")),
    )
    for path, name, view in routes:
        app.add_url_rule(base + path, name, auth(view))

    @app.after_request
    def _extend(response: Response) -> Response:
        try:
            if request.endpoint == STATS_ENDPOINT and response.mimetype == "application/json":
                rows = data.extended_stats(runtime, environment.runner, TAB_KEY)
                _add_extended_stats(response, rows)
            elif request.endpoint == INDEX_ENDPOINT and response.mimetype == "text/html":
                _add_tab_script(response)
        except Exception:  # the LLM tab must never break Locust's own UI
            logger.exception("locust-llm: cannot extend %s", request.path)
        return response

    args = web_ui.template_args
    _append(args, "extended_tabs", [{"title": TAB_TITLE, "key": TAB_KEY}])
    _append(args, "extended_tables", [{"key": TAB_KEY, "structure": data.table_structure()}])
    _append(args, "extended_csv_files", [
        {"href": "./llm/stats.csv", "title": "Download LLM stats CSV"},
        {"href": "./llm", "title": "Open the LLM live page (charts)"},
        {"href": "./llm/report", "title": "Download the LLM report (after locust-llm report)"},
    ])  # fmt: skip
    environment.events.reset_stats.add_listener(lambda **_kw: runtime.stats.reset())


def _add_extended_stats(response: Any, ours: list[dict[str, Any]]) -> None:
    """Put the tab's rows into a ``/stats/requests`` answer (replacing ours, keeping others')."""
    answer = json.loads(response.get_data())
    others = [e for e in answer.get("extended_stats") or [] if e.get("key") != TAB_KEY]
    answer["extended_stats"] = [*others, *ours]
    response.set_data(json.dumps(answer, default=str))


def _add_tab_script(response: Any) -> None:
    html = response.get_data(as_text=True)
    if "llm/tab.js" in html:
        return
    tag = '<script src="./llm/tab.js"></script>'
    html = html.replace("</body>", f"{tag}\n</body>", 1) if "</body>" in html else html + tag
    response.set_data(html)
