"""Scrape GPU exporters and LLM servers during a run; samples go to telemetry.parquet.

:class:`TelemetryScraper` runs on the Locust master (or the single process). Each target gets its
own timer (a ``threading.Thread``; under Locust, whose gevent monkey-patching turns threads into
greenlets, a greenlet), so a hung target never delays the others. Each tick fetches the target's
Prometheus text with ``urllib`` (cooperative once patched), maps it to canonical signals
(:mod:`locust_llm.telemetry.vocabularies` onto :mod:`locust_llm.telemetry.signals`) and records rows
``(time_s, source, signal, gpu, value)``:

* ``time_s`` is the wall clock when the scrape started; ``source`` is the target URL.
* Every scrape adds a ``scrape_up`` row: 1 scraped and parsed, 0 failed.
* A failed scrape (refused, timeout, HTTP error, not Prometheus text) is a *gap*: ``scrape_up``
  0 plus a NaN row for every (signal, gpu) that source gave before. One warning per target is
  logged (and kept in :attr:`TelemetryScraper.warnings`); the scraper never raises into the run.
* Ticks run on absolute deadlines (``start + k * interval``); a tick that overruns skips the
  deadlines it missed instead of bursting to catch up (counted in ``missed_ticks``).
* A scrape waits up to :data:`SCRAPE_TIMEOUT_S` for its answer, whatever the interval: an
  answer slower than a short interval is a sample taken late (the ticks it overran are
  skipped), not a gap. llama.cpp answers ``/metrics`` between its decode steps, and on a busy
  host an answer past a 0.2 s interval was lost as a gap, taking the stage's counters with it.
* Time comes from an injected :class:`ScrapeClock` (wall clock for the stamps, a monotonic clock
  for the deadlines, and the wait between ticks), :data:`SYSTEM_CLOCK` by default, so tests drive
  the timer with a fake clock and no real sleeps.

An optional ``cpu_probe`` (for Locust: :func:`locust_worker_cpu`) is called on the same interval
and recorded as ``worker_cpu_util`` with ``source`` = worker id.

The sampling step (:meth:`TelemetryScraper.scrape_target` / :meth:`~TelemetryScraper.scrape_once`)
is separate from the timer loop, so it can be driven by hand with an injected ``fetch``.
"""

from __future__ import annotations

import functools
import http.client
import logging
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from locust_llm.errors import InputError
from locust_llm.rundir.layout import TELEMETRY_COLUMNS, TELEMETRY_FILE
from locust_llm.telemetry.signals import SCRAPE_UP
from locust_llm.telemetry.vocabularies import extract_signals, spoken_vocabularies

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)

Row = tuple[float, str, str, str, float]


class ScrapeClock(Protocol):
    """Where the scraper's timer gets its time (inject a fake one in tests)."""

    def wall(self) -> float:
        """Unix seconds, for the rows' ``time_s``."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never jumps, for the tick deadlines."""
        ...

    def wait(self, stop: threading.Event, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` or until ``stop`` is set; True means stop now."""
        ...


class SystemClock:
    """The real clocks: ``time.time``, ``time.monotonic`` and ``Event.wait``."""

    def wall(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, stop: threading.Event, timeout_s: float) -> bool:
        return stop.wait(timeout_s)


SYSTEM_CLOCK = SystemClock()
Fetch = Callable[[str, float], str]
CpuProbe = Callable[[], Mapping[str, float]]

#: how long a scrape waits for its answer (unless ``timeout_s`` is given)
SCRAPE_TIMEOUT_S = 2.0
MAX_BODY_BYTES = 32 * 1024 * 1024


class ScrapeError(Exception):
    """A target could not be scraped (internal: turned into a gap, never raised to callers)."""


#: the vocabularies that name a serving engine (the others are GPU exporters); the simulator
#: speaks vLLM's names and its own, and is named by its own
SERVER_VOCABULARIES: tuple[str, ...] = ("sim", "vllm", "sglang", "tgi", "llamacpp")


def fetch_text(url: str, timeout_s: float) -> str:
    """GET ``url`` and return its body as text; any failure is a one-line :class:`ScrapeError`."""
    request = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read(MAX_BODY_BYTES + 1)
    except urllib.error.HTTPError as exc:
        exc.close()  # it holds the answer's socket open until closed (or collected much later)
        raise ScrapeError(f"HTTP {exc.code} {exc.reason}") from exc
    except urllib.error.URLError as exc:
        raise ScrapeError(f"unreachable ({exc.reason})") from exc
    except (TimeoutError, OSError, http.client.HTTPException) as exc:  # incl. a garbled answer
        raise ScrapeError(f"{type(exc).__name__}: {exc}") from exc
    if len(body) > MAX_BODY_BYTES:
        raise ScrapeError(f"response larger than {MAX_BODY_BYTES} bytes")
    return body.decode("utf-8", errors="replace")


def check_url(url: str) -> str:
    """``url`` if it is an http(s) URL with a host, else an InputError naming it."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InputError(f"metrics target {url!r}: expected an http(s):// URL")
    return url


def server_metrics_url(host: str, timeout_s: float = SCRAPE_TIMEOUT_S) -> str | None:
    """``<scheme>://<host:port>/metrics`` of Locust's ``--host`` if it answers with Prometheus
    text now (checked once); ``None`` otherwise. A path in ``host`` (``/v1``) is dropped."""
    parts = urllib.parse.urlsplit(host)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    url = f"{parts.scheme}://{parts.netloc}/metrics"
    try:
        extract_signals(fetch_text(url, timeout_s))
    except (ScrapeError, InputError) as exc:
        logger.info("no server metrics at %s (%s)", url, exc)
        return None
    return url


class TelemetryScraper:
    """Scrape ``targets`` every ``interval_s`` seconds into rows of ``TELEMETRY_COLUMNS``."""

    def __init__(
        self,
        targets: Sequence[str],
        interval_s: float = 1.0,
        *,
        timeout_s: float | None = None,
        fetch: Fetch = fetch_text,
        cpu_probe: CpuProbe | None = None,
        demand_probe: CpuProbe | None = None,
        clock: ScrapeClock = SYSTEM_CLOCK,
        shown_source: Callable[[str], str] = str,
    ) -> None:
        valid = isinstance(interval_s, int | float) and math.isfinite(interval_s)
        if not valid or interval_s <= 0:
            raise InputError(f"--llm-scrape-interval {interval_s!r}: expected seconds > 0")
        self.targets: list[str] = list(dict.fromkeys(check_url(t) for t in targets))
        self.interval_s = float(interval_s)
        self.timeout_s = float(timeout_s) if timeout_s else SCRAPE_TIMEOUT_S
        self._fetch = fetch
        self._cpu_probe = cpu_probe
        self._demand_probe = demand_probe
        self._clock = clock
        self._shown_source = shown_source  # a target as telemetry.parquet names it (no secret)
        self._rows: list[Row] = []
        self._lock = threading.Lock()
        self._seen: dict[str, set[tuple[str, str]]] = {t: set() for t in self.targets}
        #: target -> the serving engine whose metrics it speaks (``vllm``, ``llamacpp`` ...)
        self.engines: dict[str, str] = {}
        self._identified: set[str] = set()
        self._failing: dict[str, bool] = {}
        self._warned: set[str] = set()
        self.warnings: list[str] = []
        self.missed_ticks = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- the sampling step (no timers) ---------------------------------------------------------
    def scrape_target(self, target: str, now: float) -> bool:
        """Scrape one target once, stamping rows with ``now``; True when it succeeded."""
        try:
            text = self._fetch(target, self.timeout_s)
            values = extract_signals(text)
            if target not in self._identified:  # which engine answers: its metrics' names
                self._identified.add(target)
                spoken = spoken_vocabularies(text)
                engine = next((v for v in SERVER_VOCABULARIES if v in spoken), None)
                if engine is not None:
                    self.engines[target] = engine
        except (ScrapeError, InputError) as exc:
            self._record_gap(target, now, str(exc))
            return False
        except Exception as exc:  # a fetch hook or parser bug must not stop the load test
            self._record_gap(target, now, f"{type(exc).__name__}: {exc}")
            return False
        rows = [(now, target, signal, gpu, value) for signal, gpu, value in values]
        rows.append((now, target, SCRAPE_UP, "", 1.0))
        with self._lock:
            self._rows.extend(rows)
            self._seen[target].update((signal, gpu) for signal, gpu, _ in values)
            if self._failing.get(target):
                logger.info("telemetry target %s answers again", target)
            self._failing[target] = False
        return True

    def scrape_once(self, now: float | None = None, *, probe: bool = True) -> int:
        """Scrape every target once (sequentially) and probe CPU (unless ``probe`` is False: a
        run's last scrape, after its last request, where the workers' CPU is idle); returns
        the targets that answered."""
        stamp = self._clock.wall() if now is None else now
        ok = sum(self.scrape_target(target, stamp) for target in self.targets)
        if probe:
            self.probe_cpu(stamp)
        return ok

    def probe_cpu(self, now: float) -> None:
        """Record ``worker_cpu_util`` per worker from ``cpu_probe`` and ``worker_cpu_demand``
        from ``demand_probe`` (each a no-op without its probe)."""
        for probe, signal in (
            (self._cpu_probe, "worker_cpu_util"),
            (self._demand_probe, "worker_cpu_demand"),
        ):
            if probe is None:
                continue
            try:
                usage = dict(probe())
            except Exception as exc:  # never raise into the run
                self._warn_once(signal, f"{signal} probe failed: {type(exc).__name__}: {exc}")
                continue
            with self._lock:
                self._rows.extend(
                    (now, str(worker), signal, "", float(ratio))
                    for worker, ratio in sorted(usage.items())
                )

    def _record_gap(self, target: str, now: float, reason: str) -> None:
        with self._lock:
            seen = sorted(self._seen.get(target, ()))
            self._rows.extend((now, target, signal, gpu, math.nan) for signal, gpu in seen)
            self._rows.append((now, target, SCRAPE_UP, "", 0.0))
            self._failing[target] = True
        self._warn_once(target, f"telemetry target {target}: {reason}; recording gaps")

    def _warn_once(self, key: str, message: str) -> None:
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
            self.warnings.append(message)
        logger.warning(message)

    # -- the timer loop ------------------------------------------------------------------------
    def start(self) -> TelemetryScraper:
        """Start one timer per target (plus one for the CPU probe); returns self."""
        if self._threads:
            return self
        self._stop.clear()
        steps: list[tuple[str, Callable[[float], Any]]] = [
            (target, functools.partial(self.scrape_target, target)) for target in self.targets
        ]
        if self._cpu_probe is not None:
            steps.append(("cpu", self.probe_cpu))
        for name, step in steps:
            thread = threading.Thread(
                target=self.run_timer, args=(step,), name=f"telemetry {name}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        return self

    def run_timer(self, step: Callable[[float], Any]) -> None:
        """Call ``step(wall time)`` on the absolute deadlines until :meth:`stop` (or the clock's
        ``wait``) says stop: what each timer thread runs; callable directly with a fake clock."""
        clock = self._clock
        origin = clock.monotonic()
        tick = 0
        while not self._stop.is_set():
            try:
                step(clock.wall())
            except Exception:  # pragma: no cover - steps already swallow their errors
                logger.exception("telemetry step failed")
            tick += 1
            now = clock.monotonic()
            due = origin + tick * self.interval_s
            if now >= due:  # overran: skip to the next deadline still ahead
                skipped = int((now - due) // self.interval_s) + 1
                with self._lock:
                    self.missed_ticks += skipped
                tick += skipped
                due = origin + tick * self.interval_s
            if clock.wait(self._stop, due - now):
                break

    def stop(self) -> None:
        """Stop the timers and wait for an in-flight scrape (at most the timeout) to finish."""
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout_s + 1.0)
        self._threads = []

    def join(self, timeout_s: float) -> bool:
        """Wait for timers that end on their own (a clock whose ``wait`` said stop) without
        stopping the others; True when none is left running."""
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    @property
    def running(self) -> bool:
        return bool(self._threads)

    # -- results -------------------------------------------------------------------------------
    def samples(self) -> list[Row]:
        """A copy of the rows recorded so far, in the order they were taken."""
        with self._lock:
            return list(self._rows)

    def to_frame(self) -> pd.DataFrame:
        """The rows as a DataFrame with ``TELEMETRY_COLUMNS``, sorted by time; each source as
        ``shown_source`` writes it (a URL without its credentials)."""
        frame = rows_to_frame(self.samples())
        frame["source"] = frame["source"].map(self._shown_source)
        return frame

    def write(self, run_dir: Path | str) -> Path:
        """Write ``telemetry.parquet`` into ``run_dir`` (atomically); returns its path."""
        return write_frame(self.to_frame(), Path(run_dir))


def rows_to_frame(rows: Sequence[Row]) -> pd.DataFrame:
    """Telemetry rows -> DataFrame (float64 time and value, string source/signal/gpu)."""
    import pandas as pd

    frame = pd.DataFrame.from_records(list(rows), columns=list(TELEMETRY_COLUMNS))
    frame = frame.astype(
        {"time_s": "float64", "source": str, "signal": str, "gpu": str, "value": "float64"}
    )
    return frame.sort_values(["time_s", "source", "signal", "gpu"], kind="stable").reset_index(
        drop=True
    )


def write_frame(frame: pd.DataFrame, run_dir: Path) -> Path:
    """Write a telemetry frame as ``run_dir/telemetry.parquet`` via a temp file and rename."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / TELEMETRY_FILE
    tmp = path.with_suffix(".parquet.tmp")
    frame.to_parquet(tmp, index=False)
    tmp.replace(path)
    return path


def locust_worker_cpu(runner: Any) -> dict[str, float]:
    """CPU ratio (0..1) per Locust worker from a master runner's ``clients``; a local runner's
    own usage under the id ``"local"``. Locust reports percent of one core.

    Locust's first CPU reading comes only after its monitor's first interval; until then it
    reports exactly 0, which is "not measured yet" here (NaN), not an idle client.
    """
    clients = getattr(runner, "clients", None)
    if clients is not None:
        return {str(node.id): _cpu_ratio(node.cpu_usage) for node in clients.values()}
    return {"local": _cpu_ratio(getattr(runner, "current_cpu_usage", math.nan))}


def _cpu_ratio(percent: Any) -> float:
    value = float(percent)
    return math.nan if value == 0.0 else value / 100.0


def targets_from_options(options: Any, host: str | None) -> list[str]:
    """The scrape targets the ``--llm-*`` options ask for (``auto`` or empty probes
    ``<host>/metrics`` once; ``none`` turns it off). The options are declared in
    :mod:`locust_llm.options.table`."""
    targets = [check_url(u) for u in (getattr(options, "llm_gpu_metrics", None) or [])]
    server = getattr(options, "llm_server_metrics", "auto") or "auto"
    if server == "auto":
        found = server_metrics_url(host) if host else None
        if found:
            targets.append(found)
    elif server != "none":
        targets.append(check_url(server))
    return list(dict.fromkeys(targets))
