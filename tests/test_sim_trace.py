"""The phase trace, ground-truth labels, the simulator's lag and its listen backlog."""

from __future__ import annotations

import math
import subprocess
import sys
import time
import urllib.request

import pandas as pd
import pytest

from locust_llm.report.diagnosis.lag import lag_summary, lag_warnings
from locust_llm.sim.config import config_from_mapping
from locust_llm.sim.engine import Engine
from locust_llm.sim.labels import VERDICT_KINDS, ground_truth
from locust_llm.sim.testing import SimThread, burst_connect_times, running_sim, stream_chat
from locust_llm.sim.trace import read_trace, request_times, step_record
from locust_llm.telemetry.vocabularies import extract_signals


def _stream(url: str, tokens: int) -> None:
    stream_chat(url, "hello there", max_tokens=tokens, timeout_s=20)


def _metric(text: str, name: str) -> float:
    return float(next(x for x in text.splitlines() if x.startswith(name)).split()[-1])


def test_trace_notes_survived_faults_and_steps_carry_the_physics(tmp_path) -> None:
    trace, steps = tmp_path / "trace.jsonl", tmp_path / "steps.jsonl"
    with running_sim(
        trace_path=str(trace), step_trace_path=str(steps), faults=("stall:1:0.2",)
    ) as url:
        _stream(url, 8)
        metrics = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    (line,) = read_trace(trace)
    assert line["outcome"] == "ok" and line["fault"] == "stall"  # survived, and noted
    assert line["arrival"] <= line["admission"] <= line["engine_first_token"]
    assert line["engine_finish"] < line["last_token"]  # the stall held the bytes back
    assert line["last_token"] - line["engine_finish"] == pytest.approx(0.2, abs=0.15)
    rows = read_trace(steps)
    assert (
        sum(r["decode_seqs"] for r in rows) == 7 and rows[0]["prefill_tokens"] == 4
    )  # "hello there": hell o ther e
    for r in rows:
        expected = r["overhead_s"] + max(r["compute_s"], r["memory_s"]) + r["allreduce_s"]
        assert r["duration_s"] == pytest.approx(expected)
        assert r["bound"] == ("compute" if r["compute_s"] >= r["memory_s"] else "memory")
        assert r["lag_s"] >= 0
    for name in ("queue", "prefill", "decode", "inference"):
        assert _metric(metrics, f"vllm:request_{name}_time_seconds_count") == 1
    decode = _metric(metrics, "vllm:request_decode_time_seconds_sum")
    assert decode == pytest.approx(line["engine_finish"] - line["engine_first_token"], abs=1e-5)
    assert _metric(metrics, "locust_llm_sim_step_lag_seconds_count") == len(rows)
    # vLLM's tokens per step, as the step trace counts them
    assert _metric(metrics, "vllm:iteration_tokens_total_count") == len(rows)
    computed = sum(r["prefill_tokens"] + r["decode_seqs"] for r in rows)
    assert _metric(metrics, "vllm:iteration_tokens_total_sum") == computed


def test_a_blocked_loop_is_counted_as_lag_and_reported() -> None:
    thread = SimThread(config_from_mapping({"port": 0}))
    url = thread.start()
    try:
        _stream(url, 4)
        before = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
        t_before = time.time()
        # a busy host: the simulator's loop cannot run for 0.3 s in the middle of a stream
        thread.loop.call_later(0.05, time.sleep, 0.3)
        _stream(url, 30)
        after = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
        t_after = time.time()
    finally:
        thread.stop()
    assert _metric(after, "locust_llm_sim_late_steps_total") >= 1
    assert _metric(after, "locust_llm_sim_step_lag_seconds_sum") > 0.2
    # through the telemetry signal map, as the scraper records them, into the report's rule
    rows = [
        (t, "sim", signal, gpu, value)
        for t, text in ((t_before, before), (t_after, after))
        for signal, gpu, value in extract_signals(text)
    ]
    frame = pd.DataFrame(rows, columns=["time_s", "source", "signal", "gpu", "value"])
    (warning,) = lag_warnings(frame, [("c=1", t_before - 1, t_after + 1)])
    assert warning.startswith("stage c=1: the simulated server fell behind")
    assert lag_warnings(frame, [("quiet", t_after + 5, t_after + 9)]) == []


def test_lag_summary_rule() -> None:
    assert lag_summary([0.0001] * 200) == pytest.approx((0.0001, 0.0001, False))
    assert lag_summary([0.0] * 99 + [0.05])[2]  # 1% of steps late
    assert lag_summary([])[2] is False


def virtual_run(concurrency: int, requests: int, prompt: int, output: int, **kw: object):
    """A closed loop on the engine's virtual clock; returns (step lines, request lines)."""
    eng = Engine(config_from_mapping({"model": "mistral-7b", "gpu": "rtx4090", **kw}))
    live = [eng.add(prompt, output) for _ in range(min(concurrency, requests))]
    sent, steps, done = len(live), [], []
    while eng.has_work:
        result = eng.step()
        steps.append(step_record(result, kv_usage=eng.kv_usage_ratio))
        for req in result.finished:
            done.append({**request_times(req), "outcome": "ok", "tokens_sent": req.generated,
                         "prompt_tokens": req.prompt_tokens, "cached_tokens": 0})  # fmt: skip
            if sent < requests:
                eng.add(prompt, output)
                sent += 1
    return steps, done


@pytest.mark.parametrize(
    ("label", "run"),
    [
        ("bandwidth_bound_decode", {"concurrency": 4, "requests": 8, "prompt": 64, "output": 200}),
        ("compute_bound_prefill", {"concurrency": 16, "requests": 32, "prompt": 4000, "output": 2}),
        ("prefill_interference", {"concurrency": 24, "requests": 96, "prompt": 1500, "output": 40}),
        (
            "batch_limit_admission",
            {"concurrency": 16, "requests": 48, "prompt": 64, "output": 100, "max_num_seqs": 2},
        ),
        (
            "kv_capacity_admission",
            {
                "concurrency": 32,
                "requests": 96,
                "prompt": 256,
                "output": 128,
                "num_gpu_blocks_override": 200,
            },
        ),
    ],
)
def test_labels_name_what_limited_the_engine(label: str, run: dict) -> None:
    steps, reqs = virtual_run(**run)
    truth = ground_truth(steps, reqs)
    assert truth.label == label, truth
    assert truth.verdict_kind == VERDICT_KINDS[label]
    assert truth.compute_share + truth.memory_share == pytest.approx(1.0)
    assert truth.ttft_queue_s >= 0 and truth.ttft_prefill_s > 0 and truth.decode_s > 0


def test_label_reads_the_decode_of_requests_whose_decoding_outlasts_the_window() -> None:
    # issue 26: a window in which no request finished (decoding outlasts it) read "decode not
    # longer than TTFT" and was labelled compute_bound_prefill while its requests decoded 20x
    # their TTFT; the decode time is then that of the requests whose first token fell in it
    steps, reqs = virtual_run(concurrency=24, requests=96, prompt=1500, output=40)
    assert ground_truth(steps, reqs).label == "prefill_interference"
    later = [{**r, "engine_finish": r["engine_finish"] + 1000.0} for r in reqs]
    truth = ground_truth(steps, later)
    assert truth.label == "prefill_interference", truth
    assert truth.decode_s > 1000.0 > truth.ttft_queue_s + truth.ttft_prefill_s


def test_label_under_loaded_and_ttft_split() -> None:
    eng = Engine(config_from_mapping({"step_overhead_s": 0.0}))
    steps, reqs, t = [], [], 0.0
    for _ in range(5):  # one short request a second: the GPU idles most of the time
        req = eng.add(100, 10, arrival_s=t)
        while eng.has_work:
            steps.append(step_record(eng.step(t)))
            t = max(t, eng.clock_s)
        reqs.append({**request_times(req), "outcome": "ok", "tokens_sent": 10})
        t += 1.0
    truth = ground_truth(steps, reqs, start_s=0.0, end_s=5.0)
    assert truth.label == "under_loaded" and truth.busy_share < 0.2
    assert truth.ttft_queue_s == 0 and truth.admission_limit == "none"
    assert truth.ttft_prefill_s == pytest.approx(steps[0]["duration_s"])


def test_listen_backlog_takes_a_burst_of_2000_connects() -> None:
    # the connect completes when the kernel queues it for accept; a full queue drops the SYN
    # and the client retries after ~1 s (a TTFT outlier the client would blame on the server).
    # The server is its own process, as in a real run (no GIL shared with this client).
    proc = subprocess.Popen(
        [sys.executable, "-m", "locust_llm.cli", "sim", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        times = burst_connect_times(int(url.rsplit(":", 1)[1]), 2000)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    assert max(times) < 0.5, sorted(times)[-5:]


#: vLLM's request_latency_buckets (vllm/v1/metrics/loggers.py), for the per-request phases.
VLLM_REQUEST_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                        60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]  # fmt: skip


def test_phase_histograms_have_vllms_names_and_buckets() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    with running_sim() as url:
        _stream(url, 3)
        text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("queue", "prefill", "decode", "inference"):
        family = families[f"vllm:request_{name}_time_seconds"]
        assert family.type == "histogram"
        bounds = [float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket")]
        assert bounds == [*VLLM_REQUEST_BUCKETS, math.inf]
    for name in ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits"):
        assert families[name].type == "counter"


def test_labels_from_a_real_time_run(tmp_path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    trace, steps = tmp_path / "trace.jsonl", tmp_path / "steps.jsonl"
    with (
        running_sim(trace_path=str(trace), step_trace_path=str(steps)) as url,
        ThreadPoolExecutor(4) as pool,
    ):
        list(pool.map(lambda _: _stream(url, 40), range(4)))
    requests, step_lines = read_trace(trace), read_trace(steps)
    truth = ground_truth(step_lines, requests)
    assert truth.label == "bandwidth_bound_decode" and truth.requests == 4
    # the two traces share one clock: every request's phases lie inside the stepped span
    assert all(truth.start_s <= r["admission"] <= r["engine_finish"] <= truth.end_s + 1e-6
               for r in requests)  # fmt: skip
    ttft = [r["engine_first_token"] - r["arrival"] for r in requests]
    assert truth.ttft_queue_s + truth.ttft_prefill_s == pytest.approx(sum(ttft) / 4, abs=1e-3)
