"""Micro-benchmark of locust_llm.live.histogram: ns per add, per quantile, per merge and to_dict.

Run: ``.venv/bin/python bench/bench_histogram.py`` (prints a markdown table; copy it into
bench/results/histogram.md). Single-threaded CPython, best of 5 repeats.
"""

from __future__ import annotations

import math
import platform
import random
import sys
import timeit

from locust_llm.live.histogram import MAX_S, MIN_S, N_BUCKETS, LatencyHistogram


def _values(n: int, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    lo, hi = math.log(MIN_S), math.log(MAX_S)
    return [math.exp(rng.uniform(lo, hi)) for _ in range(n)]


def _full() -> LatencyHistogram:
    """A histogram with every bucket non-empty (the worst case for merge and to_dict)."""
    hist = LatencyHistogram()
    hist.add_many(_values(200_000))
    for k in range(N_BUCKETS + 2):
        hist._counts[k] += 1  # make sure no bucket is empty
    return hist


def _best_ns(stmt, number: int, per: int = 1) -> float:
    return min(timeit.repeat(stmt, number=number, repeat=5)) / (number * per) * 1e9


def main() -> None:
    values = _values(100_000)
    hist = LatencyHistogram()
    add = hist.add

    def add_all() -> None:
        for v in values:
            add(v)

    def add_all_weighted() -> None:
        for v in values:
            add(v, 3)

    def loop_only() -> None:
        for _v in values:
            pass

    full_a, full_b = _full(), _full()
    target = full_a.copy()
    data = full_a.to_dict()
    rows = [
        ("add(value)", _best_ns(add_all, 1, len(values))),
        ("add(value, weight)", _best_ns(add_all_weighted, 1, len(values))),
        ("(empty loop, for reference)", _best_ns(loop_only, 1, len(values))),
        ("quantile(0.99), full histogram", _best_ns(lambda: full_a.quantile(0.99), 200)),
        (
            "quantiles([.5,.9,.95,.99]), full",
            _best_ns(lambda: full_a.quantiles([0.5, 0.9, 0.95, 0.99]), 200),
        ),
        ("merge(full) into full", _best_ns(lambda: target.merge(full_b), 200)),
        ("to_dict(), full", _best_ns(full_a.to_dict, 200)),
        ("from_dict(), full", _best_ns(lambda: LatencyHistogram.from_dict(data), 200)),
    ]
    print(
        f"Python {platform.python_version()} on {platform.machine()}, {sys.platform}; "
        f"{N_BUCKETS + 2} buckets"
    )
    print()
    print("| operation | ns per call |")
    print("|---|---:|")
    for name, ns in rows:
        print(f"| {name} | {ns:,.0f} |")


if __name__ == "__main__":
    main()
