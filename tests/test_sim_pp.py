"""Pipeline parallelism in the simulator (``--pp``): the pipeline's physics against the one-GPU
engine and the roofline, and vLLM V1's way of filling it (docs/simulator.md, "Pipeline
parallelism")."""

from __future__ import annotations

import random
import statistics

import pytest

from locust_llm.errors import InputError
from locust_llm.roofline.floors import (
    MODEL_PRESETS,
    get_interconnect,
    pp_layers,
    pp_send_seconds,
)
from locust_llm.sim.config import config_from_mapping
from locust_llm.sim.engine import Engine, SimRequest
from locust_llm.sim.gpu import SimGpuSource
from locust_llm.sim.testing import ideal_engine, tpot

LLAMA8B = MODEL_PRESETS["llama-3.1-8b"]
SMALL = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "max_model_len": 8192}


def engine(**kw: object) -> Engine:
    return ideal_engine(**{**SMALL, **kw})


def run(eng: Engine, *sizes: tuple[int, int]) -> list[SimRequest]:
    reqs = [eng.add(prompt, output) for prompt, output in sizes]
    eng.run_until_idle()
    return reqs


@pytest.mark.parametrize("pp", [2, 3, 4, 5])
def test_one_stream_is_no_faster_through_a_pipeline(pp: int) -> None:
    """A token passes every stage in turn: one stream's TPOT through pp stages (32 layers
    split evenly or not) is the one-GPU engine's (the same weights, KV and FLOPs, read stage
    after stage, the LM head on the last one only) plus pp - 1 hand-offs of
    its hidden states to the next stage (each stage reads its batch's embedding rows and the
    final norm's few kilobytes: equal to a part in 10^5)."""
    (one,) = run(engine(), (32, 64))
    (piped,) = run(engine(pp=pp), (32, 64))
    send = pp_send_seconds(LLAMA8B, 1, get_interconnect("nvlink"))
    assert tpot(piped) == pytest.approx(tpot(one) + (pp - 1) * send, rel=1e-5)
    assert piped.generated == one.generated == 64


def test_a_burst_takes_one_microbatch_as_vllm_v1_schedules_it() -> None:
    """vLLM V1 fills its batch queue greedily: requests that arrive together go into one
    batch, and a request stays with the batch it was first scheduled in (a decode token must
    pass every stage and come back before it is scheduled again), so a burst within the token
    budget runs as one group and the other stages' slots stay empty (vllm-project/vllm issue
    41682, PR 39165; RBLN-SW/vllm-rbln PR 243). A group that arrives while the driver is
    still handing the first one over (its host time, 1 ms here) gets a batch of its own: two
    groups then keep each GPU busy twice as long, each at the lone group's pace (one group's
    cycle, host time + every stage + the hand-offs, leaves room for the other's stage)."""
    host = {"pp": 2, "step_overhead_s": 1e-3}
    burst = engine(**host)
    together = run(burst, *[(32, 64)] * 8)
    span = max(r.finished_s for r in together)
    one_group = burst.stats.busy_s_total / span
    assert one_group < 0.5  # a GPU idles while the other stage and the driver work
    assert all(r.first_token_s == together[0].first_token_s for r in together)

    staggered = engine(**host)
    first = [staggered.add(32, 64) for _ in range(4)]
    launch = staggered.step()  # the first group is handed to stage 1
    assert not launch.emitted and launch.duration_s == pytest.approx(1e-3)
    second = [staggered.add(32, 64) for _ in range(4)]
    staggered.run_until_idle()
    both = first + second
    span = max(r.finished_s for r in both)
    assert staggered.stats.busy_s_total / span == pytest.approx(2 * one_group, rel=0.05)
    assert min(r.first_token_s for r in second) > max(r.first_token_s for r in first)
    pace = statistics.fmean(tpot(r) for r in together)
    assert all(tpot(r) == pytest.approx(pace, rel=0.05) for r in both)


def test_a_long_prompt_fills_the_pipeline_with_its_chunks() -> None:
    """Chunked prefill: the next chunk of a prompt is scheduled while the one before it is on
    its way (its tokens are known), so a prompt of c chunks through p stages takes
    (c + p - 1) stage times where one GPU takes c chunk times of p stage times each: the
    classic pipeline fill. Compute-bound chunks, one stage each a 1/p share of a chunk."""
    chunks, budget, pp = 6, 2048, 2
    kw = {"max_num_batched_tokens": budget, "max_model_len": 16384}
    (one,) = run(engine(**kw), (chunks * budget, 2))
    (piped,) = run(engine(pp=pp, **kw), (chunks * budget, 2))
    expected = (chunks + pp - 1) / (chunks * pp)
    assert piped.first_token_s / one.first_token_s == pytest.approx(expected, rel=0.05)
    assert piped.generated == 2 and piped.outcome == "ok"


def test_every_request_gets_every_token_once_through_preemptions_and_aborts() -> None:
    """A request preempted while its token is on its way gets nothing from that step (it
    recomputes, as vLLM's recompute preemption does); an aborted one gets nothing after the
    abort; every other token is emitted exactly once and every block comes back."""
    eng = engine(pp=2, num_gpu_blocks_override=40, block_size=16, max_model_len=512)
    reqs = [eng.add(100, 150) for _ in range(8)]
    emitted: dict[int, int] = {r.id: 0 for r in reqs}
    dropped = reqs[3]
    for i in range(100_000):
        if not eng.has_work:
            break
        result = eng.step()
        for req in result.emitted:
            emitted[req.id] += 1
            assert req.generated == emitted[req.id]
        if i == 40:
            assert dropped.generated > 0 or dropped in eng.waiting or dropped in eng.running
            eng.abort(dropped)
    assert eng.stats.preemptions_total > 0
    assert dropped.outcome == "aborted"
    for req in reqs:
        if req is not dropped:
            assert req.outcome == "ok" and emitted[req.id] == req.generated == 150
    assert eng.free_blocks == eng.total_blocks


def test_a_stage_holds_its_layers_weights_and_kv() -> None:
    """Memory as vLLM lays a pipeline out: each GPU holds its stage's layers (the first stage
    the embedding, the last the LM head) and their KV, so two stages hold about
    what two tensor-parallel ranks do (those split every layer, the LM head and the embedding
    too): the weights on a GPU and the KV pool within 3% of tensor parallelism's on the same
    two GPUs."""
    kw = {"model": "llama-3.1-70b", "gpu": "h100-sxm", "max_model_len": 2048}
    piped, split = engine(pp=2, **kw), engine(tp=2, **kw)
    assert piped.capacity_tokens == pytest.approx(split.capacity_tokens, rel=0.03)
    assert piped.weights_bytes_per_gpu == pytest.approx(split.weights_bytes_per_gpu, rel=0.03)
    # vLLM's get_pp_indices: the remainder to the stages before the last, nearest it first
    assert pp_layers(80, 3) == (27, 27, 26) and pp_layers(32, 5) == (6, 6, 7, 7, 6)
    source = SimGpuSource(engine(tp=2, pp=2, **kw))
    assert len(source.read().gpus) == 4


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"pp": 0}, "--pp must be an integer >= 1"),
        ({"pp": 33}, "--pp 33: llama-3.1-8b has 32 layers"),
        ({"pp": 2, "engine": "vllm-v0-multistep"}, "one step per schedule"),
        ({"pp": 2, "pp_interconnect": "carrier-pigeon"}, "unknown interconnect 'carrier-pigeon'"),
    ],
)
def test_bad_pipeline_settings_are_refused_by_name(values: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        engine(**values)


def test_stages_between_nodes_pay_the_network() -> None:
    """--pp-interconnect infiniband: each hand-off costs the link's measured fixed time (31 us
    between two nodes' GPUs) and the hidden states over 400 Gb/s, against NVLink's 8.8 us."""
    (nvlink,) = run(engine(pp=2), (32, 64))
    (network,) = run(engine(pp=2, pp_interconnect="infiniband"), (32, 64))
    gap = pp_send_seconds(LLAMA8B, 1, get_interconnect("infiniband")) - pp_send_seconds(
        LLAMA8B, 1, get_interconnect("nvlink")
    )
    assert gap == pytest.approx(31e-6 - 8.8e-6, rel=0.05)
    assert tpot(network) - tpot(nvlink) == pytest.approx(gap, rel=1e-6)


@pytest.mark.parametrize("pp", [2, 3, 4])
@pytest.mark.parametrize(
    "limits",
    [
        {"max_num_batched_tokens": 256},  # prompts in many chunks, decodes beside them
        {"num_gpu_blocks_override": 150, "max_num_batched_tokens": 512},  # preemptions
        {"num_gpu_blocks_override": 150, "oom": True},  # out-of-KV failures
        {"zero_cost": True, "max_num_batched_tokens": 256},  # no time but the fixed step
    ],
)
def test_every_step_makes_progress_under_random_arrivals_and_aborts(
    pp: int, limits: dict[str, object]
) -> None:
    """Requests of mixed lengths arriving at random and some aborted, through a pipeline:
    every step either moves the clock or emits (the virtual driver stops on a step that does
    neither), every token is emitted once, and the pipeline and the KV pool end empty. A batch
    that came back earlier with nothing to emit (a middle chunk, requests ended since) is
    passed over inside the step that finds it."""
    rng = random.Random(f"pp{pp}:{sorted(limits)}")
    eng = Engine(config_from_mapping({**SMALL, "max_model_len": 2048, "pp": pp, **limits}))
    arrivals = sorted(rng.uniform(0.0, 2.0) for _ in range(60))
    reqs: list[SimRequest] = []
    emitted: dict[int, int] = {}
    for _ in range(200_000):
        while arrivals and arrivals[0] <= eng.clock_s:
            prompt, output = rng.choice([5, 100, 700, 1500]), rng.choice([1, 2, 30, 200])
            req = eng.add(prompt, output, arrival_s=arrivals.pop(0))
            reqs.append(req)
            emitted[req.id] = 0
        if not eng.has_work:
            if not arrivals:
                break
            eng.clock_s = arrivals[0]
            continue
        result = eng.step()
        assert result.duration_s > 0 or result.emitted or result.failed, result
        for req in result.emitted:
            emitted[req.id] += 1
        if rng.random() < 0.02 and eng.running:
            eng.abort(rng.choice(eng.running))
    assert all(req.done for req in reqs)
    assert all(emitted[r.id] == r.generated for r in reqs)
    assert all(r.generated == r.output_tokens for r in reqs if r.outcome == "ok")
    assert eng.free_blocks == eng.total_blocks and not eng.has_work
    assert eng.batches_in_flight == 0
