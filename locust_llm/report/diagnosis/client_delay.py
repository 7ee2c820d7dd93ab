"""The client's own delay per stage: how long after the kernel received a token Python read it.

Records read by the kernel-stamp transport (``--llm-transport kernel``) carry two stamps of
their first and last token: ``*_kernel_s`` (the kernel's receive stamp of the bytes) and
``*_user_s`` (when the worker's greenlet got to the line). Their difference is client delay:
time the load generator added, which the kernel-stamped TTFT/TPOT/ITL leave out but which still
tells that the worker is falling behind its streams (a closed loop sends its next request that
much later). :func:`add_client_delay` puts its per-stage distribution into the stage rows
(``client_delay_first_p50_s``, ``..._p99_s``, ``..._max_s``, the same for ``last``,
``client_delay_stamped``, the records with both stamps, and ``client_delay_first_merged``, those
whose first token was read together with the next one, so that its stamp is an upper bound:
the worker came later than the gap between the two tokens), and ``ttft_error_bound_p99_s`` /
``ttft_error_bound_max_s``, over the stamped records, how much earlier than its stamp a first
token can have arrived (``ttft_error_bound_s``: 0 where the stamp is the first token's own
segment's, for a merged one its stamp minus the latest time the reader knew the socket empty:
every TTFT of the stage lies within that of its value); the verdict's ``client_bound`` rule
reads ``client_delay_first_p99_s`` against the ``client_delay_bound_s`` threshold, with at least
``client_delay_min_late`` requests that late (``client_delay_first_late``: the requests whose first
token was read at least ``client_delay_bound_s`` late; thresholds:
:class:`locust_llm.report.diagnosis.thresholds.Thresholds`).

The send side beside it: ``sent_s`` (when the request's final send returned, from its start
stamp) is the send delay, what the worker added before the request's last byte left (the
connect of a new connection, the wait for its turn in the worker); its per-stage p50/p99/max
are ``send_delay_p50_s`` etc. (nan where the transport does not stamp sends). The TTFT of a
record includes it; the receive stamps do not take it out.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from locust_llm.report.diagnosis.thresholds import DEFAULT_THRESHOLDS
from locust_llm.rundir.layout import Stage, assign_stages, stage_ends

#: The requests.parquet columns read for it (``report/load.py`` loads them when present).
REQUEST_COLUMNS: tuple[str, ...] = (
    "first_token_kernel_s",
    "last_token_kernel_s",
    "first_token_user_s",
    "last_token_user_s",
    "first_token_merged",
    "ttft_error_bound_s",
    "sent_s",
)

#: The stage-row columns :func:`add_client_delay` fills (nan where no record has both stamps).
COLUMNS: tuple[str, ...] = tuple(
    f"client_delay_{which}_{stat}_s"
    for which in ("first", "last")
    for stat in ("p50", "p99", "max")
) + tuple(f"send_delay_{stat}_s" for stat in ("p50", "p99", "max"))


def client_delays(requests: pd.DataFrame, which: str) -> np.ndarray:
    """Per request: user-space read - kernel stamp of its ``which`` (first/last) token, in
    seconds; nan where either stamp is missing."""
    user, kernel = f"{which}_token_user_s", f"{which}_token_kernel_s"
    if user not in requests or kernel not in requests:
        return np.full(len(requests), np.nan)
    return requests[user].to_numpy(float, na_value=np.nan) - requests[kernel].to_numpy(
        float, na_value=np.nan
    )


def stage_delay_stats(delays: np.ndarray) -> dict[str, float]:
    """p50, p99 and max of the finite ``delays`` (nan when there are none)."""
    finite = delays[np.isfinite(delays)]
    if not len(finite):
        return {"p50": np.nan, "p99": np.nan, "max": np.nan}
    p50, p99 = np.percentile(finite, [50, 99])
    return {"p50": float(p50), "p99": float(p99), "max": float(finite.max())}


def add_client_delay(
    rows: Sequence[MutableMapping[str, Any]],
    requests: pd.DataFrame,
    stages: Sequence[Stage],
    run_end_wall_s: float,
) -> None:
    """Fill each stage row (``rows`` in the order of ``stages``) with :data:`COLUMNS`."""
    if "start_wall_s" in requests:
        start = requests["start_wall_s"].to_numpy(float, na_value=np.nan)
    else:
        start = np.full(len(requests), np.nan)
    stage_ix = assign_stages(start, stages, stage_ends(stages, run_end_wall_s))
    ok = (
        requests["ok"].fillna(False).to_numpy(bool)
        if "ok" in requests
        else np.ones(len(requests), bool)
    )
    first, last = client_delays(requests, "first"), client_delays(requests, "last")
    sent = (
        requests["sent_s"].to_numpy(float, na_value=np.nan)
        if "sent_s" in requests
        else np.full(len(requests), np.nan)
    )
    # records from before the flag existed carry no column: their count is unknown (nan)
    merged = (
        requests["first_token_merged"].fillna(False).to_numpy(bool)
        if "first_token_merged" in requests
        else None
    )
    # records from before the bound existed, or without kernel stamps: nan
    bounds = (
        requests["ttft_error_bound_s"].to_numpy(float, na_value=np.nan)
        if "ttft_error_bound_s" in requests
        else np.full(len(requests), np.nan)
    )
    for row, stage in zip(rows, stages, strict=True):
        pick = (stage_ix == stage.index) & ok
        row["client_delay_stamped"] = int(np.isfinite(first[pick]).sum())
        row["client_delay_first_late"] = int(
            (first[pick] >= DEFAULT_THRESHOLDS.client_delay_bound_s).sum()
        )
        row["client_delay_first_merged"] = (
            np.nan if merged is None else int((merged[pick] & np.isfinite(first[pick])).sum())
        )
        bound = stage_delay_stats(bounds[pick])
        row["ttft_error_bound_p99_s"], row["ttft_error_bound_max_s"] = bound["p99"], bound["max"]
        for which, delays in (("first", first), ("last", last)):
            for stat, value in stage_delay_stats(delays[pick]).items():
                row[f"client_delay_{which}_{stat}_s"] = value
        for stat, value in stage_delay_stats(sent[pick]).items():
            row[f"send_delay_{stat}_s"] = value


#: The report table's columns after the load column.
TABLE_HEADERS: tuple[str, ...] = (
    "stamped records",
    "first token merged",
    "TTFT error bound max ms",
    "first token p50 ms",
    "first token p99 ms",
    "first token max ms",
    "last token p50 ms",
    "last token p99 ms",
    "last token max ms",
    "send p50 ms",
    "send p99 ms",
    "send max ms",
)


def client_delay_rows(
    requests: pd.DataFrame, stages: Sequence[Stage], run_end_wall_s: float
) -> list[dict[str, Any]]:
    """One row per stage (:data:`COLUMNS` and ``client_delay_stamped``); empty when no record
    carries kernel stamps (a geventhttpclient run: there is no client delay to show)."""
    rows: list[dict[str, Any]] = [{"stage": s.index} for s in stages]
    add_client_delay(rows, requests, stages, run_end_wall_s)
    return rows if any(r["client_delay_stamped"] for r in rows) else []


def late_first_reads(row: Mapping[str, Any], thresholds: Any = None) -> tuple[float, float] | None:
    """``(p99 delay, requests that late)`` of a stage whose first tokens were read late: the p99
    at ``client_delay_bound_s`` for at least ``client_delay_min_late`` requests (a count of nan,
    not counted, is judged on the p99 alone); None otherwise. The one test of "read late", for
    the ``client_bound`` rule and the caveat alike."""
    th = thresholds or DEFAULT_THRESHOLDS
    delay = float(row.get("client_delay_first_p99_s", np.nan))
    late = float(row.get("client_delay_first_late", np.nan))
    if not delay >= th.client_delay_bound_s or late < th.client_delay_min_late:
        return None
    return delay, late


def host_contended(row: Mapping[str, Any], thresholds: Any = None) -> bool:
    """Other processes kept a Locust worker from its core: its CPU demand (time running or
    waiting for a core, :mod:`locust_llm.client.cpu_demand`) peaked at ``client_cpu`` while the
    CPU it got stayed below that."""
    th = thresholds or DEFAULT_THRESHOLDS
    demand = float(row.get("worker_cpu_demand_max", np.nan))
    cpu = float(row.get("worker_cpu_max", np.nan))
    return demand >= th.client_cpu and not cpu >= th.client_cpu


def contention_caveats(rows: Sequence[Mapping[str, Any]], thresholds: Any = None) -> list[str]:
    """One warning per stage whose worker waited for a core taken by other processes
    (:func:`host_contended`): a caveat on its timings, with the action that fits."""
    out = []
    for row in rows:
        if not host_contended(row, thresholds):
            continue
        demand = float(row["worker_cpu_demand_max"])
        cpu = float(row.get("worker_cpu_max", np.nan))
        got = f"{cpu:.0%}" if cpu == cpu else "less"
        out.append(
            f"stage {row.get('stage')}: a Locust worker wanted {demand:.0%} of a core and got "
            f"{got}, the rest waiting for one: other processes took this host's cores, so its "
            "reads and sends are late by that wait (a caveat on the timings, not the stage's "
            "limit; run the load generator on a quieter host: more workers would share the "
            "same cores)"
        )
    return out


def send_caveats(rows: Sequence[Mapping[str, Any]], thresholds: Any = None) -> list[str]:
    """One warning per stage whose requests left the client late: the send delay's P50 at
    ``send_delay_min_s`` and at ``send_delay_share`` of TTFT P50. Every TTFT of the stage
    includes it (the receive stamps do not take it out), so the warning gives its share and
    what takes it off the timed path. A contended host's stage is left to
    :func:`contention_caveats`, which names that cause."""
    th = thresholds or DEFAULT_THRESHOLDS
    out = []
    for row in rows:
        send = float(row.get("send_delay_p50_s", np.nan))
        ttft = float(row.get("ttft_p50_s", np.nan))
        if not (send >= th.send_delay_min_s and ttft > 0 and send >= th.send_delay_share * ttft):
            continue
        if host_contended(row, th):
            continue
        p99 = float(row.get("send_delay_p99_s", np.nan))
        tail = f", P99 {p99 * 1e3:,.1f} ms" if p99 == p99 else ""
        out.append(
            f"stage {row.get('stage')}: requests left the client a median "
            f"{send * 1e3:,.1f} ms after their start stamps ({send / ttft:.0%} of TTFT P50 "
            f"{ttft * 1e3:,.0f} ms{tail}), and every TTFT of the stage includes it. The usual "
            "cause is a new connection's connect and the wait behind the other users' connects "
            "at a burst (--llm-preconnect opens each user's connection before its first "
            "request); a worker busy with other streams delays its sends too. A measurement "
            "caveat, not the stage's limit."
        )
    return out


def delay_caveats(
    rows: Sequence[MutableMapping[str, Any]], kinds: Sequence[str], thresholds: Any = None
) -> list[str]:
    """One warning per stage whose first tokens were read late (p99 at ``client_delay_bound_s``
    for ``client_delay_min_late`` requests) without its verdict being ``client_bound`` (``kinds``:
    the stages' verdict kinds): the delay is a caveat on the timings, with its share of TTFT."""
    th = thresholds or DEFAULT_THRESHOLDS
    out = []
    for row, kind in zip(rows, kinds, strict=True):
        reads = late_first_reads(row, th)
        if kind == "client_bound" or reads is None or host_contended(row, th):
            continue  # a contended host's delay: contention_caveats says why
        delay, late = reads
        ttft = float(row.get("ttft_p50_s", np.nan))
        share = f", {delay / ttft:.0%} of TTFT P50 {ttft * 1e3:,.0f} ms" if ttft > 0 else ""
        count = f"{late:.0f} requests" if late == late else "p99"
        out.append(
            f"stage {row.get('stage')}: the worker read first tokens up to {delay * 1e3:.1f} ms "
            f"after the kernel received them ({count}{share}): a measurement caveat, not the "
            "stage's limit (the kernel-stamped TTFT, TPOT and ITL leave it out; a closed loop "
            "sends its next request that much later)"
        )
    return out
