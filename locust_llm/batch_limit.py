"""The server's batch limit (sequences it decodes at once), for the report's batch-limit reading.

``--llm-server-max-num-seqs`` wins when given. Otherwise the master asks the server once, at the
start of the run (unless ``--llm-server-metrics none`` turned talking to the server about itself
off), where the server says it:

==============  ===================================  =========================================
server          where                                field
==============  ===================================  =========================================
llama.cpp       ``GET /props``                       ``total_slots`` (``--parallel``)
==============  ===================================  =========================================

vLLM, SGLang and TGI do not expose their ``--max-num-seqs`` / ``--max-running-requests`` /
``--max-batch-size`` over HTTP in a form read here (see ``docs/servers.md``); for them the report
falls back to the KV-cache estimate. A server that does not answer, or answers something else,
gives no limit (never a guess). The result lands in ``run.json``'s ``extra`` as ``max_num_seqs``
with ``max_num_seqs_source`` saying where it came from.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

Fetch = Callable[[str, float], str]

#: (path, field, source text) probed in order; the first positive whole number wins.
PROBES: tuple[tuple[str, str, str], ...] = (("/props", "total_slots", "llama.cpp /props"),)
TIMEOUT_S = 2.0


def _fetch(url: str, timeout_s: float) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return str(response.read(1 << 20).decode("utf-8", errors="replace"))
    except urllib.error.HTTPError as exc:  # it holds the answer's socket open until closed
        exc.close()
        raise


def limit_from_body(body: str, field: str) -> int | None:
    """The positive whole number ``field`` of a JSON object ``body``, else None."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        return None
    value = data.get(field) if isinstance(data, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


def probe(host: str, fetch: Fetch = _fetch) -> tuple[int, str] | None:
    """``(limit, "llama.cpp /props total_slots")`` from the server at ``host``, or None."""
    for path, field, source in PROBES:
        try:
            body = fetch(host.rstrip("/") + path, TIMEOUT_S)
        except (OSError, ValueError, urllib.error.URLError, http.client.HTTPException):
            continue
        limit = limit_from_body(body, field)
        if limit is not None:
            return limit, f"{source} {field}"
    return None


def run_info_extra(given: int, host: str, fetch: Fetch = _fetch) -> dict[str, Any]:
    """``run.json`` extra fields: the given limit, else the probed one, else nothing."""
    if given:
        return {"max_num_seqs": given, "max_num_seqs_source": "--llm-server-max-num-seqs"}
    found = probe(host, fetch) if host else None
    if found is None:
        return {}
    return {"max_num_seqs": found[0], "max_num_seqs_source": found[1]}
