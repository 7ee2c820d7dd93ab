"""Prefix caching: vLLM's chained block hashes, LRU eviction, counters and usage, checked
against counts the test makes itself from the prompts it sends."""

from __future__ import annotations

import urllib.request

import pytest

from locust_llm.errors import InputError
from locust_llm.sim.config import config_from_mapping
from locust_llm.sim.engine import Engine
from locust_llm.sim.prefix_cache import block_hashes
from locust_llm.sim.testing import running_sim, stream_chat
from locust_llm.sim.trace import read_trace
from locust_llm.workloads.textgen import (
    estimate_message_tokens,
    estimate_tokens,
    message_pieces,
    prompt_pieces,
)

FAST = {"step_overhead_s": 0.0, "bandwidth_efficiency": 1.0, "compute_efficiency": 1.0}


def words(n: int, salt: int = 0) -> list[str]:
    """``n`` distinct 4-letter words: one token each by the simulator's documented estimate."""
    alphabet = "abcdefghijklmnopqrstuvwxyz"
    return [
        "".join(alphabet[(i * 7 + salt * 131 + k * 3) % 26] for k in range(3)) + "q"
        for i in range(n)
    ]


def test_chained_hashes_share_exactly_the_common_full_blocks() -> None:
    a = block_hashes([f"t{i}" for i in range(64)], 16)
    b = block_hashes([f"t{i}" for i in range(40)] + ["x"] * 24, 16)
    assert len(a) == 4 and a[:2] == b[:2] and a[2] != b[2] and a[3] != b[3]
    assert block_hashes(["t"] * 15, 16) == ()  # a partial block is never cached


def test_engine_hits_skip_prefill_and_lru_evicts_the_oldest_free_block() -> None:
    eng = Engine(config_from_mapping({**FAST, "num_gpu_blocks_override": 12}))
    first = [f"a{i}" for i in range(64)]
    r1 = eng.add(64, 2, block_hashes=block_hashes(first, 16))
    eng.run_until_idle()
    assert r1.cached_tokens == 0 and len(eng.prefix_cache.evictable) == 4
    assert eng.free_blocks == eng.total_blocks  # cached blocks nobody uses are free memory
    r2 = eng.add(64, 2, block_hashes=block_hashes(first, 16))
    results = eng.run_until_idle()
    # the whole prompt is cached but its last token is computed: 3 blocks hit, 16 tokens run
    assert r2.cached_tokens == 48 and results[0].prefill_tokens == 16
    assert eng.stats.prefix_cache_hits_total == 48
    assert eng.stats.prefix_cache_queries_total == 128
    # 144 prompt + 2 output tokens need 10 of 12 blocks: 8 are empty, 2 cached ones go, the
    # least recently freed first (a request's tail block first, as vLLM frees them)
    eng.add(144, 2, block_hashes=block_hashes([f"b{i}" for i in range(144)], 16))
    eng.run_until_idle()
    assert eng.prefix_cache.evictions_total == 2
    r4 = eng.add(64, 2, block_hashes=block_hashes(first, 16))
    eng.run_until_idle()
    assert r4.cached_tokens == 32  # the prefix lost its two tail blocks, its head still hits


def test_hashed_tokens_are_the_counted_tokens() -> None:
    for text in ("Hello, wonderful world! 12345", "a  b\tc", "", "naïve café — ok?"):
        assert len(prompt_pieces(text)) == estimate_tokens(text)
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "what is up?"}]},
    ]
    assert len(message_pieces(messages)) == estimate_message_tokens(messages)
    same_text = [{"role": "assistant", "content": "be brief"}]
    assert message_pieces(same_text) != message_pieces(messages[:1])  # the role counts


def test_too_many_block_hashes_are_refused() -> None:
    eng = Engine(config_from_mapping(FAST))
    with pytest.raises(InputError, match="at most one per full block"):
        eng.add(20, 2, block_hashes=block_hashes([f"a{i}" for i in range(32)], 16))


def test_disabled_prefix_caching_never_hits() -> None:
    eng = Engine(config_from_mapping({**FAST, "enable_prefix_caching": False}))
    hashes = block_hashes([f"a{i}" for i in range(64)], 16)
    for _ in range(2):
        req = eng.add(64, 2, block_hashes=hashes)
        eng.run_until_idle()
    assert req.cached_tokens == 0 and eng.stats.prefix_cache_queries_total == 0


def _post(url: str, text: str) -> dict:
    return stream_chat(url, text, max_tokens=4)


def test_server_hits_equal_an_independent_count(tmp_path) -> None:
    trace = tmp_path / "trace.jsonl"
    shared = words(70, salt=1)  # a shared 70-token "system prompt"
    prompts = [shared + words(n, salt=10 + n) for n in (5, 30, 17)] + [shared[:40], shared]
    with running_sim(trace_path=str(trace), **FAST) as url:
        usages = [_post(url, " ".join(p)) for p in prompts]  # one after the other
        metrics = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    # independent count: common prefix with any earlier prompt, in whole 16-token blocks,
    # never the prompt's last token (vLLM recomputes it)
    expected = []
    for i, p in enumerate(prompts):
        common = max((_common(p, q) for q in prompts[:i]), default=0)
        expected.append(min(common // 16, (len(p) - 1) // 16) * 16)
    assert [u["prompt_tokens"] for u in usages] == [len(p) for p in prompts]
    assert [u["prompt_tokens_details"]["cached_tokens"] for u in usages] == expected
    assert expected == [0, 64, 64, 32, 64]
    lines = read_trace(trace)
    assert sum(r["cached_tokens"] for r in lines) == sum(expected)

    def value(name: str) -> float:
        return float(next(x for x in metrics.splitlines() if x.startswith(name)).split()[-1])

    assert value("vllm:prefix_cache_hits_total") == sum(expected)
    assert value("vllm:prefix_cache_queries_total") == sum(len(p) for p in prompts)


def _common(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def test_openai_client_reads_cached_tokens() -> None:
    import openai

    text = " ".join(words(100, salt=3))
    with running_sim(**FAST) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
        usages = []
        for _ in range(2):
            stream = client.chat.completions.create(
                model="mistral-7b",
                messages=[{"role": "user", "content": text}],
                max_tokens=3,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
            )
            usages.append(list(stream)[-1].usage)
    assert usages[0].prompt_tokens_details.cached_tokens == 0
    assert usages[1].prompt_tokens_details.cached_tokens == 96  # 6 full blocks of 100 tokens


def test_no_enable_prefix_caching_flag_mirrors_vllm() -> None:
    import argparse

    from locust_llm.sim.cli import config_from_args, configure_parser

    parser = argparse.ArgumentParser()
    configure_parser(parser)
    assert config_from_args(parser.parse_args([])).enable_prefix_caching is True
    off = parser.parse_args(["--no-enable-prefix-caching"])
    assert config_from_args(off).enable_prefix_caching is False
    assert config_from_args(parser.parse_args(["--enable-prefix-caching"])).enable_prefix_caching


def _stream_text(url: str, messages: list[dict], max_tokens: int) -> tuple[str, dict]:
    """One streamed chat answer through the openai SDK: (text, usage)."""
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
    chunks = list(
        client.chat.completions.create(
            model="mistral-7b",
            messages=messages,  # type: ignore[arg-type]
            max_tokens=max_tokens,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks[-1].usage.model_dump()


def test_the_next_turn_reuses_the_previous_answer() -> None:
    first = [{"role": "user", "content": " ".join(words(50, salt=5))}]
    with running_sim(**FAST) as url:
        answer, _ = _stream_text(url, first, 40)
        follow = [*first, {"role": "assistant", "content": answer},
                  {"role": "user", "content": " ".join(words(30, salt=6))}]  # fmt: skip
        _, usage = _stream_text(url, follow, 4)
    # 50 prompt + 40 answer tokens were in KV, less the last answer token (never computed):
    # 89 tokens, 5 full blocks, all shared with the follow-up's 120-token prompt
    assert usage["prompt_tokens"] == 50 + 40 + 30
    assert usage["prompt_tokens_details"]["cached_tokens"] == (50 + 40 - 1) // 16 * 16 == 80


def test_a_preempted_request_resumes_from_its_own_cached_blocks() -> None:
    """vLLM hashes every request's blocks, so a request preempted and readmitted before its
    blocks are evicted starts from them; a request given no hashes gets its own, which nothing
    else can hit (two such requests of the same length share nothing)."""
    computed = {}
    for caching in (True, False):
        eng = Engine(
            config_from_mapping(
                {**FAST, "num_gpu_blocks_override": 10, "enable_prefix_caching": caching}
            )
        )  # 160 tokens of KV: the second request is preempted when the first one grows
        first = eng.add(48, 60)
        eng.step()
        second = eng.add(48, 60)
        results = eng.run_until_idle()
        assert second.preemptions == 1 and first.preemptions == 0
        assert first.outcome == second.outcome == "ok"
        assert sum(len(r.emitted) for r in results) + 1 == 120  # each token emitted once
        assert second.cached_tokens == 0  # the usage counts the first admission, as vLLM does
        computed[caching] = sum(r.prefill_tokens for r in results)
        hits = eng.stats.prefix_cache_hits_total
        if caching:
            # its 3 prompt blocks survived the eviction order (tail blocks go first)
            assert hits == 48 and sum(r.cached_tokens for r in results) == 48
        else:
            assert hits == 0
    assert computed[True] == computed[False] - 48
    eng = Engine(config_from_mapping(FAST))
    for _ in range(3):
        eng.add(64, 4)
        eng.run_until_idle()
    assert eng.stats.prefix_cache_hits_total == 0
    assert eng.stats.prefix_cache_queries_total == 3 * 64
