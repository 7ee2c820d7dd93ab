"""Read a run's telemetry back from a real Prometheus server (``report --prometheus URL``).

:func:`read_prometheus` asks ``/api/v1/query_range`` for every metric the name maps know (one
union query ``{__name__=~"..."}``, plus Prometheus' own ``up``), groups the returned series by
``instance`` and evaluation time, and maps them with the same
:func:`locust_llm.telemetry.vocabularies.map_samples` the live scraper uses. The result is a
DataFrame in
telemetry.parquet's long format, except that

* ``time_s`` is the query's evaluation time (``start + k * step``): Prometheus returns the latest
  sample scraped at or before it (within its lookback window), so values lag by up to one scrape
  interval against a direct scrape;
* ``source`` is the series' ``instance`` label (``host:port``), not the scrape URL;
* ``scrape_up`` is Prometheus' ``up`` series for the instance (1 scraped, 0 failed); a failed
  scrape leaves no sample, so a gap is a missing row plus ``up`` 0, not a NaN row.

Long windows are split into requests of at most 10,000 steps (Prometheus refuses > 11,000).
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from locust_llm.errors import InputError
from locust_llm.telemetry.promtext import Sample
from locust_llm.telemetry.scraper import Row, rows_to_frame
from locust_llm.telemetry.signals import SCRAPE_UP
from locust_llm.telemetry.vocabularies import known_metrics, map_samples

if TYPE_CHECKING:
    import pandas as pd

MAX_STEPS_PER_QUERY = 10_000
Post = Callable[[str, dict[str, str], float], bytes]


def default_query() -> str:
    """One PromQL selector matching every metric the name maps read, and ``up``."""
    return '{__name__=~"' + "|".join([*known_metrics(), "up"]) + '"}'


def _post(url: str, form: dict[str, str], timeout_s: float) -> bytes:
    data = urllib.parse.urlencode(form).encode()
    request = urllib.request.Request(url, data=data, method="POST")
    request.add_header("Content-Type", "application/x-www-form-urlencoded")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.read()
    except urllib.error.HTTPError as exc:  # Prometheus explains 4xx/5xx in a JSON body
        with exc:  # and the answer's socket is closed
            body = exc.read()
        try:
            detail = json.loads(body).get("error", "")
        except (ValueError, AttributeError):
            detail = body[:120].decode("utf-8", errors="replace")
        raise InputError(f"--prometheus {url}: HTTP {exc.code} ({detail or exc.reason})") from exc
    except urllib.error.URLError as exc:
        raise InputError(f"--prometheus {url}: unreachable ({exc.reason})") from exc
    except OSError as exc:
        raise InputError(f"--prometheus {url}: unreachable ({type(exc).__name__}: {exc})") from exc


def _matrix(body: bytes, url: str) -> list[dict[str, Any]]:
    try:
        payload = json.loads(body)
    except ValueError as exc:
        raise InputError(f"--prometheus {url}: not a Prometheus API response (not JSON)") from exc
    if not isinstance(payload, dict) or payload.get("status") != "success":
        error = payload.get("error", payload) if isinstance(payload, dict) else payload
        raise InputError(f"--prometheus {url}: query failed ({str(error)[:200]})")
    data = payload.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        kind = data.get("resultType") if isinstance(data, dict) else type(data).__name__
        raise InputError(f"--prometheus {url}: expected a matrix result, got {kind!r}")
    result = data.get("result")
    if not isinstance(result, list):
        raise InputError(f"--prometheus {url}: malformed matrix result")
    return result


def _windows(start_s: float, end_s: float, step_s: float) -> list[tuple[float, float]]:
    span = step_s * (MAX_STEPS_PER_QUERY - 1)
    windows = []
    lo = start_s
    while lo <= end_s:
        hi = min(lo + span, end_s)
        windows.append((lo, hi))
        lo = hi + step_s
    return windows


def series_to_rows(result: list[dict[str, Any]]) -> list[Row]:
    """Matrix series -> telemetry rows, mapped per (instance, evaluation time)."""
    grouped: dict[tuple[str, float], list[Sample]] = defaultdict(list)
    rows: list[Row] = []
    for series in result:
        labels = dict(series.get("metric", {}))
        name = labels.pop("__name__", "")
        instance = labels.get("instance", "")
        for stamp, text in series.get("values", []):
            value = float(text)
            if name == "up":
                rows.append((float(stamp), instance, SCRAPE_UP, "", value))
            else:
                grouped[(instance, float(stamp))].append((name, labels, value))
    for (instance, stamp), samples in grouped.items():
        rows.extend((stamp, instance, sig, gpu, value) for sig, gpu, value in map_samples(samples))
    return rows


def read_prometheus(
    url: str,
    start_s: float,
    end_s: float,
    step_s: float = 1.0,
    *,
    queries: Sequence[str] | None = None,
    timeout_s: float = 10.0,
    post: Post = _post,
) -> pd.DataFrame:
    """Canonical signals for ``[start_s, end_s]`` (unix seconds) from the Prometheus at ``url``.

    ``queries`` are PromQL expressions whose series carry the original metric names (default:
    :func:`default_query`). Unknown names are ignored. Raises :class:`InputError` for a bad
    window, an unreachable server or a response that is not a successful matrix.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InputError(f"--prometheus {url!r}: expected an http(s):// URL")
    for name, value in (("start", start_s), ("end", end_s), ("step", step_s)):
        if not math.isfinite(value):
            raise InputError(f"--prometheus window: {name} {value!r} is not a finite number")
    if step_s <= 0 or end_s < start_s:
        raise InputError(
            f"--prometheus window: need start <= end and step > 0, got {start_s}..{end_s} "
            f"step {step_s}"
        )
    api = url.rstrip("/") + "/api/v1/query_range"
    rows: list[Row] = []
    for query in queries or [default_query()]:
        for lo, hi in _windows(start_s, end_s, step_s):
            form = {"query": query, "start": repr(lo), "end": repr(hi), "step": repr(step_s)}
            rows.extend(series_to_rows(_matrix(post(api, form, timeout_s), url)))
    return rows_to_frame(rows)
