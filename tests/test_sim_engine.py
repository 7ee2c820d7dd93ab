"""The simulator's pure parts: engine scheduling, KV blocks, preemption, config, text, faults."""

from __future__ import annotations

import math

import pytest

from locust_llm.errors import InputError
from locust_llm.sim.config import config_from_mapping, load_toml
from locust_llm.sim.engine import Engine, RequestTooLarge
from locust_llm.sim.faults import FaultPlan, parse_fault
from locust_llm.sim.openai_format import ChunkFormatter
from locust_llm.workloads.distributions import Distribution
from locust_llm.workloads.textgen import VOCAB, OutputLengths, WordStream, estimate_tokens


def make(**kw: object) -> Engine:
    base = {"step_overhead_s": 0.0}
    base.update(kw)
    return Engine(config_from_mapping(base))


def test_single_request_emits_its_tokens_and_frees_its_blocks() -> None:
    eng = make()
    req = eng.add(100, 7)
    results = eng.run_until_idle()
    assert sum(len(r.emitted) for r in results) == 7
    assert req.outcome == "ok" and req.generated == 7
    assert eng.free_blocks == eng.total_blocks
    assert req.arrival_s <= req.admitted_s < req.first_token_s < req.finished_s
    assert eng.stats.prompt_tokens_total == 100 and eng.stats.generation_tokens_total == 7


def test_max_num_seqs_caps_the_batch() -> None:
    eng = make(max_num_seqs=4)
    for _ in range(10):
        eng.add(20, 5)
    peak = 0
    while eng.has_work:
        eng.step()
        peak = max(peak, len(eng.running))
    assert peak == 4
    assert eng.stats.finished_total == 10


def test_chunked_prefill_respects_token_budget() -> None:
    eng = make(max_num_batched_tokens=256)
    req = eng.add(1000, 3)
    first = []
    while eng.has_work:
        r = eng.step()
        assert r.prefill_tokens + r.decode_seqs <= 256
        first.append(bool(r.emitted))
    assert first.index(True) == 3  # ceil(1000 / 256) = 4 steps before the first token
    assert req.outcome == "ok"


def test_no_chunked_prefill_waits_for_budget() -> None:
    eng = make(max_num_batched_tokens=256, enable_chunked_prefill=False)
    eng.add(300, 2)
    r = eng.step()
    assert not r.admitted  # a 300-token prompt never fits a 256-token step whole


def test_kv_blocks_follow_the_computed_context() -> None:
    eng = make()
    req = eng.add(33, 20)
    eng.step()  # prefill 33 tokens -> 3 blocks of 16
    assert req.blocks == 3 and eng.used_blocks == 3
    for _ in range(16):
        eng.step()
    assert req.blocks == math.ceil(req.computed / 16)


def test_preemption_evicts_the_most_recent_and_recomputes() -> None:
    eng = make(num_gpu_blocks_override=10)  # 160 tokens of KV
    a = eng.add(48, 60)
    eng.step()
    b = eng.add(48, 60)
    results = eng.run_until_idle()
    preempted = [r for res in results for r in res.preempted]
    assert preempted and preempted[0] is b  # the newest goes first
    assert a.preemptions == 0 and b.preemptions >= 1
    assert a.outcome == b.outcome == "ok"
    # recompute: tokens are emitted once each, no duplicates
    assert sum(len(res.emitted) for res in results) + 1 == 120
    assert eng.stats.preemptions_total == len(preempted)
    assert eng.free_blocks == 10


def test_oom_mode_fails_instead_of_preempting() -> None:
    eng = make(num_gpu_blocks_override=10, oom=True)
    a = eng.add(48, 60)
    eng.step()
    b = eng.add(48, 60)
    eng.run_until_idle()
    assert b.outcome == "oom" and a.outcome == "ok"
    assert eng.stats.preemptions_total == 0 and eng.stats.failed_total == 1


def test_request_that_cannot_fit_alone_is_refused() -> None:
    eng = make(num_gpu_blocks_override=4)  # 64 tokens
    with pytest.raises(RequestTooLarge, match="whole cache holds 64 tokens"):
        eng.add(60, 10)
    eng.add(60, 5)  # 64 tokens of context needed at most: fits
    with pytest.raises(RequestTooLarge, match="maximum context length is 100"):
        make(max_model_len=100).add(90, 20)
    assert eng.stats.rejected_total == 1


def test_abort_frees_blocks_and_stops_tokens() -> None:
    eng = make()
    req = eng.add(64, 100)
    eng.step()
    eng.abort(req)
    assert req.outcome == "aborted" and eng.free_blocks == eng.total_blocks
    assert not eng.has_work


def test_kv_budget_from_memory() -> None:
    eng = make(memory_reserve_bytes=0.0, gpu_memory_utilization=0.9)
    budget = eng.gpu.memory_bytes * 0.9 - eng.model.weights_bytes
    assert eng.total_blocks == int(budget // (16 * eng.model.kv_bytes_per_token))
    with pytest.raises(InputError, match="leaves no KV cache"):
        make(model="llama-3.1-70b")


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"max_num_seqs": 0}, "--max-num-seqs"),
        ({"bandwidth_efficiency": 1.5}, "--bandwidth-efficiency"),
        ({"output_len": "gauss:3"}, "--output-len"),
        ({"step_overhead_s": -1}, "--step-overhead-s"),
        ({"bogus": 1}, "unknown simulator setting 'bogus'"),
    ],
)
def test_config_errors_name_the_setting(values: dict, match: str) -> None:
    with pytest.raises(InputError, match=match):
        config_from_mapping(values)


def test_toml_config(tmp_path) -> None:
    path = tmp_path / "sim.toml"
    path.write_text('[sim]\nmax-num-seqs = 8\nfaults = ["http500:0.1"]\nseed = 3\n')
    cfg = config_from_mapping(load_toml(path))
    assert cfg.max_num_seqs == 8 and cfg.faults == ("http500:0.1",) and cfg.seed == 3
    path.write_text("max_num_seqs = [")
    with pytest.raises(InputError, match="not valid TOML"):
        load_toml(path)


def test_distributions_and_determinism() -> None:
    assert OutputLengths("uniform:1:5", 0).distribution == Distribution("uniform", (1.0, 5.0))
    a = [OutputLengths("lognormal:100:0.5", 7).draw() for _ in range(1)]
    draws = OutputLengths("lognormal:100:0.5", 7)
    same = OutputLengths("lognormal:100:0.5", 7)
    xs = [draws.draw() for _ in range(2000)]
    assert xs == [same.draw() for _ in range(2000)]
    assert xs[0] == a[0]
    assert 90 < sum(xs) / len(xs) < 110 and min(xs) >= 1
    assert {OutputLengths("fixed:12", 0).draw() for _ in range(5)} == {12}
    assert WordStream(1, 5).words(30) == WordStream(1, 5).words(30)
    assert WordStream(1, 5).words(30) != WordStream(2, 5).words(30)


def test_estimate_tokens() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("the cat sat") == 3
    assert estimate_tokens("internationalization!") == 6  # 20 letters -> 5, "!" -> 1
    assert all(estimate_tokens(w) == 1 for w in VOCAB)
    text = WordStream(0, 1).words(50)
    assert estimate_tokens(text) == 50


def test_fault_parsing_and_draws() -> None:
    assert parse_fault("429:0.5:3").kind == "http429" and parse_fault("429:0.5:3").arg == 3
    assert parse_fault("stall:0.1").arg == 5.0
    for bad in ("nope:0.1", "http500", "http500:2", "stall:0.1:x"):
        with pytest.raises(InputError, match="--fault"):
            parse_fault(bad)
    with pytest.raises(InputError, match=r"add up to 1\.2"):
        FaultPlan(["http500:0.6", "http503:0.6"])
    plan = FaultPlan(["http500:0.25", "http503:0.25"], seed=1)
    kinds = [f.kind if f else None for f in (plan.draw() for _ in range(4000))]
    again = FaultPlan(["http500:0.25", "http503:0.25"], seed=1)
    assert kinds == [f.kind if f else None for f in (again.draw() for _ in range(4000))]
    assert 0.22 < kinds.count("http500") / 4000 < 0.28
    assert 0.45 < kinds.count(None) / 4000 < 0.55


def test_chunk_formatter_shapes() -> None:
    import json

    fmt = ChunkFormatter(
        chat=True, request_id="r", model="m", prompt_tokens=5, include_usage=True, created=1
    )
    obj = json.loads(fmt.content('a "quote"', 1)[len(b"data: ") :])
    assert obj == {
        "id": "r",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "delta": {"content": 'a "quote"'}, "logprobs": None, "finish_reason": None}
        ],
        "usage": None,
    }
    usage = json.loads(fmt.usage(3)[len(b"data: ") :])
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 8
    comp = ChunkFormatter(
        chat=False, request_id="c", model="m", prompt_tokens=1, continuous_usage=True
    )
    obj = json.loads(comp.content("x", 2, "stop")[len(b"data: ") :])
    assert obj["object"] == "text_completion" and obj["choices"][0]["text"] == "x"
    assert obj["choices"][0]["finish_reason"] == "stop" and obj["usage"]["completion_tokens"] == 2
    assert comp.role() == b"" and comp.usage(2) == b""


def test_step_time_adds_the_host_time_of_each_sequence() -> None:
    """duration = fixed overhead + per-sequence host time x sequences + max(compute, memory);
    zero-cost steps pay the fixed overhead only."""
    eng = make(step_overhead_s=0.002, step_overhead_per_seq_s=80e-6, max_num_seqs=8)
    for _ in range(5):
        eng.add(32, 4)
    first = eng.step()  # the five prefills
    assert len(first.admitted) == 5
    for result in (first, eng.step()):  # prefill, then five decodes
        assert result.overhead_s == pytest.approx(0.002 + 5 * 80e-6)
        physics = max(result.compute_s, result.memory_s) + result.allreduce_s
        assert result.duration_s == pytest.approx(result.overhead_s + physics)
    free = make(step_overhead_s=0.002, step_overhead_per_seq_s=80e-6, zero_cost=True)
    for _ in range(5):
        free.add(32, 4)
    assert free.step().duration_s == pytest.approx(0.002)
    with pytest.raises(InputError, match="--step-overhead-per-seq-s"):
        make(step_overhead_per_seq_s=-1.0)
