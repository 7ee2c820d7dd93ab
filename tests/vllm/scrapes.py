"""The engine's own account of a run: its ``/metrics`` scraped in a thread, and each stage's share
of its histograms and counters, bracketed by the engine's count of finished requests.

A stage's share is the difference between two scrapes: the first at which the engine's
histograms count exactly the run's requests before the stage as finished, and the first at which
they count those up to it (and no later request has its first token). Stages that end when their
requests end (request-count stages) are bracketed exactly, where a scrape falls between the
stage's last finish and the next stage's first token. The shape switches stages on its next
one-second tick after the last record reaches the master (in a batch of 0.25 s), so that pause
can be as short as the next request's way to its first token: measured 0.50-1.35 s in 8 pauses
on a quiet host (the conformance sweep), and a scrape every 0.25 s alone missed one on CI. Told
the brackets and the stages, the scraper watches each stage's tail: once one bracketing histogram
counts the stage's requests and another not yet (the last first token is in, the last request
not done: 1.3-1.6 s measured), it polls only their counts (``/metrics?name[]=``) every 20 ms
(8-10 ms a poll, a full scrape 9-11 ms) and scrapes in full the moment all of them count the
stage's requests: every one of the 12 tails measured was bracketed that way.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from locust_llm.telemetry.promtext import parse_samples
from vllm.server import VllmServer

SCRAPE_EVERY_S = 0.25  # /metrics in full costs the front end
POLL_EVERY_S = 0.02  # in a stage's tail: the bracketing counts alone


@dataclass(frozen=True)
class Scrape:
    at: float
    values: dict[str, float]  # sample name -> sum over its series; buckets also by bound


class Scraper:
    """Scrapes the engine's ``/metrics`` every :data:`SCRAPE_EVERY_S` in a thread; given the
    ``brackets`` (histograms) and the ``stage_requests``, also the moment each stage's requests
    are all counted (the module's docstring). A failed scrape is kept in ``errors``."""

    def __init__(
        self, server: VllmServer, brackets: Iterable[str] = (), stage_requests: Iterable[int] = ()
    ) -> None:
        self.server = server
        self.texts: list[tuple[float, str]] = []
        self._scrapes: list[Scrape] = []  # the texts' samples, summed as they came
        self.errors: list[str] = []
        self._counts = [h + "_count" for h in brackets]
        self._bounds = list(itertools.accumulate(stage_requests))
        self._poll = "/metrics?" + urllib.parse.urlencode([("name[]", n) for n in self._counts])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _get(self, path: str) -> str | None:
        try:
            return self.server.get(path)
        except OSError as exc:
            self.errors.append(f"{time.time():.3f} {path}: {exc!r}")
            return None

    def _scrape(self) -> dict[str, float] | None:
        at, text = time.time(), self._get("/metrics")
        if text is None:
            return None
        return self._keep(at, text)

    def _keep(self, at: float, text: str) -> dict[str, float]:
        """Keep a full scrape (its text and its summed samples); its bracketing counts."""
        scrape = Scrape(at, summed_samples(text))
        self.texts.append((at, text))
        self._scrapes.append(scrape)
        return self._bracket_counts(scrape.values)

    def _bracket_counts(self, values: dict[str, float]) -> dict[str, float]:
        return {n: values.get(n, 0.0) for n in self._counts}

    def _loop(self) -> None:
        first: dict[str, float] | None = None  # the first scrape's counts: the baseline
        bounds = list(self._bounds)
        while not self._stop.is_set():
            counts = self._scrape()
            if first is None:
                first = counts
            elif counts is not None and self._counts:
                done = [counts[n] - first[n] for n in self._counts]
                while bounds and max(done) > bounds[0]:  # passed (bracketed or missed)
                    bounds.pop(0)
                if bounds and max(done) == bounds[0] > min(done):  # the stage's tail
                    self._watch_tail(first, bounds[0])
                    continue
            self._stop.wait(SCRAPE_EVERY_S)

    def _watch_tail(self, first: dict[str, float], bound: int) -> None:
        """Poll the bracketing counts until all equal ``bound`` (then scrape in full) or one
        passes it."""
        while not self._stop.wait(POLL_EVERY_S):
            text = self._get(self._poll)
            if text is None:
                continue
            counts = self._bracket_counts(summed_samples(text))
            done = [counts[n] - first[n] for n in self._counts]
            if min(done) == bound == max(done):
                self._scrape()
                return
            if max(done) > bound:
                return

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._keep(time.time(), self.server.get("/metrics"))
        if self.errors:  # shown with a failing test's output
            print(f"{len(self.errors)} failed scrapes:", *self.errors, sep="\n  ")

    def scrapes(self) -> list[Scrape]:
        return list(self._scrapes)


def summed_samples(text: str) -> dict[str, float]:
    """A scrape's samples: each sample name's sum over its series; buckets also by bound."""
    values: dict[str, float] = {}
    for name, labels, value in parse_samples(text):
        values[name] = values.get(name, 0.0) + value
        if "le" in labels:  # a histogram's bucket: also kept by its bound
            key = bucket(name, labels["le"])
            values[key] = values.get(key, 0.0) + value
    return values


def stage_increases(
    scrapes: Sequence[Scrape], stage_requests: Iterable[int], histograms: Iterable[str]
) -> list[dict[str, float]]:
    """Per stage, each sample's increase over the stage (see the module's docstring): the
    ``stage_requests`` are the stages' request counts, ``histograms`` the histograms whose
    counts bracket them."""
    names = list(histograms)
    first = scrapes[0].values
    start, done, out = first, 0, []
    for n in stage_requests:
        done += n
        end = _scrape_after(scrapes, names, first, done)
        out.append({k: end.get(k, math.nan) - start.get(k, math.nan) for k in end})
        start = end
    return out


def _scrape_after(
    scrapes: Sequence[Scrape], names: Sequence[str], first: dict[str, float], done: int
) -> dict[str, float]:
    for scrape in scrapes:
        counts = [
            scrape.values.get(h + "_count", 0.0) - first.get(h + "_count", 0.0) for h in names
        ]
        if all(c == done for c in counts):
            return scrape.values
    seen = sorted({tuple(scrape.values.get(h + "_count", 0.0) - first.get(h + "_count", 0.0)
                         for h in names) for scrape in scrapes})  # fmt: skip
    raise AssertionError(f"no scrape saw exactly {done} of the run's requests finished: {seen}")


def bucket(sample: str, le: str) -> str:
    """The key of a histogram bucket's series in a scrape: ``sample`` ending ``_bucket`` and
    its ``le`` bound as the engine writes it (``"256.0"``)."""
    return f"{sample}{{le={le}}}"


def bounds(increase: dict[str, float], histogram: str) -> list[str]:
    """A histogram's finite bucket bounds in an increase, as the engine writes them, ascending."""
    prefix = bucket(histogram + "_bucket", "")[:-1]
    les = [key[len(prefix) : -1] for key in increase if key.startswith(prefix)]
    return sorted((le for le in les if le != "+Inf"), key=float)


def share_above(increase: dict[str, float], histogram: str, le: str) -> float:
    """The share of a histogram's observations over an increase that lie above bound ``le``."""
    count = increase[histogram + "_count"]
    return (count - increase[bucket(histogram + "_bucket", le)]) / count


def mean(increase: dict[str, float], histogram: str) -> float:
    """A histogram's mean over an increase: its sum over its count."""
    return increase[histogram + "_sum"] / increase[histogram + "_count"]


#: A stall is an engine gap past the first of the ITL histogram's bounds from this one up (s)...
STALL_FLOOR_S = 0.075
#: ... that is this many of the engine's usual steps long or more. The step is the machine's:
#: 25-35 ms at 6 users on a 2-core Xeon (2026-11), ~0.5 s on a 2-core EPYC without AVX-512 in
#: bf16 (2026-12-05), 108 ms there in fp32 (2026-12-06), so the bound is taken from the run, not
#: fixed (75 ms fixed was 1.5 steps on a host twice as slow, and on the EPYC in bf16 93.5% of
#: the chunked run's gaps passed it)
STALL_STEPS = 2.5


def stall_bound(les: list[str], step_s: float) -> str:
    """The first of a histogram's bounds ``les`` (ascending, as :func:`bounds` gives them) that
    is :data:`STALL_FLOOR_S` or more and :data:`STALL_STEPS` steps of ``step_s`` or more."""
    assert step_s > 0, f"no step to measure a stall by: {step_s!r}"
    least = max(STALL_FLOOR_S, STALL_STEPS * step_s)
    bound = next((le for le in les if float(le) >= least), None)
    assert bound is not None, f"no bound of {les} is {least:.3f} s or more (step {step_s} s)"
    return bound
