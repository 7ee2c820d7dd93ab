"""Engine profiles (locust_llm.sim.engine_profiles): data in one place, picked with --engine,
and the time before the engine (API server, tokenization), the multi-step admission cadence and
detokenization in the TTFT a client measures and in the ground-truth trace."""

from __future__ import annotations

import argparse
import json
import math
import sys
import urllib.request
from pathlib import Path

import pytest

from locust_llm.errors import InputError
from locust_llm.roofline.floors import get_gpu
from locust_llm.sim import cli as sim_cli
from locust_llm.sim import virtual
from locust_llm.sim.config import SimConfig, config_from_mapping
from locust_llm.sim.engine import Engine
from locust_llm.sim.engine_profiles import PROFILE_FIELDS, PROFILES, VLLM_V1, get_profile
from locust_llm.sim.testing import running_sim
from locust_llm.sim.trace import read_trace
from locust_llm.sim.virtual import VirtualWorkload, simulate
from locust_llm.workloads.stages import StagePlan


def parse(*argv: str) -> SimConfig:
    parser = argparse.ArgumentParser()
    virtual.configure_parser(parser)
    return sim_cli.config_from_args(parser.parse_args(list(argv)))


def test_every_profile_constant_says_where_it_comes_from() -> None:
    assert set(PROFILES) == {"vllm-v1", "vllm-v0", "vllm-v0-multistep", "sglang", "tgi", "llamacpp"}
    for profile in PROFILES.values():
        assert set(profile.sources) == set(PROFILE_FIELDS), profile.name
        for name, source in profile.sources.items():
            assert source.strip(), (profile.name, name)
            words = ("http", "/", "fitted", "assumed", "0:")
            assert any(w in source for w in words), (profile.name, name, source)


def test_the_default_is_vllm_v1_with_the_calibrated_constants() -> None:
    config = SimConfig()
    assert config.engine == "vllm-v1"
    assert VLLM_V1.calibrated
    assert (config.step_overhead_s, config.step_overhead_per_seq_s) == (0.002, 80e-6)
    assert config.decode_steps_per_schedule == 1
    assert config.front_s(4096) == 0.0 and config.detokenize_s_per_token == 0.0


def test_engine_flag_picks_the_profile_and_explicit_flags_win() -> None:
    multistep = parse("--engine", "vllm-v0-multistep")
    profile = get_profile("vllm-v0-multistep")
    assert multistep.decode_steps_per_schedule == profile.decode_steps_per_schedule > 1
    assert multistep.api_server_s == profile.api_server_s
    mine = parse("--engine", "sglang", "--step-overhead-ms", "7", "--api-server-ms", "30")
    assert mine.step_overhead_s == pytest.approx(0.007)
    assert mine.api_server_s == pytest.approx(0.030)
    assert mine.step_overhead_per_seq_s == get_profile("sglang").step_overhead_per_seq_s
    assert mine.tp_step_overhead_s == get_profile("sglang").tp_step_overhead_s
    tp = parse("--engine", "vllm-v1", "--tp-step-overhead-us", "300")
    assert tp.tp_step_overhead_s == pytest.approx(300e-6)
    with pytest.raises(InputError, match="--tp-step-overhead-s must be a number >= 0"):
        config_from_mapping({"tp_step_overhead_s": -1.0})
    # a TOML base with another engine's constants does not leak into the one picked
    base = SimConfig(step_overhead_per_seq_s=1e-3)
    assert config_from_mapping({"engine": "tgi"}, base=base).step_overhead_per_seq_s == (
        get_profile("tgi").step_overhead_per_seq_s
    )


def test_an_unknown_engine_is_refused_with_the_known_ones() -> None:
    with pytest.raises(InputError) as err:
        parse("--engine", "vllm-v2")
    message = str(err.value)
    assert "vllm-v2" in message
    assert all(name in message for name in PROFILES)


def _decode_then_arrive(steps: int) -> tuple[Engine, list[str], int]:
    """One request decoding; a second arrives after its third step: the step that admits it."""
    engine = Engine(SimConfig(decode_steps_per_schedule=steps, num_gpu_blocks_override=64, seed=1))
    engine.add(16, 40)
    blocked = []
    for _ in range(3):
        blocked.append(engine.step().blocked_by)
    engine.add(16, 4)
    for i in range(20):
        result = engine.step()
        blocked.append(result.blocked_by)
        if result.admitted:
            return engine, blocked, i
    raise AssertionError("never admitted")


def test_multi_step_admits_only_when_its_decode_schedule_ends() -> None:
    _, blocked, waited = _decode_then_arrive(1)
    assert waited == 0  # one step per schedule: the next step admits it
    _, blocked, waited = _decode_then_arrive(8)
    # steps: 0 = prefill (no schedule), 1 opens an 8-step decode schedule (1..8), the request
    # arrives after step 2, so steps 3..8 (6 of them) pass it by
    assert waited == 6
    assert blocked.count("multi_step") == 6


def _one_stream(config: SimConfig, trace: Path | None = None) -> virtual.VirtualRun:
    if trace is not None:
        from dataclasses import replace

        config = replace(config, trace_path=str(trace))
    workload = VirtualWorkload(
        stages=(StagePlan(concurrency=1, requests=3),),
        input_len="512",
        max_tokens="16",
        ignore_eos=True,
        read_timeout_s=math.inf,
    )
    return simulate(config, workload, start_wall_s=100.0)


def test_time_before_the_engine_and_detokenizing_add_to_ttft_exactly(tmp_path: Path) -> None:
    base = SimConfig(num_gpu_blocks_override=256, seed=2)
    front = config_from_mapping(
        {"api_server_s": 0.030, "tokenize_s_per_token": 10e-6, "detokenize_s_per_token": 0.002},
        base=base,
    )
    plain, slow = _one_stream(base), _one_stream(front, tmp_path / "trace.jsonl")
    added = 0.030 + 512 * 10e-6 + 0.002
    for a, b in zip(plain.records, slow.records, strict=True):
        assert b.ttft_s == pytest.approx(a.ttft_s + added, abs=1e-9)
        assert b.tpot_s == pytest.approx(a.tpot_s, abs=1e-9)  # a fixed latency per token
    # the ground truth says the same: admitted after the front, first token after the step
    for line, record in zip(read_trace(tmp_path / "trace.jsonl"), slow.records, strict=True):
        assert line["first_token"] - line["arrival"] == pytest.approx(record.ttft_s, abs=1e-9)
        assert line["admission"] - line["arrival"] >= 0.030 + 512 * 10e-6 - 1e-9
        assert line["first_token"] - line["engine_first_token"] == pytest.approx(0.002)


def test_the_real_time_server_adds_the_same_front_time(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    settings = {"zero_cost": True, "step_overhead_s": 0.002, "output_len": "fixed:4"}
    with running_sim(trace_path=str(trace), api_server_s=0.080, **settings) as url:
        body = {"model": "mistral-7b", "prompt": "hello there", "max_tokens": 4, "stream": True}
        for _ in range(2):
            request = urllib.request.Request(
                f"{url}/v1/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                assert response.status == 200
                assert b"[DONE]" in response.read()
    lines = read_trace(trace)
    assert len(lines) == 2
    for line in lines:
        assert line["outcome"] == "ok"
        assert line["admission"] - line["arrival"] >= 0.080 - 0.005  # the API server's time
        assert line["first_token"] - line["arrival"] >= 0.080
        assert line["first_token"] - line["arrival"] < 0.080 + 0.5


def test_the_docs_show_the_profiles_as_they_are() -> None:
    from locust_llm.sim.engine_profiles import profiles_table

    docs = (Path(__file__).resolve().parent.parent / "docs" / "simulator.md").read_text()
    assert profiles_table() in docs


def test_multi_step_streams_come_in_the_chunks_a_real_vllm_0_6_streamed() -> None:
    """vLLM 0.6.0 with --num-scheduler-steps 10 hands a schedule's tokens to the stream at its
    end. LambdaLabsML's result files (10 ShareGPT prompts at once, Llama 3 8B and 70B at tp 1
    to 8, on H100s and A100s) give each request's gaps between streamed chunks; replayed on the
    `vllm-v0-multistep` profile as the calibration replays them (bench/calibration.py's cases
    and engine settings), every request streams in as many chunks as it did there (the two
    requests of each 70B run that streamed no text run as one-token answers, as the
    calibration replays them, and have no chunks to compare)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import calibration

    compared = 0
    for run, case in zip(calibration.lambda_runs(), calibration.lambda_cases(), strict=True):
        assert case.profile == "vllm-v0-multistep"
        engine = Engine(calibration.engine_config(case), model=case.model, gpu=get_gpu(case.gpu))
        requests = calibration.burst_requests(run)
        reqs = [engine.add(i, max(o, 1)) for i, o, _, _ in requests]
        arrivals: dict[int, set[float]] = {r.id: set() for r in reqs}
        while engine.has_work:
            step = engine.step()
            for req in step.emitted:
                arrivals[req.id].add(step.end_s)
        texts = [(r, n) for r, (_, o, _, n) in zip(reqs, requests, strict=True) if o > 0]
        gaps = [len(arrivals[r.id]) - 1 for r, _ in texts]
        assert gaps == [n for _, n in texts], run["path"]
        compared += len(texts)
    assert compared == 8 * 10 + 6 * 8
