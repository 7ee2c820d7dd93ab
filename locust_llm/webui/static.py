"""The browser side of the LLM tab, shipped as package data in ``locust_llm/webui/static/``.

``page.html`` (with ``page.css`` and ``page.js``) is the ``/llm`` page: no CDN, no network beyond
its own ``llm/stats``. It polls ``llm/stats`` every 2 s and draws the endpoint table, the run line
(state, users, stage, workers), the GPU/server panel and four SVG charts (TTFT and TPOT
percentiles, tokens/s, GPU utilization / bandwidth / KV-cache usage). ``?embed=1`` drops the table
and header, for use inside the tab, where Locust's own table already shows it.

``tab.js`` is loaded by Locust's index page (see :mod:`locust_llm.webui.routes`). While the URL
says ``tab=llm`` it appends, inside the table container of the tab (so React removes it together
with the table), a link to ``/llm`` and an iframe of ``/llm?embed=1``.

Files are read with :mod:`importlib.resources`, once per process.
"""

from __future__ import annotations

import functools
from importlib import resources

#: Every static file, served at ``/llm/<name>`` (``page.html`` at ``/llm`` itself).
STATIC_FILES: dict[str, str] = {
    "page.html": "text/html",
    "page.css": "text/css",
    "page.js": "application/javascript",
    "tab.js": "application/javascript",
}


@functools.cache
def static_text(name: str) -> str:
    """The text of static file ``name`` (one of :data:`STATIC_FILES`)."""
    if name not in STATIC_FILES:
        raise KeyError(f"no static file {name!r}; known: {', '.join(STATIC_FILES)}")
    return (resources.files(__package__) / "static" / name).read_text(encoding="utf-8")
