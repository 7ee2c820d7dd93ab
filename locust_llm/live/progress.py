"""Live progress of a sweep on the console: one line per stage, for ``run`` and ``demo``.

The figures come from what the master already serves: its web UI's ``/llm/stats`` (the LLM
tab's JSON), polled once a second on 127.0.0.1. Per stage the line shows requests done (the
stage's own, from the records the master has received, and the stage's target when it ends at
a count), seconds since the stage began (out of its planned length when it ends after a
duration: the sweep's :class:`~locust_llm.workloads.stages.StagePlan`), and the stage's own
figures, which the master keeps from the records the workers send it every second
(:mod:`locust_llm.live.stage_tally`): QPS and output tokens/s (completions over the stage's last
10 s), TTFT P50 (the stage's completions, not the run's) and its failed requests. An open-loop
stage adds how late its recent requests were sent when the user pool falls behind ("sent 1.3 s
behind schedule"), and once the stage has ended the arrivals drawn in it that were never sent,
and why ("98 of 108 arrivals unsent (pool ran dry)": the load generator could not keep the
offered rate), from the counts the workers send with their records. While the server cannot be
reached it adds how many users are waiting out a back-off. "Done" is the stage's requests that
had ended (cancelled ones left out) in the records the master had received, so a request-count
stage ends only once they have all arrived.
A master without stage figures (an older one) leaves QPS and TTFT P50 to its ``Aggregated`` row
(Locust's 3 s worker reports).

A stage's line ends once the master says its figures have settled (its records and unsent
counts are in: about 1.5 s after its end), or :data:`SETTLE_WAIT_S` after a poll first saw it
over. On a terminal the line is redrawn in place (carriage return) and kept when the next stage
begins; elsewhere (CI logs, a pipe) a plain line is printed every ``every_s`` seconds and once
when a stage ends. Other messages (:meth:`ProgressLine.message`) go on their own lines without
breaking the live one. A stage's header (:meth:`ProgressLine.stage_header`: "[ 16 s] stage 2/5:
c=10", printed when the master starts the stage) waits until the lines of the stages before it
have ended (their figures settle a second or two after the next stage began), so each stage's
"(stage done)" line comes before the next one's header; it waits :data:`HEADER_WAIT_S` at most.
Pure apart from the stream it writes and, in :func:`poll_stats`, one loopback HTTP GET.
"""

from __future__ import annotations

import json
import math
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TextIO

from locust_llm.report.diagnosis.thresholds import DEFAULT_THRESHOLDS
from locust_llm.report.fmt import NO_DATA, is_num, ms, num
from locust_llm.workloads.stages import StagePlan

#: Seconds between polls of ``/llm/stats``.
POLL_S = 1.0
#: Seconds between plain lines when the output is not a terminal.
PLAIN_EVERY_S = 10.0
#: Seconds an ended stage's line waits at most for its figures to settle (its last records and
#: its unsent arrivals reach the master within the workers' batch interval, about 1.5 s).
SETTLE_WAIT_S = 4.0
#: Seconds a stage's header waits at most for the line of the stage before it to end (that
#: line waits up to SETTLE_WAIT_S for its figures after a poll, once a second, saw the stage end)
HEADER_WAIT_S = SETTLE_WAIT_S + 3 * POLL_S
#: How the line names each reason an open-loop arrival was not sent (client/arrivals.py).
UNSENT_WORDS = {"pool_ran_dry": "pool ran dry", "stage_ended": "stage ended",
                "run_stopped": "run stopped"}  # fmt: skip


class StageSeen(NamedTuple):
    """One stage begun, as ``/llm/stats``'s ``stages_begun`` says (NaN / None: not known)."""

    name: str
    target_requests: int | None = None
    done: int | None = None  # requests sent in it that ended (cancelled ones left out)
    #: the stage's own live figures from the records (``live``: the master sent them)
    live: bool = False
    qps: float = math.nan
    output_tokens_per_s: float = math.nan
    ttft_p50_s: float = math.nan
    failed: int | None = None
    dispatch_delay_s: float = math.nan  # open loop: how late its recent sends were, on average
    settled: bool | None = None  # its figures are final (None: the master does not say)
    #: open loop: arrivals drawn, and those never sent by reason (non-zero ones only)
    drawn: int | None = None
    unsent: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Snapshot:
    """What one poll of ``/llm/stats`` says about the sweep (NaN: no data yet)."""

    stage_index: int | None  # None: no stage running (before the first, after the last)
    stage_count: int = 0
    stage_name: str = ""
    target_requests: int | None = None
    requests: int = 0  # completed + failed so far in the whole run (cancelled left out)
    #: the current stage's QPS and TTFT P50 (from its records; from Locust's worker reports,
    #: the whole run's, when the master sends no stage figures)
    qps: float = math.nan
    ttft_p50_s: float = math.nan
    failures: int = 0  # failed so far in the whole run (counted in ``requests`` too)
    backing_off: int = 0  # users waiting out a back-off after connection errors now
    #: every stage begun so far, in order
    begun: tuple[StageSeen, ...] = ()


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else math.nan


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def stage_seen(entry: dict[str, Any]) -> StageSeen:
    """One ``stages_begun`` entry of ``/llm/stats`` as a :class:`StageSeen`."""
    unsent = entry.get("unsent") or {}
    settled = entry.get("settled")
    return StageSeen(
        name=str(entry.get("name") or ""),
        target_requests=_count(entry.get("target_requests")),
        done=_count(entry.get("done")),
        live="qps" in entry,
        qps=_number(entry.get("qps")),
        output_tokens_per_s=_number(entry.get("output_tokens_per_s")),
        ttft_p50_s=_number(entry.get("ttft_p50_s")),
        failed=_count(entry.get("failed")),
        dispatch_delay_s=_number(entry.get("dispatch_delay_s")),
        settled=settled if isinstance(settled, bool) else None,
        drawn=_count(entry.get("drawn")),
        unsent=tuple((str(k), int(n)) for k, n in unsent.items() if isinstance(n, int) and n > 0),
    )


def snapshot_from_payload(payload: dict[str, Any]) -> Snapshot:
    """The :class:`Snapshot` of a ``/llm/stats`` payload (its stage, the stages begun, and its
    ``Aggregated`` row where the stage has no figures of its own)."""
    rows = payload.get("endpoints") or []
    total = next((r for r in rows if r.get("name") == "Aggregated"), rows[-1] if rows else {})
    stage = payload.get("stage") or {}
    index = stage.get("index")
    index = index if isinstance(index, int) else None
    begun = tuple(stage_seen(s) for s in payload.get("stages_begun") or ())
    own = begun[index] if index is not None and index < len(begun) else None
    live = own is not None and own.live
    return Snapshot(
        stage_index=index,
        stage_count=int(stage.get("count") or 0),
        stage_name=str(stage.get("name") or ""),
        target_requests=_count(stage.get("target_requests")),
        requests=int(total.get("requests") or 0),
        qps=own.qps if own is not None and live else _number(total.get("requests_per_s")),
        ttft_p50_s=own.ttft_p50_s if own is not None and live else _number(total.get("ttft_p50_s")),
        failures=int(total.get("failures") or 0),
        backing_off=int((payload.get("backoff") or {}).get("users_waiting") or 0),
        begun=begun,
    )


def behind_text(seen: StageSeen | None) -> str:
    """``"sent 1.3 s behind schedule"`` for an open-loop stage whose recent requests were sent
    at least ``behind_schedule_s`` late on average (:data:`DEFAULT_THRESHOLDS`: a user pool that
    keeps up sends within milliseconds, one that ran dry ever later; the pool ran dry before
    the stage's end says how many arrivals it never sent); ``""`` otherwise."""
    delay = math.nan if seen is None else seen.dispatch_delay_s
    behind = is_num(delay) and delay >= DEFAULT_THRESHOLDS.behind_schedule_s
    return f"sent {delay:.1f} s behind schedule" if behind else ""


def unsent_text(seen: StageSeen | None) -> str:
    """``"12 of 60 arrivals unsent (pool ran dry)"`` for an open-loop stage that lost arrivals
    (several reasons: ``"(10 pool ran dry, 2 stage ended)"``); ``""`` when none was lost."""
    if seen is None or not seen.unsent:
        return ""
    total = sum(n for _, n in seen.unsent)
    if len(seen.unsent) == 1:
        why = UNSENT_WORDS.get(seen.unsent[0][0], seen.unsent[0][0])
    else:
        why = ", ".join(f"{num(n)} {UNSENT_WORDS.get(r, r)}" for r, n in seen.unsent)
    of = f" of {num(seen.drawn)}" if seen.drawn else ""
    return f"{num(total)}{of} arrivals unsent ({why})"


def poll_stats(base_url: str, timeout_s: float = 2.0) -> Snapshot | None:
    """GET ``<base_url>/llm/stats``; None while the web UI does not answer."""
    try:
        with urllib.request.urlopen(f"{base_url}/llm/stats", timeout=timeout_s) as resp:
            return snapshot_from_payload(json.loads(resp.read()))
    except (OSError, ValueError):
        return None


class ProgressLine:
    """Turns snapshots into one line per stage (live on a terminal, periodic otherwise)."""

    def __init__(
        self,
        out: TextIO,
        *,
        live: bool,
        every_s: float = PLAIN_EVERY_S,
        plan: Sequence[StagePlan] = (),
        clock: Callable[[], float] = time.monotonic,
        settle_wait_s: float = SETTLE_WAIT_S,
    ) -> None:
        self.out, self.live, self.every_s, self.clock = out, live, every_s, clock
        self.plan = tuple(plan)  # the sweep's stages (none: as /llm/stats says so far)
        self.settle_wait_s = settle_wait_s
        self.lock = threading.Lock()
        self.current: Snapshot | None = None  # the stage on the line
        self.started = 0.0  # clock when that stage was first seen
        self.ended: float | None = None  # clock when a poll first saw it over (None: running)
        self.baseline = 0  # run's requests when it was first seen
        self.baseline_failures = 0  # and its failures
        self.shown = ""  # text of the live line on screen
        self.next_index = 0  # the first stage no line has been shown for
        self.last_plain = -math.inf
        self.ended_lines: set[int] = set()  # stages whose line has ended
        #: stage headers waiting for the lines before them: (stage index, text, deadline)
        self.held: list[tuple[int, str, float]] = []

    def line(self, snap: Snapshot, now: float) -> str:
        """The text for the current stage at ``now`` (uses ``snap``'s counts and figures)."""
        cur = self.current or snap
        index = cur.stage_index or 0
        stages = len(self.plan) or cur.stage_count
        seen = snap.begun[index] if index < len(snap.begun) else None
        own = seen.done if seen is not None else None
        done = own if own is not None else max(snap.requests - self.baseline, 0)
        if cur.target_requests:
            count = f"{num(done)}/{num(cur.target_requests)} requests"
        else:
            count = f"{num(done)} requests"
        elapsed = (now if self.ended is None else self.ended) - self.started
        if seen is not None and seen.live:  # the stage's own figures, from its records
            qps_s, ttft_s = seen.qps, seen.ttft_p50_s
            tps = seen.output_tokens_per_s
            tokens = f", {f'{tps:,.0f}' if is_num(tps) else NO_DATA} tokens/s"
        else:  # a master without them: the run's, from Locust's worker reports
            qps_s, ttft_s, tokens = snap.qps, snap.ttft_p50_s, ""
        qps = f"{qps_s:.1f}" if is_num(qps_s) else NO_DATA
        duration = self.planned_s(index)
        secs = f"{elapsed:.0f}/{duration:.0f} s" if math.isfinite(duration) else f"{elapsed:.0f} s"
        if seen is not None and seen.failed is not None:
            failed = min(seen.failed, done)
        else:
            failed = min(max(snap.failures - self.baseline_failures, 0), done)
        errors = f", {num(failed)} failed ({failed / done:.0%})" if failed and done else ""
        unsent = unsent_text(seen)
        behind = behind_text(seen)
        unreachable = (
            f", {num(snap.backing_off)} users backing off (server unreachable)"
            if snap.backing_off
            else ""
        )
        return (
            f"  stage {index + 1}/{stages} {cur.stage_name}: {count}{errors}, {secs}, "
            f"QPS {qps}{tokens}, TTFT P50 {ms(ttft_s)} ms{', ' + behind if behind else ''}"
            f"{', ' + unsent if unsent else ''}{unreachable}"
        )

    def planned_s(self, index: int) -> float:
        """The planned length of stage ``index`` in seconds; NaN when it ends at a count."""
        planned = self.plan[index].duration_s if index < len(self.plan) else None
        return math.nan if planned is None else planned

    def update(self, snap: Snapshot | None) -> None:
        """Show one poll's snapshot (None: nothing new to show)."""
        if snap is None:
            with self.lock:
                self._release_headers()
            return
        with self.lock:
            self._update(snap)
            self._release_headers()

    def _update(self, snap: Snapshot) -> None:
        now = self.clock()
        cur = self.current
        began = now  # when the stage on this snapshot was first seen
        if cur is not None and snap.stage_index != cur.stage_index:  # the stage ended
            self.ended = began = now if self.ended is None else self.ended
            if not self._settled(snap, cur.stage_index or 0, now):
                self._show(self.line(snap, now), final=False)  # its figures still arrive
                return
            self._show(self.line(snap, now), final=True)
            self.current, self.ended = None, None
        if snap.stage_index is None:  # between stages, or after the last one
            self._between_polls(snap, len(snap.begun) if snap.begun else 0)
            return
        self._between_polls(snap, snap.stage_index)
        if self.current is None:
            self.current, self.started, self.baseline = snap, began, snap.requests
            self.baseline_failures = snap.failures
            self.last_plain = now  # plain output: the stage's start is announced elsewhere
        self._show(self.line(snap, now), final=False)

    def _settled(self, snap: Snapshot, index: int, now: float) -> bool:
        """Whether an ended stage's line can be ended: the master says its figures are final
        (its last records and unsent arrivals are in), or says nothing, or the wait is over."""
        seen = snap.begun[index] if index < len(snap.begun) else None
        if seen is None or seen.settled is not False:
            return True
        return self.ended is not None and now - self.ended >= self.settle_wait_s

    def _between_polls(self, snap: Snapshot, index: int) -> None:
        """Lines for the stages before ``index`` that began and ended between two polls (no
        line showed them); ``index`` is the stage on screen now, or the number begun."""
        stages = len(self.plan) or snap.stage_count or len(snap.begun)
        if self.current is not None and self.current.stage_index == index:
            return
        for i in range(self.next_index, index):
            if self.current is not None and i == self.current.stage_index:
                continue
            seen = snap.begun[i] if i < len(snap.begun) else StageSeen("")
            target = seen.target_requests
            done = seen.done if seen.done is not None else target
            if done is None:
                count = ""
            else:
                count = (
                    f"{num(done)}/{num(target)} requests, " if target else f"{num(done)} requests, "
                )
            unsent = unsent_text(seen)
            self._show(
                f"  stage {i + 1}/{stages} {seen.name}: {count}{unsent + ', ' if unsent else ''}"
                "ended between two polls of the live stats",
                final=True,
                index=i,
            )
        self.next_index = max(self.next_index, index + (snap.stage_index is not None))

    def stage_header(self, index: int, text: str) -> None:
        """The line saying stage ``index`` (from 0) began: printed once the lines of the stages
        before it have ended (or :data:`HEADER_WAIT_S` after it came), so it follows them."""
        with self.lock:
            self.held.append((index, text, self.clock() + HEADER_WAIT_S))
            self._release_headers()

    def _release_headers(self, *, all_now: bool = False) -> None:
        """Print the held headers whose earlier stages' lines have ended, or whose wait is over
        (all of them with ``all_now``), in the order they came."""
        now = self.clock()
        while self.held:
            index, text, deadline = self.held[0]
            ready = all(i in self.ended_lines for i in range(index))
            if not (ready or all_now or now >= deadline):
                return
            self.held.pop(0)
            self._write_line(text)

    def _write_line(self, text: str) -> None:
        if self.live and self.shown:
            self.out.write("\r" + " " * len(self.shown) + "\r")
        self.out.write(text + "\n")
        if self.live and self.shown:
            self.out.write(self.shown)
        self.out.flush()

    def _show(self, text: str, *, final: bool, index: int | None = None) -> None:
        """Draw (live) or print (plain) a stage's line; ``final`` ends it. ``index``: the
        stage it is of (default: the one on the line)."""
        if final:
            if index is None and self.current is not None:
                index = self.current.stage_index
            self.ended_lines.add(index or 0)
        if self.live:
            self.out.write("\r" + text.ljust(len(self.shown)) + ("\n" if final else ""))
            self.shown = "" if final else text
        elif final or self.clock() - self.last_plain >= self.every_s:
            self.out.write(text + (" (stage done)" if final else "") + "\n")
            self.last_plain = self.clock()
        self.out.flush()

    def message(self, text: str) -> None:
        """Print a whole line; the live line (if any) is redrawn below it."""
        with self.lock:
            self._write_line(text)

    def close(self, snap: Snapshot | None = None) -> None:
        """End the last stage's line (with a last snapshot when there is one), then print the
        headers still held."""
        with self.lock:
            if self.current is not None:
                last = snap if snap is not None else self.current
                self._show(self.line(last, self.clock()), final=True)
                self.current, self.ended = None, None
            self._release_headers(all_now=True)


def follow(base_url: str, progress: ProgressLine, stop: threading.Event) -> threading.Thread:
    """Start a daemon thread that polls ``/llm/stats`` into ``progress`` until ``stop``."""

    def loop() -> None:
        last = None
        while not stop.wait(POLL_S):
            snap = poll_stats(base_url)
            last = snap or last
            progress.update(snap)
        progress.close(last)

    thread = threading.Thread(target=loop, name="locust-llm-progress", daemon=True)
    thread.start()
    return thread
