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
``--max-batch-size`` over HTTP in a form read here (see ``docs/servers.md``). A server that does
not answer, or answers something else, gives no limit (never a guess). The result lands in
``run.json``'s ``extra`` as ``max_num_seqs`` with ``max_num_seqs_source`` saying where it came
from.

Where neither gave one, the report reads the limit the way the server shows it
(:func:`limit_from_gauges`): the running gauge flat at one value while requests wait and the KV
cache is below full; the source then says so ("running gauge flat at 16 in 12 of 13 samples
...").
"""

from __future__ import annotations

import http.client
import json
import math
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
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


#: A flat running gauge: samples within this share of the plateau (or one sequence) ...
FLAT_SHARE = 0.1
#: ... at least this share of the samples in which more were asked for than the plateau.
FLAT_SAMPLES = 0.5
#: KV-cache usage from which the KV pool, not a batch limit, may be what holds requests back.
FULL_KV = 0.9
MIN_FLAT_SAMPLES = 3


def _room_for_one_more(running: float, kv_usage: float) -> bool:
    """The KV cache's free share holds one more sequence of the running ones' mean size."""
    return 1.0 - kv_usage >= kv_usage / max(running, 1.0)


def limit_from_gauges(samples: Iterable[tuple[float, float, float]]) -> tuple[int, str] | None:
    """The batch limit a server shows without saying it, from ``(running, waiting, kv_usage)``
    gauge samples of one run (NaN = not sampled), or None.

    A scheduler admits a waiting request unless the token budget, the KV cache or its batch
    limit stops it. ``top`` is the most sequences that ever ran. Where more were asked for
    than that (``running + waiting > top``, ``waiting`` >= 1) while the KV cache was below
    :data:`FULL_KV` with room for one more sequence (its free share at least the running
    sequences' mean share: 7 sequences at 89% leave no room for an eighth), and ``running``
    sat at the plateau (within :data:`FLAT_SHARE` of ``top``, or one sequence: the gauge is
    read after a step's finished sequences left) in at least :data:`MIN_FLAT_SAMPLES` and
    :data:`FLAT_SAMPLES` of those samples, ``top`` is the limit.
    Without a KV signal, no limit (a full KV cache would look the same). A request that
    waits only for the step under way reads ``running + waiting <= top`` and does not count.
    A batch held flat by the token budget (prompts queue for prefill compute) reads the same:
    the limit is then at least that value, and the verdict tests the budget first.
    """
    clean = [(r, w, k) for r, w, k in samples if math.isfinite(r) and math.isfinite(w)]
    if not clean:
        return None
    top = max(r for r, _, _ in clean)
    asked = [(r, k) for r, w, k in clean if w >= 1 and r + w > top and math.isfinite(k)]
    asked = [(r, k) for r, k in asked if k < FULL_KV and _room_for_one_more(r, k)]
    flat = [r for r, _ in asked if r >= top - max(1.0, FLAT_SHARE * top)]
    if top < 1 or len(flat) < max(MIN_FLAT_SAMPLES, FLAT_SAMPLES * len(asked)):
        return None
    kv_max = max(k for _, k in asked)
    return round(top), (
        f"running gauge flat at {top:.0f} in {len(flat)} of {len(asked)} samples with more "
        f"requests than that asked for, KV cache at most {kv_max:.0%}"
    )
