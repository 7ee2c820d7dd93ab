"""The time split (TTFT = queue + prefill) and the resource model, on hand-made data and on a
real simulator's phase histograms."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from rundir_factory import counter_series

from locust_llm.report.diagnosis.decompose import (
    FinishedRequests,
    attributed_phases,
    decompose,
    split_line,
)
from locust_llm.report.diagnosis.resources import (
    BANDWIDTH_EFFICIENCY,
    ServerLimits,
    attention_factors,
    prompts_per_mixed_step,
    recompute_tokens_per_s,
    resource_row,
    server_limits,
    with_recompute,
)
from locust_llm.roofline.cpu_device import PROBED
from locust_llm.roofline.floors import attention_flops, get_gpu, get_model, step_cost
from locust_llm.telemetry.counters import series_increase
from locust_llm.telemetry.vocabularies import extract_signals


def _row(**kw: float) -> dict:
    base = {
        "stage": 0, "kind": "step", "concurrency": 1.0, "rate": math.nan, "qps": 1.0,
        "ttft_avg_s": 0.05, "latency_avg_s": 1.0, "tpot_avg_s": 0.02, "waiting": 0.0,
        "running": 1.0, "input_tokens_avg": 256.0, "output_tokens_avg": 64.0,
        "start_wall_s": 0.0, "end_wall_s": 10.0, "duration_s": 10.0,
    }  # fmt: skip
    base.update(kw)
    return base


def _split_of_stage_two(prefill_total_s: float) -> dict:
    """Two stages whose server phase histograms give stage 1 (client TTFT 0.6 s, 10
    requests) a 0.4 s mean queue and ``prefill_total_s`` - 0.5 s of prefill; its row after
    :func:`decompose`."""
    rows = [
        _row(),
        _row(stage=1, concurrency=8.0, start_wall_s=10.0, end_wall_s=20.0, ttft_avg_s=0.6),
    ]
    series = counter_series({
        "phase_queue_s": [(9.0, "s", 0.0), (19.0, "s", 4.0)],
        "phase_prefill_s": [(9.0, "s", 0.5), (19.0, "s", prefill_total_s)],
        "phase_decode_s": [(9.0, "s", 9.0), (19.0, "s", 19.0)],
        "phase_requests": [(9.0, "s", 10.0), (19.0, "s", 20.0)],
    })  # fmt: skip
    decompose(rows, series)
    return rows[1]


def test_server_histograms_win_and_are_differenced_per_stage() -> None:
    top = _split_of_stage_two(1.5)
    assert top["ttft_split_source"] == "server"
    # the server's means (0.4 s queue, 0.1 s prefill) as it stamped them; the other 0.1 s of
    # the client's 0.6 s TTFT is outside the engine
    split = ("queue_avg_s", "prefill_avg_s", "outside_avg_s", "decode_avg_s")
    assert tuple(top[c] for c in split) == pytest.approx((0.4, 0.1, 0.1, 1.0))
    assert split_line(top).startswith(
        "TTFT = 400 ms queue + 100 ms prefill + 100 ms outside the engine (source: server)"
    )


def test_a_server_sum_past_the_client_ttft_is_said_not_shown_as_a_negative_time() -> None:
    """The server's means cover the requests it finished in the window, the client's TTFT the
    requests the stage sent; each request's client TTFT holds its server phases, so a server
    sum above the client's mean is the two sets differing, not a negative time outside the
    engine (a pipelined virtual run read -16 ms)."""
    top = _split_of_stage_two(3.0)
    assert math.isnan(top["outside_avg_s"])
    assert top["split_excess_s"] == pytest.approx(0.05)
    line = split_line(top)
    assert line.startswith("TTFT = 400 ms queue + 250 ms prefill (source: server); ")
    assert "pass the stage's mean TTFT by 50 ms" in line and "-" not in line
    # less than half a millisecond past it is 0 ms outside, not "by 0 ms"
    close = _split_of_stage_two(2.503)  # 0.4 s queue + 0.2003 s prefill: 0.3 ms past 0.6 s
    assert close["outside_avg_s"] == 0.0 and math.isnan(close["split_excess_s"])


def test_a_queue_histogram_past_the_client_ttft_is_said_too() -> None:
    """A server with a queue histogram only (TGI): prefill is what the queue leaves of TTFT;
    a queue mean past the client's TTFT leaves none and is said, not taken as prefill."""
    rows = [_row(ttft_avg_s=0.6)]
    series = counter_series({
        "phase_queue_s": [(-1.0, "s", 0.0), (9.0, "s", 8.0)],
        "phase_requests": [(-1.0, "s", 0.0), (9.0, "s", 10.0)],
    })  # fmt: skip
    decompose(rows, series)
    (row,) = rows
    assert row["prefill_avg_s"] == 0.0 and math.isnan(row["outside_avg_s"])
    assert row["split_excess_s"] == pytest.approx(0.2)
    assert "pass the stage's mean TTFT by 200 ms" in split_line(row)


def test_model_split_calibrates_on_the_lowest_load_and_puts_the_rest_in_the_queue() -> None:
    """A server with no phase histograms and no waiting gauge: the roofline's prefill."""
    model, gpu = get_model("mistral-7b"), get_gpu("rtx4090")
    low = _row(ttft_avg_s=0.040, running=1.0, waiting=math.nan)
    high = _row(
        stage=1, concurrency=64.0, ttft_avg_s=2.0, running=40.0, waiting=math.nan, qps=12.0,
        tpot_avg_s=0.03,
    )  # fmt: skip
    decompose([low, high], {}, model, gpu)
    assert low["ttft_split_source"] == "model" and low["queue_avg_s"] == pytest.approx(0.0)
    assert 0.05 <= low["prefill_efficiency"] <= 1.0
    assert high["ttft_split_source"] == "model"
    assert high["queue_avg_s"] + high["prefill_avg_s"] == pytest.approx(2.0)
    assert high["queue_avg_s"] > 0.9 * 2.0  # a 256-token prompt takes tens of ms


def test_a_servers_prefill_clock_is_the_one_split_without_phase_histograms() -> None:
    """llama.cpp's case: its prefill clock (prompt_seconds_total) over the stage window, per
    request, is the prefill and the rest of TTFT the queue; neither the model's queue nor
    Little's law's (24 waiting / 12 per s = 2 s) is quoted beside it."""
    low = _row(ttft_avg_s=0.040, requests=10.0)
    high = _row(stage=1, concurrency=64.0, ttft_avg_s=2.5, running=40.0, waiting=24.0,
                qps=12.0, tpot_avg_s=0.03, requests=120.0, start_wall_s=10.0,
                end_wall_s=20.0)  # fmt: skip
    series = counter_series({"prompt_seconds_total": [(9.0, "s", 1.0), (19.5, "s", 61.0)]})
    decompose([low, high], series, get_model("mistral-7b"), get_gpu("rtx4090"))
    assert high["ttft_split_source"] == "server prefill clock"
    assert high["prefill_avg_s"] == pytest.approx(60.0 / 120.0)
    assert high["queue_avg_s"] == pytest.approx(2.0)
    assert high["queue_little_s"] == pytest.approx(2.0)  # the table's cross-check
    assert split_line(high) == (
        "TTFT = 2000 ms queue + 500 ms prefill (source: server prefill clock)"
    )


def test_an_empty_waiting_gauge_caps_the_queue_at_the_step_under_way() -> None:
    low = _row(ttft_avg_s=0.040)
    mid = _row(stage=1, concurrency=16.0, ttft_avg_s=0.5, running=16.0, waiting=0.0)
    decompose([low, mid], {}, get_model("mistral-7b"), get_gpu("rtx4090"))
    assert mid["queue_avg_s"] == pytest.approx(mid["tpot_avg_s"])  # one step, closed loop
    assert mid["prefill_avg_s"] == pytest.approx(0.5 - 0.02)


def test_a_simulators_lag_is_outside_the_engine_not_prefill() -> None:
    # issue 26: a lagging simulator's late first tokens were booked as prefill
    low = _row(ttft_avg_s=0.040)
    mid = _row(stage=1, concurrency=16.0, ttft_avg_s=0.5, running=16.0, waiting=0.0,
               sim_lag_mean_s=0.1)  # fmt: skip
    decompose([low, mid], {}, get_model("mistral-7b"), get_gpu("rtx4090"))
    assert mid["outside_avg_s"] == pytest.approx(0.1)
    assert mid["prefill_avg_s"] == pytest.approx(0.5 - 0.02 - 0.1)
    assert mid["queue_avg_s"] + mid["prefill_avg_s"] + mid["outside_avg_s"] == pytest.approx(0.5)


def test_resource_model_utilizations_and_binding_limit() -> None:
    model, gpu = get_model("mistral-7b"), get_gpu("h100-sxm")
    row = _row(
        total_tps=5000.0, running=32.0, running_max=32.0, kv_cache_usage_max=0.5,
        tpot_avg_s=0.008,
    )  # fmt: skip
    out = resource_row(row, model, gpu, ServerLimits(max_num_seqs=48))
    flops = 5000.0 * 2 * model.params_per_token()
    assert out["mfu"] == pytest.approx(flops / gpu.peak_flops(model.weight_bits))
    assert 0 < out["mbu"] < 1 and out["step_bound"] == "memory"
    # the same batch at 20 ms a token: its bytes take a quarter of the step (MBU 23%), the
    # rest is the host's: no resource the steps wait on is named
    slow = resource_row({**row, "tpot_avg_s": 0.02}, model, gpu)
    assert slow["mbu"] == pytest.approx(out["mbu"] * 0.008 / 0.02)
    assert slow["memory_time_share"] < 0.5 < slow["host_time_share"]
    assert slow["step_bound"] == "host"
    assert out["kv_capacity_seqs"] == pytest.approx(64.0)  # 32 running at 50%
    assert (out["admission_limit"], out["admission_limit_seqs"]) == ("max-num-seqs", 48.0)
    two = resource_row(row, model, gpu, tp=2)
    assert two["mfu"] == pytest.approx(out["mfu"] / 2)  # the work spread over two GPUs


@pytest.mark.parametrize("mean", [1.0, 1.05, 1.68, 4.0, 37.5])
def test_the_prompts_of_a_step_with_prompt_work_are_a_truncated_poisson_count(mean: float) -> None:
    counts = prompts_per_mixed_step(mean)
    assert math.fsum(c for _, c in counts) == pytest.approx(1.0)
    assert math.fsum(k * c for k, c in counts) == pytest.approx(mean, rel=1e-6)
    assert all(k >= 1 for k, _ in counts)
    if mean > 1:  # P(k) / P(k - 1) = rate / k: the Poisson's own ratio
        (_, c1), (k2, c2) = counts[0], counts[1]
        rate = c2 / c1 * k2
        assert rate / -math.expm1(-rate) == pytest.approx(mean, rel=1e-6)


@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "llama-3.1-8b"])
def test_a_prompt_token_s_flops_are_the_roofline_step_s(name: str) -> None:
    """The compute share prices a prompt token as the roofline's step cost does: attention
    over half the prompt, the LM head only at the prompt's last position (MFU's 2 x parameters
    counts the head for every token: 28% of Qwen2.5-0.5B's)."""
    model = get_model(name)
    prompt = 1024
    prompt_x, _ = attention_factors(_row(input_tokens_avg=float(prompt)), model)
    per_token = step_cost(model, [], [(prompt, 0)]).flops / prompt
    assert prompt_x * 2.0 * model.params_per_token() == pytest.approx(per_token, rel=1e-6)


def test_a_probed_device_s_figures_are_not_derated_again() -> None:
    """A device the ``--gpu cpu`` probe measured (now, or recorded by ``run`` as a CPU's
    figures) carries rates this host achieved: its memory
    term is the weight and KV bytes at that bandwidth, so a decode-only step's memory share is
    its MBU, and the bandwidth is named only where it is at least half used (issue 26: the
    suite's llama.cpp stage named at MBU 49.4% read a memory term of 57%)."""
    model = get_model("mistral-7b")
    sheet = get_gpu("h100-sxm")
    probed = dataclasses.replace(sheet, name="probed", source=f"{PROBED}: numpy copy ...")
    # what `run --gpu cpu` records: the probe's figures, read back as a CPU's
    recorded = dataclasses.replace(sheet, name="cpu", source="a CPU: 23.70GB/s, ...")
    for tpot, device in itertools.product((0.008, 0.0125, 0.02), (probed, recorded)):
        row = _row(total_tps=500.0, running=4.0, tpot_avg_s=tpot)
        got, rated = resource_row(row, model, device), resource_row(row, model, sheet)
        assert got["mbu"] == pytest.approx(rated["mbu"])
        # within the few steps that carry a prompt (their terms are priced apart)
        assert got["memory_time_share"] == pytest.approx(got["mbu"], rel=0.03)
        derated = rated["mbu"] / BANDWIDTH_EFFICIENCY
        assert rated["memory_time_share"] == pytest.approx(derated, rel=0.03)
        assert (got["step_bound"] == "memory") == (got["mbu"] >= 0.5), (tpot, got)


def test_steps_stretched_past_their_median_gap_are_the_host_s_time_not_memory_s() -> None:
    """A CPU engine on a shared host: the mean step (TPOT) runs past the median gap by stalls
    the roofline has no term for. The memory term over TPOT is MBU (a probed device); the
    host's share is at least what the device's time leaves of the mean step, so a stage whose
    weight reads take 45% of its steps is not named for the bandwidth (the suite's llama.cpp
    at 2 users on a busy CI host: memory 48%, host 21% read from the gap, MBU 49.4%)."""
    model = get_model("mistral-7b")
    device = dataclasses.replace(get_gpu("h100-sxm"), name="cpu", source=f"{PROBED}: ...")
    base = _row(total_tps=500.0, running=4.0, tpot_avg_s=0.02)
    memory_s = resource_row(base, model, device)["mbu"] * 0.02  # the decode step's bytes
    stalled = {**base, "tpot_avg_s": memory_s / 0.45, "itl_p50_s": memory_s / 0.45 * 0.75}
    got = resource_row(stalled, model, device)
    assert got["mbu"] == pytest.approx(0.45, rel=0.01)
    assert got["host_time_share"] >= 1 - got["memory_time_share"] - got["compute_time_share"]
    assert got["step_bound"] == "host", got


def test_server_limits_read_llama_cpp_slots() -> None:
    assert server_limits({"server": {"total_slots": 4}}) == ServerLimits(None, 4)
    assert server_limits({"max_num_seqs": 64}) == ServerLimits(64, None)


def test_vllm_phase_histograms_map_onto_the_phase_signals() -> None:
    text = (
        'vllm:request_queue_time_seconds_sum{model_name="m"} 12.5\n'
        'vllm:request_queue_time_seconds_count{model_name="m"} 10\n'
        'vllm:request_prefill_time_seconds_sum{model_name="m"} 1.5\n'
        'vllm:request_decode_time_seconds_sum{model_name="m"} 30\n'
        "tgi_request_queue_duration_sum 2\n"
    )
    got = {s: v for s, _, v in extract_signals(text)}
    assert got["phase_queue_s"] == 12.5 and got["phase_requests"] == 10
    assert got["phase_prefill_s"] == 1.5 and got["phase_decode_s"] == 30


def test_prompt_tokens_the_prefix_cache_served_are_not_prefilled() -> None:
    """Two loaded stages alike but for the cache: 90% of a 2,048-token prompt served from it
    leaves ~205 tokens to compute, so the model's prefill is a fraction of the cold one and the
    rest of TTFT is queue; the resource model's prompt share counts computed tokens only."""
    model, gpu = get_model("mistral-7b"), get_gpu("h100-sxm")
    loaded = {"concurrency": 64.0, "ttft_avg_s": 2.0, "running": 40.0, "waiting": math.nan,
              "qps": 12.0, "tpot_avg_s": 0.03, "input_tokens_avg": 2048.0}  # fmt: skip
    idle = _row(ttft_avg_s=0.09, input_tokens_avg=2048.0, waiting=math.nan)
    cold = [idle, _row(stage=1, **loaded)]
    warm = [dict(idle), _row(stage=1, cached_tokens_avg=1843.2, **loaded)]
    decompose(cold, {}, model, gpu)
    decompose(warm, {}, model, gpu)
    assert 0 < warm[1]["prefill_avg_s"] < 0.3 * cold[1]["prefill_avg_s"]
    assert warm[1]["queue_avg_s"] > cold[1]["queue_avg_s"]
    share_cold = resource_row(cold[1], model, gpu)["prefill_token_share"]
    share_warm = resource_row(warm[1], model, gpu)["prefill_token_share"]
    assert share_cold == pytest.approx(2048 / (2048 + 64))
    assert share_warm == pytest.approx(204.8 / (204.8 + 64))


def test_compute_time_share_counts_prompt_flops_unless_decode_steps_pass_the_ridge() -> None:
    """Equal MFU, two token mixes: prompts (compute-bound prefill steps) set the steps' time in
    proportion to their share of the FLOPs, attention included; a small decode batch's FLOPs do
    not (its steps are memory-bound); a decode batch past the ridge is compute-bound as a whole."""
    model, gpu = get_model("llama-3.1-8b"), get_gpu("a100-80gb")
    tps = 0.4 * gpu.peak_flops(model.weight_bits) / (2 * model.params_per_token())  # MFU 40%
    prompts = _row(total_tps=tps, input_tokens_avg=1024.0, output_tokens_avg=32.0,
                   running=16.0, gpu_util=1.0)  # fmt: skip
    decodes = _row(total_tps=tps, input_tokens_avg=128.0, output_tokens_avg=256.0,
                   running=64.0, gpu_util=1.0)  # fmt: skip
    big = _row(total_tps=tps, input_tokens_avg=128.0, output_tokens_avg=256.0,
               running=512.0, gpu_util=1.0)  # fmt: skip
    p, d, b = (resource_row(r, model, gpu) for r in (prompts, decodes, big))
    assert p["mfu"] == pytest.approx(0.4) and d["mfu"] == pytest.approx(0.4)
    dense = 2.0 * model.params_per_token()

    def expected(row: dict, steps: float, busy: float = 1.0) -> float:
        """FLOP time (attention added to MFU's 2 x params: a prompt token attends half its
        prompt, a decode token the mean context; the LM head left out of a prompt's positions
        but its last) in the steps compute sets, and the host's time
        of those steps (what the device's terms leave of the mean step; one GPU: no
        all-reduces)."""
        n_in, n_out = row["input_tokens_avg"], row["output_tokens_avg"]
        share = n_in / (n_in + n_out)
        # the LM head only at a prompt's last position (MFU counts it for every token)
        head = 2 * model.vocab_size * model.hidden_size * (1 - 1 / n_in)
        prompt_x = 1 + (attention_flops(model, 1, (n_in + 1) / 2) - head) / dense
        decode_x = 1 + attention_flops(model, 1, n_in + n_out / 2 + 1) / dense
        flops = 0.4 * (share * prompt_x + (1 - share) * steps * decode_x) / 0.7 / busy
        host = resource_row(row, model, gpu)["host_time_share"]
        return min(1.0, flops + steps * host)

    # qps 1 x TPOT 20 ms: 2% of the steps carry a prompt, and their decode tokens' FLOPs count
    assert p["prompt_step_share"] == d["prompt_step_share"] == pytest.approx(0.02)
    assert p["compute_time_share"] == pytest.approx(expected(prompts, 0.02))
    assert p["step_bound"] == "compute" and p["decode_step_bound"] == "memory"
    assert d["compute_time_share"] == pytest.approx(expected(decodes, 0.02))
    # its MFU is two thirds decode FLOPs, in memory steps: at 15 ms a token their bytes take
    # most of the step; at 40 ms the host's time (what the device's terms leave) outlasts them
    fast = resource_row({**decodes, "tpot_avg_s": 0.015}, model, gpu)
    assert fast["memory_time_share"] > 0.5 > fast["host_time_share"]
    assert fast["step_bound"] == "memory"
    slow = resource_row({**decodes, "tpot_avg_s": 0.04}, model, gpu)
    assert slow["host_time_share"] > slow["memory_time_share"] and slow["step_bound"] == "host"
    assert b["compute_time_share"] == pytest.approx(expected(big, 1.0))
    assert b["step_bound"] == "compute" and b["decode_step_bound"] == "compute"  # past the ridge
    half = {**prompts, "gpu_util": 0.5}
    idle = resource_row(half, model, gpu)
    assert idle["compute_time_share"] == pytest.approx(expected(half, 0.02, busy=0.5))
    # a prompt arriving every step: every step is compute-bound, all FLOPs count
    every = {**decodes, "qps": 60.0}
    busy = resource_row(every, model, gpu)
    assert busy["compute_time_share"] == pytest.approx(expected(every, 1.0))
    assert busy["step_bound"] == "compute"
    # preemptions recompute prompt + half the output: 5 a second here, 5 x 256 tokens
    pre = resource_row({**decodes, "preemptions": 50.0, "duration_s": 10.0}, model, gpu)
    flops = 5 * (128 + 128) * 2 * model.params_per_token() / gpu.peak_flops(model.weight_bits)
    assert pre["compute_time_share"] == pytest.approx(d["compute_time_share"] + flops / 0.7)
    # ... the computed prompt only: 96 of the 128 prompt tokens from the prefix cache are not
    # computed again (shared-prefix prompts preempted at a full cache read 100% compute where
    # the trace had 19%, seed 6622 case 49 of bench/verdict_accuracy.py, 2026-12-03)
    cached = {**decodes, "cached_tokens_avg": 96.0}
    warm = resource_row({**cached, "preemptions": 50.0, "duration_s": 10.0}, model, gpu)
    flops = 5 * (32 + 128) * 2 * model.params_per_token() / gpu.peak_flops(model.weight_bits)
    base = resource_row(cached, model, gpu)["compute_time_share"]
    assert warm["compute_time_share"] == pytest.approx(base + flops / 0.7)


def test_a_prompt_chunk_the_prefix_cache_left_small_does_not_make_its_step_compute_bound() -> None:
    """The same prompt rate and batch: 1,088-token prompts computed whole make the steps that
    carry them compute-bound; served 1,024 tokens from the prefix cache, a 64-token chunk beside
    256 decoding sequences leaves its step memory-bound, and compute sets none of the time (the
    simulator's trace of such a stage: memory set 87% of the step time)."""
    model, gpu = get_model("mistral-7b"), get_gpu("l4")
    base = _row(qps=6.4, tpot_avg_s=0.26, running=256.0, concurrency=256.0,
                input_tokens_avg=1088.0, output_tokens_avg=256.0, gpu_util=1.0)  # fmt: skip
    whole = resource_row({**base, "total_tps": 6.4 * (1088 + 256)}, model, gpu)
    cached = resource_row(
        {**base, "cached_tokens_avg": 1024.0, "total_tps": 6.4 * (64 + 256)}, model, gpu
    )
    assert whole["step_bound"] == "compute" and whole["compute_time_share"] > 0.5
    assert cached["compute_time_share"] == 0.0 and cached["step_bound"] != "compute"


def test_a_queue_at_the_lowest_load_is_taken_off_before_calibrating() -> None:
    """A KV budget that binds at the lowest load: TTFT there is mostly queue (1 waiting at 1.4
    completions/s: ~0.7 s by Little's law); calibrating on the whole TTFT would call the
    queue prefill, at a far too low efficiency."""
    model, gpu = get_model("mistral-7b"), get_gpu("l4")
    low = _row(concurrency=4.0, ttft_avg_s=0.88, waiting=1.0, qps=1.4, running=2.4,
               input_tokens_avg=322.0, tpot_avg_s=0.063)  # fmt: skip
    decompose([low], {}, model, gpu)
    assert low["queue_avg_s"] == pytest.approx(1.0 / 1.4, rel=0.01)
    assert low["queue_avg_s"] + low["prefill_avg_s"] == pytest.approx(0.88)
    ignoring = _row(**{**low, "waiting": 0.0})
    decompose([ignoring], {}, model, gpu)
    assert ignoring["prefill_efficiency"] < low["prefill_efficiency"]


def _counted_series(reqs: list[dict], event: str, scrape_s: float, until_s: float) -> dict:
    """The server's cumulative phase sums, each request added at ``event`` ("end" as vLLM,
    "first" as TGI's queue histogram), scraped every ``scrape_s``."""
    points: dict[str, list[tuple[float, str, float]]] = {
        name: [] for name in ("phase_queue_s", "phase_prefill_s", "phase_decode_s",
                              "phase_requests")
    }  # fmt: skip
    for t in np.arange(0.0, until_s, scrape_s):
        counted = [r for r in reqs if r[event] <= t]
        points["phase_queue_s"].append((t, "s", sum(r["queue"] for r in counted)))
        points["phase_prefill_s"].append((t, "s", sum(r["prefill"] for r in counted)))
        points["phase_decode_s"].append((t, "s", sum(r["decode"] for r in counted)))
        points["phase_requests"].append((t, "s", float(len(counted))))
    return counter_series(points)


@pytest.mark.parametrize("event", ["end", "first"])
def test_phase_sums_are_attributed_to_the_stage_that_sent_each_request(event: str) -> None:
    """Stage 0's requests barely queue, stage 1's queue 4 s, and many of stage 0's finish in
    stage 1's window: the stage windows' increases mix them, the client's attribution does not
    (whether the server counts a request at its end or at its first token)."""
    rng = np.random.default_rng(7)
    reqs = []
    for stage, (lo, queue) in enumerate(((0.0, 0.01), (10.0, 4.0))):
        for sent in np.sort(rng.uniform(lo, lo + 10.0, 40)):
            q, p, d = queue * rng.uniform(0.8, 1.2), 0.05, rng.uniform(3.0, 9.0)
            reqs.append({"stage": stage, "sent": sent, "queue": q, "prefill": p, "decode": d,
                         "first": sent + q + p, "end": sent + q + p + d})  # fmt: skip
    series = _counted_series(reqs, event, 0.5, 40.0)
    finished = FinishedRequests(
        end_wall_s=np.array([r["end"] for r in reqs]),
        stage=np.array([r["stage"] for r in reqs]),
        ttft_s=np.array([r["queue"] + r["prefill"] for r in reqs]),
        e2e_s=np.array([r["queue"] + r["prefill"] + r["decode"] for r in reqs]),
    )
    got = attributed_phases(series, finished)
    for stage in (0, 1):
        mine = [r for r in reqs if r["stage"] == stage]
        truth_queue = float(np.mean([r["queue"] for r in mine]))
        assert got[stage].requests == pytest.approx(len(mine))
        assert got[stage].queue_s == pytest.approx(truth_queue, rel=0.05, abs=0.003)
        assert got[stage].prefill_s == pytest.approx(0.05, rel=0.05)
        decode = float(np.mean([r["decode"] for r in mine]))
        assert got[stage].decode_s == pytest.approx(decode, rel=0.05)
    if event == "end":  # what stage 1's window would have said: it holds stage 0's ends
        window = series_increase(series, "phase_queue_s", 10.0, 20.0) / series_increase(
            series, "phase_requests", 10.0, 20.0
        )
        truth_1 = float(np.mean([r["queue"] for r in reqs if r["stage"] == 1]))
        assert abs(window - truth_1) > 0.2 * truth_1


def test_server_prompt_rate_leaves_out_what_the_cache_served() -> None:
    from locust_llm.report.diagnosis.resources import server_token_rates

    row = {"server_prompt_tps": 1000.0, "server_output_tps": 200.0, "server_cached_tps": 400.0}
    # the answers say 25% of the prompts came from the cache: their share wins
    assert server_token_rates({**row, "input_tokens_avg": 400.0, "cached_tokens_avg": 100.0}) == (
        750.0,
        200.0,
    )
    # no word from the answers: the hit counter, unless preemptions made it count own blocks
    assert server_token_rates(row) == (600.0, 200.0)
    assert server_token_rates({**row, "preemptions": 3.0}) == (1000.0, 200.0)
    assert all(math.isnan(x) for x in server_token_rates({"server_prompt_tps": 5.0}))


def test_a_preempted_sequence_s_blocks_the_cache_finds_again_are_not_recomputed() -> None:
    """The server's prefix-cache hits beyond what its answers said the cache served the prompts
    are preempted sequences' own blocks found again at readmission: those tokens are not
    computed again (prefix caching on, 8-16k-token prompts preempted 7 times: the recompute
    charge read compute 91% where the trace had 50%, now 68%: seed 9302 case 75 stage 2 of
    bench/verdict_accuracy.py, 2026-12-03)."""
    row = {"preemptions": 10.0, "duration_s": 10.0, "input_tokens_avg": 1000.0,
           "output_tokens_avg": 100.0, "cached_tokens_avg": 200.0, "qps": 2.0}  # fmt: skip
    assert recompute_tokens_per_s(row) == pytest.approx(1 * (800 + 50))
    # the server found 400 tokens/s in its cache, the answers account for 2 x 200: none again
    assert recompute_tokens_per_s({**row, "server_cached_tps": 400.0}) == pytest.approx(850)
    # 700 tokens/s: 300 of them a preempted sequence's own blocks
    assert recompute_tokens_per_s({**row, "server_cached_tps": 700.0}) == pytest.approx(550)
    assert recompute_tokens_per_s({**row, "server_cached_tps": 5000.0}) == 0.0


def test_the_prompt_side_counts_the_tokens_recomputed_after_preemptions() -> None:
    """The steps prefill a preempted sequence again, and the ground truth counts those tokens
    as prefill; the server's prompt counter counts a prompt once, at its first token. A stage
    whose steps only recomputed preempted prompts, no first token falling in it, read 0%
    prompt tokens (seed 956226 case 78 stage 1 of bench/verdict_accuracy.py: the trace 99.9%)
    and the verdict named decode where the trace names prefill."""
    row = {"preemptions": 10.0, "duration_s": 10.0, "input_tokens_avg": 1000.0,
           "output_tokens_avg": 100.0, "qps": 2.0}  # fmt: skip
    # the client's rates: 2 x 1000 prompt, 2 x 100 output, and 1 x 1050 computed again
    assert with_recompute(1000 / 1100, row) == pytest.approx(3050 / 3250)
    # the server's: no prompt counted in the window, 20 tokens/s generated
    counted = {**row, "server_prompt_tps": 0.0, "server_output_tps": 20.0}
    assert with_recompute(0.0, counted) == pytest.approx(1050 / 1070)
    assert with_recompute(0.25, {**row, "preemptions": 0.0}) == 0.25  # nothing recomputed
    got = resource_row(counted, get_model("llama-3.1-8b"), get_gpu("h100-sxm"))
    assert got["prefill_token_share"] == pytest.approx(1050 / 1070)
