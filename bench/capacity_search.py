"""The capacity search against a dense virtual sweep, over random simulator configurations.

For each configuration (seeded fresh unless ``--seed`` is given; the seed is printed and
written): random batch limit, prompt and output lengths (uniform within +-50% of a random mean) and
simulator seed; SLOs set from a
one-user calibration run (a P90 or P99 of TPOT within 1.3-3x its one-user median, and of TTFT
within 3-10x). Closed loop (users) and open loop (requests/s) in turn:

1. the search (:class:`~locust_llm.live.capacity_planner.CapacityPlanner`, the defaults of
   ``locust-llm virtual --find-capacity``) finds its capacity and counts its requests and
   virtual seconds;
2. the reference: a dense sweep of long stages (every user, or 5% steps: half the resolution,
   over
   0.75-1.35x the found capacity, after a short doubling ramp, in one run as a sweep runs;
   ``REF_REQUESTS`` requests each, ``REF_REQUESTS_OPEN`` in an open loop, whose P99 near
   capacity swings with each queue episode: at 600 requests a stage at 1.2x the capacity
   passed where three 3000-request runs failed 3 of 3; the first 20% dropped) judged
   by point estimates against the same SLOs (and, open loop, completions at least 90% of the
   offered rate); the true capacity is the largest load of the grid below its first failing
   one (outside the grid: a miss, listed);
3. hit: the found capacity is within the resolution (10%) of the true one (closed loop: or
   within one user); where the sweep's own noise makes loads above its first failure pass
   again, the band up to the largest passing load is counted apart;
4. cost: the search's requests against the seed's fixed sweep (1, 10, 50, 100, 200 users with
   10, 20, 100, 200, 400 requests: 730), and its virtual seconds against that sweep's.

``python bench/capacity_search.py [--configs N] [--seed S] [--jobs J] [--out FILE]`` prints a
markdown section (command, machine, date, counts with denominators, each config's row).
``--recheck CONFIG:LOAD,LOAD,... --seed S`` judges a miss again: three long open-loop stages
(``RECHECK_REQUESTS`` each, their own arrival seeds) at each load of that configuration, each
percentile as a share of its limit and the reference's verdict.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from locust_llm.capacity.measure import StageRule
from locust_llm.capacity.search import CapacitySearch, SearchSettings
from locust_llm.capacity.slo import PercentileSlo, Slo
from locust_llm.live.capacity_planner import CapacityPlanner
from locust_llm.metrics import CLIENT_SIDE_KINDS
from locust_llm.report.diagnosis.thresholds import DEFAULT_THRESHOLDS
from locust_llm.sim.config import SimConfig
from locust_llm.sim.virtual import VirtualWorkload, simulate
from locust_llm.workloads.stages import StagePlan

REF_REQUESTS = 600
REF_REQUESTS_OPEN = 2000
RECHECK_REQUESTS = 2000
SEED_LOADS = (1, 10, 50, 100, 200)
SEED_REQUESTS = (10, 20, 100, 200, 400)
RESOLUTION = 0.10


@dataclass
class Case:
    index: int
    sim: SimConfig
    input_len: str
    max_tokens: str
    slo: Slo


def make_case(index: int, rng: random.Random) -> Case:
    sim = SimConfig(
        max_num_seqs=rng.choice([4, 8, 16]),
        seed=rng.randrange(1 << 30),
    )
    # lengths drawn per request (uniform within +-50%): users with identical requests would
    # run in lockstep on the deterministic engine, a steady state no real server shows
    mean_in = rng.choice([64, 128, 256, 512])
    mean_out = rng.choice([32, 64])
    input_len = f"uniform:{mean_in // 2},{mean_in * 3 // 2}"
    max_tokens = f"uniform:{mean_out // 2},{mean_out * 3 // 2}"
    one = simulate(
        sim,
        VirtualWorkload(
            stages=(StagePlan(concurrency=1, requests=30),),
            input_len=str(input_len),
            max_tokens=str(max_tokens),
            seed=sim.seed,
        ),
        start_wall_s=0.0,
    )
    ok = [r for r in one.records if r.ok]
    tpot1 = statistics.median(r.tpot_s for r in ok if math.isfinite(r.tpot_s))
    ttft1 = statistics.median(r.ttft_s for r in ok)
    q = rng.choice([90.0, 99.0])
    slo = Slo(
        percentiles=(
            PercentileSlo("tpot", q, round(tpot1 * rng.uniform(1.3, 3.0), 4)),
            PercentileSlo("ttft", q, round(ttft1 * rng.uniform(3.0, 10.0), 4)),
        ),
        errors=0.01,
    )
    return Case(index, sim, input_len, max_tokens, slo)


def workload(case: Case, stages: tuple[StagePlan, ...]) -> VirtualWorkload:
    return VirtualWorkload(
        stages=stages, input_len=case.input_len, max_tokens=case.max_tokens,
        seed=case.sim.seed, stop_timeout_s=0.0,
    )  # fmt: skip


def search(case: Case, closed: bool) -> tuple[CapacitySearch, int, float, float]:
    settings = SearchSettings(
        closed=closed, flat_gain=DEFAULT_THRESHOLDS.flat_gain, resolution=RESOLUTION,
        min_load=1.0 if closed else 1 / 64,
    )  # fmt: skip
    s = CapacitySearch(settings)
    planner = CapacityPlanner(s, case.slo, StageRule(), 0.0)
    t0 = time.perf_counter()
    run = simulate(case.sim, workload(case, (planner.first_plan(),)), start_wall_s=0.0,
                   planner=planner)  # fmt: skip
    return s, len(run.records), run.virtual_s, time.perf_counter() - t0


def stage_passes(case: Case, records: list, load: float, closed: bool) -> bool:
    """One long stage of the reference: the SLOs by point estimates after a 20% warm-up."""
    records = sorted(
        (r for r in records if r.error_kind not in CLIENT_SIDE_KINDS), key=lambda r: r.start_wall_s
    )
    kept = records[len(records) // 5 :]
    ok = [r for r in kept if r.ok]
    if not ok:
        return False
    for p in case.slo.percentiles:
        values = sorted(getattr(r, p.field) for r in ok if math.isfinite(getattr(r, p.field)))
        if not values or _pct(values, p.q) > p.limit_s:
            return False
    if case.slo.errors is not None and (len(kept) - len(ok)) / len(kept) > case.slo.errors:
        return False
    if not closed:
        first = kept[0].start_wall_s
        ends = [r.start_wall_s + r.e2e_s for r in ok]
        span = max(ends) - first
        if span > 0 and len(ok) / span < DEFAULT_THRESHOLDS.open_loop_shortfall * load:
            return False
    return True


def _pct(values: list[float], q: float) -> float:
    pos = (len(values) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def reference(case: Case, found: float, closed: bool) -> tuple[tuple[float, float] | None, str]:
    """The true capacity from a dense sweep around ``found``: the load below its first failing
    one, and the largest that passes (above it only where the sweep's own noise makes it pass
    again); None when the boundary is not inside the grid.

    One run, as a sweep runs: short ramp stages (doubling up to the grid, 50 requests each: a
    closed loop's users do not all start at once, as the search's do not) then every grid
    load in ascending order, ``REF_REQUESTS`` (open loop: ``REF_REQUESTS_OPEN``) requests each.
    """
    if closed:  # every user, or 5% steps where that is more than 13 stages
        step = max(1, round(found * 0.05))
        lo = max(1, math.floor(found * 0.75) - 1)
        grid = [float(x) for x in range(lo, math.ceil(found * 1.35) + 2, step)]
    else:
        grid = [found * (0.75 + 0.05 * k) for k in range(13)]
    ramp: list[float] = []
    x = 1.0 if closed else grid[0] / 8
    while x < grid[0]:
        ramp.append(x)
        x *= 2
    stages = tuple(
        StagePlan(concurrency=int(load), requests=n, max_sends=n)
        if closed
        else StagePlan(rate=load, requests=n)
        for load, n in [(r, 50) for r in ramp]
        + [(g, REF_REQUESTS if closed else REF_REQUESTS_OPEN) for g in grid]
    )
    run = simulate(case.sim, workload(case, stages), start_wall_s=0.0)
    by_stage: dict[int, list] = {}
    for r in run.records:
        by_stage.setdefault(r.stage, []).append(r)
    passes = [
        stage_passes(case, by_stage.get(len(ramp) + i, []), load, closed)
        for i, load in enumerate(grid)
    ]
    if passes[0] is False:
        return None, f"fails at the grid's bottom {grid[0]:.3g}"
    first_fail = next((i for i, ok in enumerate(passes) if not ok), None)
    if first_fail is None:
        return None, f"passes at the grid's top {grid[-1]:.3g}"
    last_pass = max(i for i, ok in enumerate(passes) if ok)
    note = ""
    if last_pass > first_fail:  # the boundary is itself noisy: passes above a failure
        note = f"dense sweep passes again up to {grid[last_pass]:.3g}"
    return (grid[first_fail - 1], grid[last_pass]), note


def seed_sweep_virtual_s(case: Case) -> float:
    stages = tuple(
        StagePlan(concurrency=c, requests=n) for c, n in zip(SEED_LOADS, SEED_REQUESTS, strict=True)
    )
    return simulate(case.sim, workload(case, stages), start_wall_s=0.0).virtual_s


def near(found: float, truth: float, closed: bool) -> bool:
    """Within the resolution of ``truth`` (closed loop: or one user off)."""
    return abs(found - truth) / truth <= RESOLUTION + 1e-9 or (closed and abs(found - truth) <= 1)


def run_case(case: Case) -> list[tuple[str, bool, bool, int, str]]:
    """Both loops of one configuration: (table row, hit, hit within the sweep's noisy band,
    requests the search sent) each."""
    out = []
    seed_s = seed_sweep_virtual_s(case)
    for closed in (True, False):
        s, sent, virtual_s, _ = search(case, closed)
        answer = s.answer()
        found = answer.capacity
        mode = "users" if closed else "rate"
        band: tuple[float, float] | None = None
        if found is None:
            note = "the search found no load meeting the SLOs"
        else:
            band, note = reference(case, found, closed)
        hit = band_hit = False
        if found is not None and band is not None:
            truth, top = band
            hit = near(found, truth, closed)
            band_hit = hit or (truth <= found <= top) or near(found, top, closed)
        row = (
            f"| {case.index} | {mode} | {case.sim.max_num_seqs} | {case.input_len} / "
            f"{case.max_tokens} | {case.slo.describe()} | {_fmt(found)} ({_fmt(answer.above)}) "
            f"| {_fmt(band[0] if band else None)} | {_fmt(band[1] if band else None)} "
            f"| {'hit' if hit else 'within band' if band_hit else 'MISS'} | {answer.stages} "
            f"| {sent} | {virtual_s:.0f} s (seed {seed_s:.0f} s) | {note} |"
        )
        print(row, flush=True)
        q = max(p.q for p in case.slo.percentiles)
        out.append((row, hit, band_hit, sent, f"{'closed' if closed else 'open'} loop, P{q:g}"))
    return out


def recheck(case: Case, loads: list[float]) -> list[str]:
    """Three long open-loop stages at each load (arrival seeds ``seed``, ``+1``, ``+2``)."""
    lines = [f"config {case.index}: {case.slo.describe()}"]
    for load in loads:
        runs = []
        for k in range(3):
            c = replace(case, sim=replace(case.sim, seed=case.sim.seed + k))
            stages = (StagePlan(rate=load, requests=RECHECK_REQUESTS),)
            records = simulate(c.sim, workload(c, stages), start_wall_s=0.0).records
            kept = sorted(records, key=lambda r: r.start_wall_s)[RECHECK_REQUESTS // 5 :]
            ok = [r for r in kept if r.ok]
            shares = []
            for p in case.slo.percentiles:
                values = sorted(v for r in ok if math.isfinite(v := getattr(r, p.field)))
                shares.append(f"{p.name} {_pct(values, p.q) / p.limit_s:.2f}")
            verdict = "pass" if stage_passes(c, records, load, False) else "fail"
            runs.append(" ".join(shares) + f" {verdict}")
        lines.append(f"{load:g}/s: " + " | ".join(runs))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", default="")
    parser.add_argument("--jobs", type=int, default=2, help="processes (at most 4)")
    parser.add_argument("--recheck", default="", help="CONFIG:LOAD,LOAD (open loop; --seed)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    rng = random.Random(seed)
    if args.recheck:
        index, _, loads = args.recheck.partition(":")
        cases = [make_case(i, rng) for i in range(int(index) + 1)]
        print("\n".join(recheck(cases[-1], [float(x) for x in loads.split(",")])))
        return 0
    started = time.time()
    rows, hits, band_hits, total, cheaper = [], 0, 0, 0, 0
    misses: list[str] = []
    seed_requests = sum(SEED_REQUESTS)
    cases = [make_case(i, rng) for i in range(args.configs)]
    with multiprocessing.get_context("fork").Pool(max(1, min(args.jobs, 4))) as pool:
        results = pool.map(run_case, cases)
    classes: dict[str, list[tuple[bool, bool, int]]] = {}
    for case_rows in results:
        for row, hit, band_hit, sent, cls in case_rows:
            classes.setdefault(cls, []).append((hit, band_hit, sent))
            total += 1
            hits += hit
            band_hits += band_hit
            cheaper += sent < seed_requests
            rows.append(row)
            if not band_hit:
                misses.append(row)
    machine = f"{platform.machine()}, {platform.system()} {platform.release()}, " + (
        f"{len(__import__('os').sched_getaffinity(0))} cores"
    )
    lines = [
        "## Capacity search against a dense virtual sweep",
        "",
        f"Command: `python bench/capacity_search.py --configs {args.configs} --seed {seed}`"
        f" (seed drawn fresh: {seed}); machine: {machine}; date: "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}; "
        f"{time.time() - started:.0f} s wall.",
        "",
        f"- within the resolution ({RESOLUTION:.0%}; closed loop: or 1 user) of the dense "
        f"sweep's capacity: **{hits} of {total}** searches "
        f"({args.configs} configurations x closed and open loop); misses are listed below",
        f"- within the resolution of the dense sweep's band (its last load below the first "
        f"failure up to the largest load that passes, where its own noise makes loads above a "
        f"failure pass): **{band_hits} of {total}**",
        f"- fewer requests than the seed's fixed sweep ({seed_requests}): **{cheaper} of {total}**",
        "",
        "| searches | within the resolution | within the band | fewer requests than "
        f"{seed_requests} | median requests |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {cls} objectives | {sum(h for h, _, _ in v)} / {len(v)} | "
            f"{sum(b for _, b, _ in v)} / {len(v)} | "
            f"{sum(n < seed_requests for _, _, n in v)} / {len(v)} | "
            f"{statistics.median(n for _, _, n in v):.0f} |"
            for cls, v in sorted(classes.items())
        ),
        "",
        "| config | loop | max seqs | in / out tokens | SLOs | found (first failing) | dense "
        "sweep: below first failure | largest passing | | stages | requests | virtual time "
        "(seed sweep) | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Misses (outside the band too):" if misses else "Misses (outside the band too): none.",
        *misses,
    ]
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


if __name__ == "__main__":
    sys.exit(main())
