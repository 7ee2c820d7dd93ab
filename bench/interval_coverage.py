"""Do the capacity search's percentile intervals hold the confidence they state? Measured on
sequences whose true quantiles are known, as a stage's latencies come (in start order):

- independent exponential samples;
- an AR(1) sequence (phi 0.8): consecutive latencies alike, as requests served in one batch;
- an M/M/1 queue's sojourn times at utilisation 0.5, 0.7 and 0.9 (Lindley's recursion from the
  stationary state; the q-quantile of a FCFS M/M/1 sojourn is ``-ln(1 - q) / (mu - lambda)``):
  an open loop's queue episodes.

Part 1, one look: for each sequence, P90 and P99 and 200 or 800 samples, the share of trials
whose 95% interval covers the true quantile, lies wholly below it (a stage wrongly called met)
or above it (wrongly broken), and the median effective sample size as a share of the samples,
for the shipped interval (``percentile_interval(..., in_order=True)``: ranks of the effective
size from the values' lag-1 autocorrelation) and three others: the samples taken as
independent; the effective size from the exceedances (the lag-1 autocorrelation of the
indicator of exceeding the empirical quantile, at most ``1 - 10/n``); and from the values' ranks.

Part 2, the stop rule's looks: a stage at its limit (the true quantile) looked at every 5% of
its growth from 20 to 2000 samples, ended at the first look whose interval decides it; the
share called met and broken with a 95% interval at every look and at the stop rule's per-look
tails (:mod:`locust_llm.capacity.sequential`). Independent samples: exact (the binomial
walk); the correlated sequences: by simulation, through the shipped interval.

``python bench/interval_coverage.py [--trials N] [--seed S] [--out FILE]`` prints a markdown
section (command, machine, date, both tables); ``--out`` writes it to a file.
"""

from __future__ import annotations

import argparse
import math
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from locust_llm.capacity.intervals import (
    effective_size,
    lag1_correlation,
    percentile_interval,
    ranks_at_size,
)
from locust_llm.capacity.measure import StageRule
from locust_llm.capacity.sequential import crossings, look_sizes

Generator = Callable[[random.Random, int], list[float]]
Quantile = Callable[[float], float]


def exponential() -> tuple[Generator, Quantile]:
    return (lambda rng, n: [rng.expovariate(1.0) for _ in range(n)]), (lambda q: -math.log(1 - q))


def ar1(phi: float) -> tuple[Generator, Quantile]:
    sd = 1 / math.sqrt(1 - phi * phi)

    def draw(rng: random.Random, n: int) -> list[float]:
        x, out = rng.gauss(0, sd), []
        for _ in range(n):
            x = phi * x + rng.gauss(0, 1)
            out.append(10 + x)
        return out

    return draw, (lambda q: 10 + statistics.NormalDist().inv_cdf(q) * sd)


def mm1(utilisation: float) -> tuple[Generator, Quantile]:
    lam, mu = utilisation, 1.0

    def draw(rng: random.Random, n: int) -> list[float]:
        wait = 0.0 if rng.random() < 1 - utilisation else rng.expovariate(mu - lam)
        out = []
        for _ in range(n):
            service = rng.expovariate(mu)
            out.append(wait + service)
            wait = max(0.0, wait + service - rng.expovariate(lam))
        return out

    return draw, (lambda q: -math.log(1 - q) / (mu - lam))


SEQUENCES: dict[str, tuple[Generator, Quantile]] = {
    "independent": exponential(),
    "AR(1) 0.8": ar1(0.8),
    "M/M/1 0.5": mm1(0.5),
    "M/M/1 0.7": mm1(0.7),
    "M/M/1 0.9": mm1(0.9),
}


def _from_correlation(n: int, rho: float) -> float:
    return float(n) if rho <= 0 else max(1.0, n * (1 - rho) / (1 + rho))


def _exceedance_size(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    level = max(0.5, min(q, 1 - 10 / len(values)))
    threshold = ordered[min(len(values) - 1, int(level * len(values)))]
    return _from_correlation(len(values), lag1_correlation([float(v > threshold) for v in values]))


def _rank_size(values: Sequence[float], q: float) -> float:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    for rank, i in enumerate(order):
        ranks[i] = float(rank)
    return _from_correlation(len(values), lag1_correlation(ranks))


METHODS: dict[str, Callable[[Sequence[float], float], float]] = {
    "shipped (lag-1 of the values)": lambda v, q: effective_size(v),
    "as independent": lambda v, q: float(len(v)),
    "exceedances' lag-1": _exceedance_size,
    "ranks' lag-1": _rank_size,
}


def one_look(trials: int, seed: int) -> list[str]:
    rows = [
        "| sequence | quantile | samples | interval | covers | wrongly met | wrongly broken "
        "| effective share |",
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for name, (draw, quantile) in SEQUENCES.items():
        for q in (0.9, 0.99):
            for n in (200, 800):
                rng = random.Random(seed)
                truth = quantile(q)
                tally = {k: [0, 0, 0, []] for k in METHODS}
                for _ in range(trials):
                    values = draw(rng, n)
                    ordered = sorted(values)
                    for key, size_of in METHODS.items():
                        size = size_of(values, q)
                        lo, hi = ranks_at_size(ordered, q * 100, size, (0.025, 0.025))
                        t = tally[key]
                        t[0] += lo <= truth <= hi
                        t[1] += hi < truth
                        t[2] += lo > truth
                        t[3].append(size / n)
                for key, (cov, met, broken, shares) in tally.items():
                    rows.append(
                        f"| {name} | P{q * 100:g} | {n} | {key} | {cov / trials:.3f} | "
                        f"{met / trials:.3f} | {broken / trials:.3f} | "
                        f"{statistics.median(shares):.2f} |"
                    )
    return rows


def _looked(
    draw: Generator,
    truth: float,
    q: float,
    tails: tuple[float, float],
    sizes: list[int],
    trials: int,
    seed: int,
) -> tuple[float, float]:
    rng = random.Random(seed)
    met = broken = 0
    for _ in range(trials):
        values = draw(rng, sizes[-1])
        for n in sizes:
            iv = percentile_interval(values[:n], q * 100, in_order=True, tails=tails)
            if iv.hi <= truth or iv.lo > truth:
                met += iv.hi <= truth
                broken += iv.lo > truth
                break
    return met / trials, broken / trials


def looks(trials: int, seed: int) -> list[str]:
    rule = StageRule()
    sizes = look_sizes(rule.min_requests, rule.max_requests)
    rows = [
        f"Looks at {len(sizes)} sizes, {sizes[0]} to {sizes[-1]} samples (every 5%); the stop "
        "rule's per-look tails (lower, upper): "
        + ", ".join(
            f"P{q * 100:g} {lo:.4f}, {hi:.4f}"
            for q in (0.9, 0.99)
            for lo, hi in [rule.look_tails(q)]
        )
        + ".",
        "",
        "| sequence | quantile | per-look interval | wrongly met | wrongly broken | how |",
        "|---|---|---|---:|---:|---|",
    ]
    for name, (draw, quantile) in SEQUENCES.items():
        for q in (0.9, 0.99):
            lo, hi = rule.look_tails(q)
            for label, tails in (("95%", (0.025, 0.025)), (f"tails {lo:.4f}, {hi:.4f}", (lo, hi))):
                if name == "independent":
                    met, broken = crossings(q, tails, sizes)
                    how = "exact (binomial walk)"
                else:
                    met, broken = _looked(draw, quantile(q), q, tails, sizes, trials, seed)
                    how = f"{trials} runs"
                rows.append(
                    f"| {name} | P{q * 100:g} | {label} | {met:.3f} | {broken:.3f} | {how} |"
                )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200, help="runs a cell (default 200)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    started = time.time()
    first = one_look(args.trials, args.seed)
    second = looks(args.trials, args.seed)
    command = (
        "python bench/interval_coverage.py"
        + (f" --trials {args.trials}" if args.trials != 200 else "")
        + (f" --seed {args.seed}" if args.seed != 7 else "")
    )
    text = "\n".join([
        f"## Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"Command ({time.time() - started:.0f} s wall): `{command}`",
        "",
        f"Machine: {platform.machine()}, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}.",
        "",
        "### One look: 95% intervals",
        "",
        *first,
        "",
        "### The stop rule's looks: a stage at its limit",
        "",
        *second,
        "",
    ])  # fmt: skip
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
