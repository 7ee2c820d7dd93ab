"""The engine's own account of a run: its ``/metrics`` scraped in a thread, and each stage's share
of its histograms and counters, bracketed by the engine's count of finished requests.

A stage's share is the difference between two scrapes: the first at which the engine's
histograms count exactly the run's requests before the stage as finished, and the first at which
they count those up to it (and no later request has its first token). Stages that end when their
requests end (request-count stages) are bracketed exactly; the scrape interval only has to be
shorter than the pause between stages (about 0.9 s).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from locust_llm.telemetry.promtext import parse_samples
from vllm.server import VllmServer

SCRAPE_EVERY_S = 0.25  # stages are ~0.9 s apart; /metrics costs the front end


@dataclass(frozen=True)
class Scrape:
    at: float
    values: dict[str, float]  # sample name -> sum over its series; buckets also by bound


class Scraper:
    """Scrapes the engine's ``/metrics`` every :data:`SCRAPE_EVERY_S` in a thread."""

    def __init__(self, server: VllmServer) -> None:
        self.server = server
        self.texts: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.texts.append((time.time(), self.server.get("/metrics")))
            self._stop.wait(SCRAPE_EVERY_S)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.texts.append((time.time(), self.server.get("/metrics")))

    def scrapes(self) -> list[Scrape]:
        out = []
        for at, text in self.texts:
            values: dict[str, float] = {}
            for name, labels, value in parse_samples(text):
                values[name] = values.get(name, 0.0) + value
                if "le" in labels:  # a histogram's bucket: also kept by its bound
                    key = bucket(name, labels["le"])
                    values[key] = values.get(key, 0.0) + value
            out.append(Scrape(at, values))
        return out


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
    raise AssertionError(f"no scrape saw exactly {done} requests of the run finished")


def bucket(sample: str, le: str) -> str:
    """The key of a histogram bucket's series in a scrape: ``sample`` ending ``_bucket`` and
    its ``le`` bound as the engine writes it (``"256.0"``)."""
    return f"{sample}{{le={le}}}"


def share_above(increase: dict[str, float], histogram: str, le: str) -> float:
    """The share of a histogram's observations over an increase that lie above bound ``le``."""
    count = increase[histogram + "_count"]
    return (count - increase[bucket(histogram + "_bucket", le)]) / count


def mean(increase: dict[str, float], histogram: str) -> float:
    """A histogram's mean over an increase: its sum over its count."""
    return increase[histogram + "_sum"] / increase[histogram + "_count"]
