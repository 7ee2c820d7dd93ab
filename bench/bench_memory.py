"""Master memory under a long run: the durable recorder against the old keep-everything list.

``day``: the master's recorder (``locust_llm.client.recorder.Recorder`` with its journal) receives a
24-hour-equivalent of records (``--rate`` records/s x ``--hours``), in the batches workers
send, flushed to the journal (lz4 Arrow IPC, fsync'd) every ``--flush-s`` seconds of run time;
the process's RSS is sampled at each tenth of the run. Then the journal is finalised to
requests.parquet (peak RSS and time). For comparison, the same records are kept in a list of
row tuples (what the master did before: ~1.2 KB per request measured in a soak) for
``--baseline-share`` of the run, and the growth per record extrapolated to the whole day.

``soak``: a real single-process Locust run against the simulator at the highest rate the
machine holds for ``--soak-s`` seconds; the Locust process's RSS is sampled every second and
the growth from the end of the first tenth to the end is reported.

    .venv/bin/python bench/bench_memory.py --hours 24 --rate 100 --soak-s 300
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from locust_llm.client.messages import RecordBatch  # noqa: E402
from locust_llm.client.recorder import Recorder  # noqa: E402
from locust_llm.metrics import RequestRecord  # noqa: E402
from locust_llm.rundir.layout import RunInfo  # noqa: E402

MIB = 1024 * 1024


def _rss() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / MIB


def _batch(worker: str, start: int, n: int) -> RecordBatch:
    """One worker batch of ``n`` realistic records (ids, times, token counts, stage)."""
    rows = []
    producer = Recorder(is_worker=True)
    for i in range(start, start + n):
        producer.request_started()
        producer.add(
            RequestRecord(
                request_id=f"{i:08x}-5f1c-4a8e-9d3b-{i:012x}", endpoint="/v1/chat/completions",
                model="qwen2.5-7b", worker_id=worker, user_id=i % 64, stage=i // 100_000,
                start_wall_s=1.7e9 + i / 100, ok=True, status_code=200, ttft_s=0.05 + i % 7 / 100,
                e2e_s=2.0, first_token_s=0.05, last_token_s=1.99, tpot_s=0.0075, itl_mean_s=0.0075,
                itl_p50_s=0.007, itl_p99_s=0.02, itl_max_s=0.03, chunks=256, input_tokens=512,
                output_tokens=256,
            )
        )  # fmt: skip
    rows = producer.take_batch(worker).records
    return RecordBatch(worker=worker, records=rows, sent=start + n, recorded=start + n)


def bench_day(rate: float, hours: float, flush_s: float, baseline_share: float) -> dict:
    total = int(rate * hours * 3600)
    per_flush = max(int(rate * flush_s), 1)
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        run_dir = Path(tmp)
        recorder = Recorder(is_worker=False)
        recorder.open_journal(run_dir)
        template = _batch("w1", 0, per_flush)  # the same rows each flush: RSS is the recorder's
        samples = [(0, _rss())]
        started = time.perf_counter()
        sent = 0
        step = max(total // 10, per_flush)
        next_sample = step
        while sent < total:
            recorder.receive_batch(template)
            recorder.flush()
            sent += per_flush
            if sent >= next_sample:
                samples.append((sent, _rss()))
                next_sample += step
        feed_s = time.perf_counter() - started
        journal_mb = (run_dir / "requests.arrows").stat().st_size / MIB
        peak = [0.0]
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], psutil.Process().memory_info().rss / MIB)
                time.sleep(0.05)

        watcher = threading.Thread(target=watch)
        watcher.start()
        started = time.perf_counter()
        recorder.finalise(run_dir, RunInfo(run_id="bench", state="finished"))
        finalise_s = time.perf_counter() - started
        stop.set()
        watcher.join()
        parquet_mb = (run_dir / "requests.parquet").stat().st_size / MIB
        recorder.remove_journal()
    # the old design: every row kept in a list until the end
    kept: list[tuple[object, ...]] = []
    base_n = max(int(total * baseline_share), per_flush)
    before = _rss()
    while len(kept) < base_n:
        kept.extend(tuple(r) for r in _batch("w1", len(kept), per_flush).records)
    per_record_kb = (_rss() - before) * 1024 / len(kept)
    del kept
    return {
        "records": total, "hours": hours, "rate": rate, "per_flush": per_flush,
        "samples": samples, "feed_s": feed_s,
        "journal_mb": journal_mb, "parquet_mb": parquet_mb, "finalise_s": finalise_s,
        "finalise_peak_mb": peak[0], "baseline_records": base_n,
        "baseline_kb_per_record": per_record_kb,
    }  # fmt: skip


def bench_soak(soak_s: float) -> dict:
    from cluster_utils import LOCUST, Cluster

    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp, Cluster(Path(tmp)) as cluster:
        _, sim_url = cluster.sim("--zero-cost", "--step-overhead-ms", "2", "--output-len",
                                 "fixed:8")  # fmt: skip
        run_dir = Path(tmp) / "run"
        proc = cluster.start("soak", [
            LOCUST, "-f", "locustfiles/sweep.py", "--headless", "--host", sim_url,
            "--llm-concurrency", "16", "--llm-stage-duration", str(int(soak_s)),
            "--llm-max-tokens", "8", "--llm-server-metrics", "none", "--llm-run-dir",
            str(run_dir), "--stop-timeout", "5", "--only-summary",
        ])  # fmt: skip
        handle = psutil.Process(proc.pid)
        rss: list[float] = []
        started = time.monotonic()
        while proc.alive() and time.monotonic() - started < soak_s + 60:
            try:
                rss.append(handle.memory_info().rss / MIB)
            except psutil.NoSuchProcess:
                break
            time.sleep(1.0)
        proc.wait(120)
        import pandas as pd

        records = len(pd.read_parquet(run_dir / "requests.parquet"))
    running = rss[: int(soak_s)]
    tenth = max(len(running) // 10, 1)
    early = statistics.median(running[tenth - 1 : tenth + 4])
    late = statistics.median(running[-5:])
    return {"soak_s": soak_s, "records": records, "rate": records / soak_s,
            "rss_early_mb": early, "rss_late_mb": late, "growth": late / early - 1,
            "tenths": [(i * tenth, running[min(i * tenth, len(running) - 1)])
                       for i in range(1, 11)],
            "load_end": os.getloadavg()[0]}  # fmt: skip


def write(day: dict | None, soak: dict | None, argv: list[str]) -> Path:
    lines = [
        "# Master memory over a long run (durable records)",
        "",
        f"Command: `.venv/bin/python bench/bench_memory.py {' '.join(argv)}`  ",
        f"Machine: {platform.node()}, {psutil.cpu_count()} cores, Python "
        f"{platform.python_version()}, {platform.platform()}  ",
        f"Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        "",
    ]
    if day is not None:
        lines += _day_lines(day)
    if soak is not None:
        lines += _soak_lines(soak)
    path = ROOT / "bench" / "results" / ("memory.md" if day is not None else "memory_soak.md")
    path.write_text("\n".join(lines))
    return path


def _day_lines(day: dict) -> list[str]:
    lines = [
        f"## {day['hours']:g}-hour equivalent at {day['rate']:g} records/s: {day['records']:,} "
        "records into the master's recorder",
        "",
        f"Batches of {day['per_flush']:,} records (one flush interval), each appended to the",
        "lz4 Arrow IPC journal and fsync'd; RSS of the process after each tenth of the run:",
        "",
        "| records received | RSS (MiB) |",
        "|---:|---:|",
        *(f"| {n:,} | {mb:.1f} |" for n, mb in day["samples"]),
        "",
    ]
    first, last = day["samples"][1][1], day["samples"][-1][1]
    old_gb = day["baseline_kb_per_record"] * day["records"] / 1024 / 1024
    lines += [
        f"- RSS growth from the first tenth to the end: {last - first:+.1f} MiB "
        f"({(last / first - 1) * 100:+.1f}%)",
        f"- journal on disk: {day['journal_mb']:.0f} MiB; requests.parquet after finalising: "
        f"{day['parquet_mb']:.0f} MiB, written in {day['finalise_s']:.1f} s with a peak RSS "
        f"of {day['finalise_peak_mb']:.0f} MiB",
        f"- feeding and flushing the day took {day['feed_s']:.0f} s (wall) here; every flush "
        "carries the same rows, so the parquet size (repeats compress) is not a real day's",
        f"- the old design (every row kept in a list): {day['baseline_kb_per_record']:.2f} KiB "
        f"per record measured over {day['baseline_records']:,} records, i.e. "
        f"{old_gb:.1f} GiB for the same day, all lost on SIGKILL",
        "",
    ]
    return lines


def _soak_lines(soak: dict) -> list[str]:
    return [
        f"## Soak: one Locust process, {soak['soak_s']:.0f} s at the highest rate here",
        "",
        f"{soak['records']:,} requests ({soak['rate']:.0f} req/s, 16 users, 8-token streams "
        "from the simulator). Locust process RSS (median of 5 one-second samples):",
        "",
        f"- after the first tenth: {soak['rss_early_mb']:.1f} MiB",
        f"- at the end: {soak['rss_late_mb']:.1f} MiB",
        f"- growth: {soak['growth'] * 100:+.1f}% (target < 5%)",
        f"- load average (1 min) at the end: {soak['load_end']:.2f}",
        "",
        "| seconds into the soak | RSS (MiB) |",
        "|---:|---:|",
        *(f"| {t} | {mb:.1f} |" for t, mb in soak.get("tenths", [])),
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0, help="records per second")
    parser.add_argument("--hours", type=float, default=24.0,
                        help="run length to replay (0: no day, the soak alone, written to "
                        "bench/results/memory_soak.md)")  # fmt: skip
    parser.add_argument("--flush-s", type=float, default=1.0, help="seconds per flush")
    parser.add_argument("--baseline-share", type=float, default=0.02,
                        help="share of the day the old list design is measured on")  # fmt: skip
    parser.add_argument("--soak-s", type=float, default=300.0, help="0: no soak")
    args = parser.parse_args()
    day = (
        bench_day(args.rate, args.hours, args.flush_s, args.baseline_share) if args.hours else None
    )
    soak = bench_soak(args.soak_s) if args.soak_s > 0 else None
    print(write(day, soak, sys.argv[1:]).read_text())


if __name__ == "__main__":
    main()
