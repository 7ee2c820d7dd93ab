"""Virtual time (locust_llm.sim.virtual): exact invariants, the run dir, and agreement with a
real-time run through the real client."""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from locust_llm.errors import InputError
from locust_llm.launch.sweep import DEMO_SIM_ARGS
from locust_llm.metrics import RequestRecord
from locust_llm.options.table import SWEEP_FLAGS
from locust_llm.rundir.layout import read_run_info
from locust_llm.sim import cli as sim_cli
from locust_llm.sim.config import SimConfig
from locust_llm.sim.virtual import VirtualWorkload, simulate, write_run_dir
from locust_llm.workloads.stages import StagePlan, parse_stages

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import bench_virtual

CLI = [sys.executable, "-m", "locust_llm.cli"]
SMALL = SimConfig(model="mistral-7b", gpu="rtx4090", num_gpu_blocks_override=400, seed=3)


def closed(levels: tuple[int, ...], requests: int, **kw: object) -> VirtualWorkload:
    stages = tuple(StagePlan(concurrency=c, requests=requests) for c in levels)
    settings: dict = {"input_len": "uniform:64,256", "max_tokens": "32", **kw}
    return VirtualWorkload(stages=stages, **settings)


def stage_rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "stages.csv").open() as fh:
        return list(csv.DictReader(fh))


def test_every_request_is_one_record_and_stages_end_at_their_count() -> None:
    run = simulate(SMALL, closed((1, 4, 16), 12), start_wall_s=1000.0)
    ids = [r.request_id for r in run.records]
    assert len(ids) == len(set(ids))
    sent = max(int(i.split("-")[1]) for i in ids)
    assert len(ids) == sent  # nothing sent went unrecorded
    stages = run.info.stages
    for stage in stages:
        own = [r for r in run.records if r.stage == stage.index]
        ends = [r.start_wall_s + r.e2e_s for r in own]
        # the stage ended at the step that completed its 12th request (several can end at once)
        assert sum(e < stage.end_wall_s - 1e-9 for e in ends) < 12
        assert sum(e <= stage.end_wall_s + 1e-9 for e in ends) >= 12
        assert all(stage.start_wall_s <= r.start_wall_s < stage.end_wall_s for r in own)
    assert all(r.ok for r in run.records)  # the drain let every stream finish
    assert [s.start_wall_s for s in stages[1:]] == [s.end_wall_s for s in stages[:-1]]


def test_max_sends_sends_exactly_that_many_at_most_c_at_once() -> None:
    stage = StagePlan(concurrency=5, requests=23, max_sends=23)
    run = simulate(SMALL, VirtualWorkload(stages=(stage,), max_tokens="16"), start_wall_s=0.0)
    assert len(run.records) == 23
    events = sorted(
        [(r.start_wall_s, 1) for r in run.records]
        + [(r.start_wall_s + r.e2e_s, -1) for r in run.records],
        key=lambda e: (e[0], e[1]),
    )
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    assert peak == 5


def test_lengths_follow_the_client_and_server_rules() -> None:
    eos = SimConfig(model="mistral-7b", gpu="rtx4090", output_len="fixed:20", seed=1)
    capped = simulate(eos, closed((2,), 10, ignore_eos=False))
    assert {r.output_tokens for r in capped.records} == {20}  # EOS before max_tokens 32
    forced = simulate(eos, closed((2,), 10, ignore_eos=True))
    assert {r.output_tokens for r in forced.records} == {32}
    assert all(64 <= r.input_tokens <= 256 for r in forced.records)
    assert len({r.input_tokens for r in forced.records}) > 3  # drawn, not fixed


def test_records_match_the_engine_timeline_and_the_metric_definitions() -> None:
    run = simulate(SMALL, closed((1,), 3, ignore_eos=True), start_wall_s=0.0)
    for r in run.records:
        assert r.chunks == r.output_tokens == 32
        assert r.tpot_s == pytest.approx((r.e2e_s - r.ttft_s) / 31)
        assert r.itl_mean_s == pytest.approx(r.tpot_s)
        assert r.ttft_s > 0 and not r.tokens_estimated
    chunked = simulate(
        SimConfig(model="mistral-7b", gpu="rtx4090", tokens_per_chunk=5, seed=3),
        closed((1,), 3, ignore_eos=True),
    )
    assert {r.chunks for r in chunked.records} == {math.ceil(32 / 5)}
    assert {r.output_tokens for r in chunked.records} == {32}


def test_open_loop_poisson_and_gamma_arrivals() -> None:
    def gaps(burstiness: float) -> list[float]:
        stage = StagePlan(rate=20.0, duration_s=60.0)
        wl = VirtualWorkload(stages=(stage,), max_tokens="4", burstiness=burstiness, seed=7)
        run = simulate(SMALL, wl, start_wall_s=0.0)
        starts = sorted(r.start_wall_s for r in run.records)
        assert all(r.scheduled_wall_s == r.start_wall_s for r in run.records)
        n = len(starts)
        assert abs(n - 1200) < 4 * math.sqrt(1200) * max(1.0 / math.sqrt(burstiness), 1.0)
        return [b - a for a, b in itertools.pairwise(starts)]

    poisson = gaps(1.0)
    assert statistics.pstdev(poisson) / statistics.fmean(poisson) == pytest.approx(1.0, abs=0.1)
    bursty = gaps(0.25)  # gamma shape 0.25, as --llm-burstiness 0.25: CV 1 / sqrt(0.25) = 2
    assert statistics.pstdev(bursty) / statistics.fmean(bursty) == pytest.approx(2.0, rel=0.2)
    regular = gaps(100.0)
    assert statistics.pstdev(regular) / statistics.fmean(regular) == pytest.approx(0.1, rel=0.2)


def test_open_loop_count_stage_sends_exactly_its_requests() -> None:
    wl = VirtualWorkload(stages=(StagePlan(rate=5.0, requests=40),), max_tokens="8")
    run = simulate(SMALL, wl)
    assert len(run.records) == 40 and all(r.ok for r in run.records)
    assert run.info.mode == "open"


def test_stop_timeout_cancels_what_is_still_running() -> None:
    stage = StagePlan(concurrency=4, duration_s=2.0)
    wl = VirtualWorkload(stages=(stage,), max_tokens="2000", ignore_eos=True, stop_timeout_s=1.0)
    run = simulate(SimConfig(model="mistral-7b", gpu="rtx4090"), wl, start_wall_s=0.0)
    kinds = Counter(r.error_kind for r in run.records)
    assert kinds == {"cancelled": 4}
    # each keeps its time in flight (sent at 0, cancelled at the stage's 2 s + the 1 s stop
    # timeout), as the client's cancelled records do: the report reads how long they waited
    assert all(abs(r.e2e_s - 3.0) < 0.05 and r.output_tokens > 0 for r in run.records)


def test_too_large_requests_are_400_records_and_the_loop_stays_bounded() -> None:
    tiny = SimConfig(model="mistral-7b", gpu="rtx4090", max_model_len=100)
    wl = VirtualWorkload(stages=(StagePlan(concurrency=2, requests=5),), input_len="200")
    run = simulate(tiny, wl)
    assert {(r.status_code, r.error_kind) for r in run.records} == {(400, "http_4xx")}
    assert 5 <= len(run.records) <= 7


def test_open_loop_stages_count_every_arrival_drawn_as_sent() -> None:
    """As the client does: each stage's arrivals drawn, each one sent (a record) or unsent with
    a reason; in virtual time nothing runs dry and every arrival is sent on time."""
    stages = (StagePlan(rate=4.0, duration_s=5.0), StagePlan(rate=12.0, duration_s=5.0))
    run = simulate(SMALL, VirtualWorkload(stages=stages, max_tokens="8", seed=5))
    sent = Counter(r.stage for r in run.records)
    for stage in run.info.stages:
        assert stage.arrivals_drawn == sent[stage.index] > 0
        assert stage.arrivals_unsent == {}
    assert sent[1] > 2 * sent[0]


def test_telemetry_has_every_signal_at_every_scrape() -> None:
    run = simulate(SMALL, closed((1, 8), 10), start_wall_s=0.0)
    per_signal = Counter(row[2] for row in run.telemetry)
    scrapes = math.floor(run.virtual_s / 1.0) + 1
    expected = {
        "running",
        "waiting",
        "kv_cache_usage",
        "preemptions",
        "scrape_up",
        "gpu_util",
        "dram_bw_util",
        "mem_used_bytes",
        "mem_total_bytes",
        "power_w",
        "prompt_tokens_total",
        "generation_tokens_total",
        "prompt_tokens_cached_total",
        "phase_queue_s",
        "phase_prefill_s",
        "phase_decode_s",
        "phase_requests",
        "step_tokens_total",
        "engine_steps_total",
    }
    assert set(per_signal) == expected
    assert per_signal["running"] == scrapes
    assert per_signal["gpu_util"] == scrapes - 1  # the first read has no interval yet
    util = [row[4] for row in run.telemetry if row[2] == "gpu_util"]
    assert all(0 <= u <= 1 for u in util) and max(util) > 0.9
    running = [row[4] for row in run.telemetry if row[2] == "running"]
    assert max(running) == 8


def test_phase_sums_match_the_records_they_cover() -> None:
    """vLLM's phase histograms in virtual time: at each scrape, the requests finished so far;
    their queue + prefill is the TTFT each record measured from its stream, decode the rest."""
    run = simulate(SMALL, closed((2, 12), 30), start_wall_s=0.0)
    last: dict[str, tuple[float, float]] = {}
    for wall_s, _, signal, _, value in run.telemetry:
        if signal.startswith("phase_") or signal == "generation_tokens_total":
            last[signal] = (wall_s, value)
    at_s = last["phase_requests"][0]
    done = [r for r in run.records if r.ok and r.start_wall_s + r.e2e_s <= at_s + 1e-9]
    assert last["phase_requests"][1] == len(done) > 20
    ttft = sum(r.ttft_s for r in done)
    queue_prefill = last["phase_queue_s"][1] + last["phase_prefill_s"][1]
    assert queue_prefill == pytest.approx(ttft, rel=1e-9)
    assert last["phase_queue_s"][1] > 0  # 12 users for a pool of 400 blocks: some wait
    decode = sum(r.e2e_s - r.ttft_s for r in done)
    assert last["phase_decode_s"][1] == pytest.approx(decode, rel=1e-9)


def test_bad_input_is_one_clear_line() -> None:
    with pytest.raises(InputError, match="request count or a duration"):
        simulate(SMALL, VirtualWorkload(stages=(StagePlan(concurrency=1),)))
    with pytest.raises(InputError, match="--input-len"):
        simulate(SMALL, closed((1,), 1, input_len="lognormal:x"))
    with pytest.raises(InputError, match="one of the two"):
        parse_stages(concurrency="1,2", rate="3", requests="4", flags=SWEEP_FLAGS)
    with pytest.raises(InputError, match="one per stage"):
        parse_stages(concurrency="1,2,4", requests="4,5", flags=SWEEP_FLAGS)


def test_run_dir_is_read_by_the_report_unchanged(tmp_path: Path) -> None:
    run = simulate(SMALL, closed((1, 4, 16), 10, scrape_interval_s=0.2))  # short stages
    run_dir = write_run_dir(run, tmp_path / "virtual")
    info = read_run_info(run_dir)
    assert [s.name for s in info.stages] == ["c=1", "c=4", "c=16"]
    out = subprocess.run(
        [*CLI, "report", str(run_dir)], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode in (0, 3), out.stderr
    rows = stage_rows(run_dir)
    assert [int(float(r["concurrency"])) for r in rows] == [1, 4, 16]
    assert sum(int(r["requests"]) for r in rows) == len(run.records)
    assert all(float(r["gpu_util"]) > 0 for r in rows)  # telemetry joined to the stages
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["verdict"]


def test_cli_writes_a_run_dir(tmp_path: Path) -> None:
    out_dir = tmp_path / "v"
    cmd = [
        *CLI,
        "virtual",
        *DEMO_SIM_ARGS,
        "--concurrency",
        "1,4",
        "--stage-requests",
        "4",
        "--max-tokens",
        "16",
        "--input-len",
        "64",
        "--ignore-eos",
        "--out",
        str(out_dir),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "x real time" in out.stdout
    for name in ("run.json", "requests.parquet", "telemetry.parquet"):
        assert (out_dir / name).is_file()
    bad = subprocess.run(
        [*CLI, "virtual", "--concurrency", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "--stage-requests" in bad.stderr


def _demo_config() -> SimConfig:
    """The simulator of ``locust-llm demo`` (its ``DEMO_SIM_ARGS``, as the sim's CLI reads them)."""
    parser = argparse.ArgumentParser()
    sim_cli.configure_parser(parser)
    return sim_cli.config_from_args(parser.parse_args(DEMO_SIM_ARGS))


def _c4_ttfts_at_every_phase(phases: int) -> list[float]:
    """The c=4 stage's TTFTs (s) of the agreement sweep in virtual time, the c=1 stage ended at
    ``phases`` points spread over one of its requests (their length taken from the first
    run's c=1 stage): every grouping the switch can make."""
    config = _demo_config()

    def run(first_stage_s: float) -> list[RequestRecord]:
        workload = VirtualWorkload(
            stages=(
                StagePlan(concurrency=1, duration_s=first_stage_s),
                StagePlan(concurrency=4, duration_s=10.0),
            ),
            input_len="128",
            max_tokens="32",
            ignore_eos=True,
        )
        return simulate(config, workload, start_wall_s=0.0).records

    records = run(10.0)
    one_request = statistics.median(r.e2e_s for r in records if r.stage == 0)
    ttfts = []
    for k in range(phases):
        if k:
            records = run(10.0 + one_request * k / phases)
        ttfts += [r.ttft_s for r in records if r.stage == 1 and r.ok]
    return sorted(ttfts)


@pytest.mark.slow
def test_virtual_report_agrees_with_a_real_time_run(tmp_path: Path) -> None:
    """The same small sweep through the real client and simulator, and in virtual time.

    Tolerances from bench/results/virtual.md (five real runs on the 2-core shared host): real
    QPS varies by one request per 10 s stage (6.5% at c=1), TPOT agrees to 0.2%. TTFT P50 sits
    above the virtual one at c=1 by the real HTTP path: 3.3-4.7 ms on 2026-12-05 (3.5 ms on a
    fresh-clone run of 2026-12-03), 1.0-1.4 ms on 2026-12-06. Held to 10%, 20% (5 ms at least)
    and 5%.

    At c=4 every answer is 32 tokens, so the closed loop keeps the grouping the stage switch
    made: the three new users' first prompts are prefilled together, and the first stage's user
    joins them, or comes a step later, or on its own; the TTFTs then settle, e.g. at ~66 ms for
    all four, or ~66 for three and ~37 for one (2026-12-06, the c=4 TTFT P50 of real runs:
    65.3, 65.1, 64.4 and 43.9 ms). Which one a run falls into is set by how far
    that user was into its request at the switch: in a real run by Locust's shape, which ticks
    once a second, in a virtual one by the stage's exact length. Until 2026-12-06 this test
    held the real c=4 P50 to the virtual one of a fixed switch, and failed when the two fell
    into different groupings (51.4 against 66.6 ms). Matching the phase itself did not hold
    (three runs of 2026-12-06: the groupings differed twice), and a real switch can make
    groupings a virtual one never makes (its three new users start within a millisecond, and a
    step can begin between them; in virtual time they start at one instant: the run at 43.9 ms).
    So at c=4 the real first tokens are held to a band, not a match: within the range of the
    TTFTs the virtual run gives with its switch at 60 points over a request (36.6-67.3 ms),
    widened by 10% and 5 ms, all but 10% of them. The switch's own requests (each user's first
    at c=4) are left out of the band and shown beside it: Locust's tick labels the first
    stage's user's next request c=4 before the three new users are spawned, so it can start
    alone (21 ms) and the new ones arrive during its prefill and wait for it (81 ms, CI of
    2026-12-06: 4 of 64 outside, all four of them the switch's), a grouping the virtual switch,
    which starts the new users at the stage's first instant, never makes. The later requests
    settle into the groupings the band holds, unless a busy host's pause regroups the users
    mid-stage: the same wait behind a lone prefill again, for one round of three requests (3 of
    59 at 84 ms in one of three runs made at once on the 2-core host, 2026-12-06; 0 of 59 and
    0 of 60 in the other two), hence 10% and not 5%. The band (27.9-79.0 ms) still fails a
    prefill ~25% dearer than the twin's (the ~66 ms requests, half or more of every grouping
    seen, pass 79 ms), and a ~25% cheaper one where the grouping has its ~37 ms requests (one
    in four go under 27.9 ms). The bands of the same twin on other GPUs (a100-80gb 12.8-45.9,
    l40s 16.1-54.7, h100-sxm 4.3-23.7 ms) leave 30-60 of the 59-60 later first tokens of each
    of those three runs outside. A step's cost is held by the TPOT check (5%).
    """
    sweep = bench_virtual.SWEEP
    real_dir, virtual_dir = tmp_path / "real", tmp_path / "virtual"
    real = subprocess.run(
        [*CLI, "demo", *sweep, "--workers", "1", "--out", str(real_dir), "--quiet"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert real.returncode == 0, real.stderr[-2000:]
    virtual = subprocess.run(
        [*CLI, "virtual", *DEMO_SIM_ARGS, *sweep, "--ignore-eos", "--out", str(virtual_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert virtual.returncode == 0, virtual.stderr
    report = subprocess.run(
        [*CLI, "report", str(virtual_dir)], capture_output=True, text=True, timeout=120, check=False
    )
    assert report.returncode in (0, 3), report.stderr
    ours, theirs = stage_rows(virtual_dir), stage_rows(real_dir)
    assert len(ours) == len(theirs) == 2
    for v, r in zip(ours, theirs, strict=True):
        assert float(v["input_tokens_avg"]) == pytest.approx(float(r["input_tokens_avg"]), rel=0.1)
        assert float(v["output_tokens_avg"]) == float(r["output_tokens_avg"]) == 32
        columns = [("qps", 0.10, 0.0), ("tpot_avg_s", 0.05, 0.0)]
        if v["stage"] == "0":
            columns.append(("ttft_p50_s", 0.20, 0.005))
        for column, tolerance, floor in columns:
            expected = pytest.approx(float(r[column]), rel=tolerance, abs=floor)
            assert float(v[column]) == expected, column
    twin = _c4_ttfts_at_every_phase(60)
    low, high = min(twin) * 0.9 - 0.005, max(twin) * 1.1 + 0.005
    columns = ["stage", "worker_id", "user_id", "start_wall_s", "ttft_s"]
    table = pq.read_table(real_dir / "requests.parquet", columns=columns).to_pylist()
    stage_1 = sorted((row for row in table if row["stage"] == 1), key=lambda r: r["start_wall_s"])
    users_seen: set[tuple[str, int]] = set()
    switch, real_c4 = [], []
    for row in stage_1:
        user = (row["worker_id"], row["user_id"])
        (real_c4 if user in users_seen else switch).append(row["ttft_s"])
        users_seen.add(user)
    assert len(switch) == 4 and len(real_c4) >= 40, (len(switch), len(real_c4))
    outside = [round(t * 1e3, 1) for t in real_c4 if not low <= t <= high]
    what = (outside, [round(t * 1e3, 1) for t in switch], low, high)
    assert len(outside) <= 0.10 * len(real_c4), what


def test_a_five_stage_sweep_runs_over_100x_faster_than_real_time() -> None:
    """The demo's sweep (bench/bench_virtual.py speed: a median of 441x on 2026-12-05, 686x on
    2026-12-06, on the shared host)."""
    config, workload = bench_virtual.demo_sweep()
    best = max(simulate(config, workload).speedup for _ in range(3))
    assert best >= 100


def test_fewer_users_finish_their_request_and_send_no_more() -> None:
    wl = VirtualWorkload(
        stages=(StagePlan(concurrency=4, requests=8), StagePlan(concurrency=1, requests=5)),
        max_tokens="16",
    )
    run = simulate(SMALL, wl, start_wall_s=0.0)
    second = [r for r in run.records if r.stage == 1]
    assert {r.user_id for r in second} == {0}
    assert len(second) >= 5 and all(r.ok for r in run.records)
    switch = run.info.stages[1].start_wall_s
    late_first = [r for r in run.records if r.stage == 0 and r.start_wall_s + r.e2e_s > switch]
    assert all(r.start_wall_s < switch for r in late_first)  # in flight at the switch, finished


def test_a_dataset_of_lengths_is_replayed_in_send_order() -> None:
    pairs = ((100, 5), (300, 7), (50, 3))
    stage = StagePlan(concurrency=1, requests=6, max_sends=6)
    wl = VirtualWorkload(stages=(stage,), lengths=pairs, ignore_eos=True)
    run = simulate(SMALL, wl)
    got = [
        (r.input_tokens, r.output_tokens) for r in sorted(run.records, key=lambda r: r.start_wall_s)
    ]
    assert got == [*pairs, *pairs]
    with pytest.raises(InputError, match="pair of lengths"):
        simulate(SMALL, VirtualWorkload(stages=(stage,), lengths=((0, 4),)))


@pytest.mark.slow
def test_open_loop_virtual_run_agrees_with_the_real_client(tmp_path: Path) -> None:
    """Open loop (rates 2 and 6 req/s, near-regular arrivals so both sides see the same load):
    the real Locust client against the real simulator, and the same in virtual time
    (bench_virtual.py agree-open measures the spread these bounds allow for)."""
    from conftest import run_locust

    from locust_llm.sim.testing import running_sim

    real_dir, virtual_dir = tmp_path / "real", tmp_path / "virtual"
    with running_sim(**bench_virtual.OPEN_SIM) as url:
        out = run_locust(["-f", "locustfiles/sweep.py", "--host", url, "--headless",
                          "--only-summary", "--stop-timeout", "30s", "--llm-run-dir",
                          str(real_dir), *bench_virtual.OPEN_LLM], timeout=180)  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    virtual = subprocess.run([*CLI, "virtual", *DEMO_SIM_ARGS, *bench_virtual.OPEN_VIRTUAL,
                              "--out", str(virtual_dir)],
                             capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert virtual.returncode == 0, virtual.stderr
    for run_dir in (real_dir, virtual_dir):
        report = subprocess.run([*CLI, "report", str(run_dir)], capture_output=True, text=True,
                                timeout=120, check=False)  # fmt: skip
        assert report.returncode in (0, 3), report.stderr
    ours, theirs = stage_rows(virtual_dir), stage_rows(real_dir)
    assert [r["rate"] for r in ours] == [r["rate"] for r in theirs]
    for v, r in zip(ours, theirs, strict=True):
        assert float(v["qps"]) == pytest.approx(float(r["qps"]), rel=0.15)  # +-1 request / 10 s
        assert float(v["tpot_avg_s"]) == pytest.approx(float(r["tpot_avg_s"]), rel=0.05)
        # TTFT P50 ~28 ms: the real runs spread by 4 ms and sit up to 3 ms above the virtual
        # one (HTTP path, host scheduling; bench/results/virtual.md)
        assert abs(float(r["ttft_p50_s"]) - float(v["ttft_p50_s"])) < 0.010


def test_tensor_parallel_telemetry_has_one_series_per_gpu() -> None:
    tp2 = SimConfig(model="llama-3.1-8b", gpu="a100-40gb", tp=2, seed=1)
    run = simulate(tp2, closed((1, 4), 6), start_wall_s=0.0)
    labels = {row[3] for row in run.telemetry if row[2] == "gpu_util"}
    assert labels == {"0", "1"}
    assert all(r.ok for r in run.records)


def test_trace_and_step_trace_write_the_ground_truth(tmp_path: Path) -> None:
    """``locust-llm virtual --trace --step-trace`` write the lines the real-time server writes:
    one per request (its record's id, outcome and engine times) and one per step, and the
    labels read them; a KV-limited stage is labelled as such."""
    import pandas as pd

    from locust_llm.sim.labels import ground_truth
    from locust_llm.sim.trace import read_trace

    trace, steps, out = tmp_path / "t.jsonl", tmp_path / "s.jsonl", tmp_path / "run"
    proc = subprocess.run(
        [*CLI, "virtual", "--concurrency", "1,16", "--stage-requests", "8,48",
         "--max-num-seqs", "16", "--num-gpu-blocks-override", "40", "--max-model-len", "600",
         "--input-len", "256", "--max-tokens", "64", "--ignore-eos",
         "--fault", "http500:0.1", "--trace", str(trace), "--step-trace", str(steps),
         "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = pd.read_parquet(out / "requests.parquet")
    lines = read_trace(trace)
    assert sorted(x["client_request_id"] for x in lines) == sorted(records.request_id)
    by_id = {x["client_request_id"]: x for x in lines}
    for rec in records.itertuples():
        line = by_id[rec.request_id]
        assert (line["outcome"] == "ok") == bool(rec.ok), (line, rec)
        if rec.ok:
            assert line["tokens_sent"] == rec.output_tokens == 64
            assert line["first_token"] - line["arrival"] == pytest.approx(rec.ttft_s, abs=1e-6)
    faulted = [x for x in lines if x["outcome"] != "ok"]
    assert faulted and all(x["outcome"] == "fault:http500" and x["status"] == 500
                           for x in faulted)  # fmt: skip
    step_lines = read_trace(steps)
    info = read_run_info(out)
    assert len(step_lines) == info.extra["steps"]
    second = info.stages[1]
    truth = ground_truth(step_lines, lines, start_s=second.start_wall_s, end_s=second.end_wall_s)
    assert truth.steps > 0 and truth.admission_limit == "kv_blocks", truth.as_dict()
