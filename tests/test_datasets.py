"""Tests of prompt sources (random, openqa, JSONL, ShareGPT) and length distributions."""

from __future__ import annotations

import json
import random
import statistics
import sys
from pathlib import Path

import pytest

from locust_llm.errors import InputError
from locust_llm.sim.config import config_from_mapping
from locust_llm.workloads.datasets import (
    DEFAULT_INPUT_LEN,
    WORDS,
    estimate_tokens,
    load_dataset,
    sniff_format,
)
from locust_llm.workloads.distributions import parse_distribution
from locust_llm.workloads.textgen import OutputLengths

# ----------------------------------------------------------------------------- distributions


@pytest.mark.parametrize(
    ("text", "kind", "params"),
    [
        ("256", "fixed", (256.0,)),
        (" fixed:64 ", "fixed", (64.0,)),
        ("uniform:128,512", "uniform", (128.0, 512.0)),
        ("uniform:128:512", "uniform", (128.0, 512.0)),
        ("normal:512,64", "normal", (512.0, 64.0)),
        ("lognormal:256,0.5", "lognormal", (256.0, 0.5)),
        ("exp:100", "exp", (100.0,)),
        ("exponential:100", "exp", (100.0,)),
    ],
)
def test_parse_distribution_forms(text: str, kind: str, params: tuple[float, ...]) -> None:
    dist = parse_distribution(text)
    assert (dist.kind, dist.params) == (kind, params)
    assert parse_distribution(str(dist)) == dist  # str() gives back a readable spec


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "cannot read|parameter"),
        ("abc", "non-numeric"),
        ("gamma:1,2", "cannot read"),
        ("uniform:5", "needs 2 parameters"),
        ("uniform:10,5", "HI < LO"),
        ("normal:-1,3", "mean"),
        ("normal:10,-3", "spread"),
        ("0", "whole numbers >= 1"),
        ("1.5", "whole numbers >= 1"),
        ("exp:inf", "non-finite"),
        ("normal:5,x", "non-numeric"),
    ],
)
def test_parse_distribution_errors_name_the_input(text: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle) as info:
        parse_distribution(text, what="--llm-max-tokens")
    assert str(info.value).startswith("--llm-max-tokens: ")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "mean", "tolerance"),
    [
        ("uniform:100,300", 200, 0.03),
        ("normal:512,64", 512, 0.02),
        ("lognormal:256,0.5", 256, 0.05),
        ("exp:100", 100, 0.08),
    ],
)
def test_samples_have_the_requested_mean(text: str, mean: float, tolerance: float) -> None:
    dist = parse_distribution(text)
    draws = [dist.sample(random.Random(i)) for i in range(3000)]
    assert all(isinstance(d, int) and d >= 1 for d in draws)
    assert statistics.fmean(draws) == pytest.approx(mean, rel=tolerance)
    assert dist.mean == mean


def test_uniform_covers_both_ends_and_clipping_keeps_one_token() -> None:
    rng = random.Random(4)
    uniform = parse_distribution("uniform:3,5")
    assert {uniform.sample(rng) for _ in range(200)} == {3, 4, 5}
    wide = parse_distribution("normal:2,50")
    draws = [wide.sample(rng) for _ in range(500)]
    assert min(draws) == 1 and max(draws) > 50


def test_samples_are_deterministic_given_the_seed() -> None:
    dist = parse_distribution("lognormal:300,1.0")
    a = [dist.sample(random.Random(9)) for _ in range(5)]
    rng1, rng2 = random.Random(5), random.Random(5)
    assert [dist.sample(rng1) for _ in range(50)] == [dist.sample(rng2) for _ in range(50)]
    assert len(set(a)) == 1


# ----------------------------------------------------------------------------- estimator


def test_estimate_is_the_simulators() -> None:
    from locust_llm.workloads import textgen

    assert estimate_tokens is textgen.estimate_tokens  # client and simulated server agree
    assert estimate_tokens("") == 0


def test_builtin_words_are_one_token_each() -> None:
    assert len(WORDS) >= 300 and len(set(WORDS)) == len(WORDS)
    assert all(estimate_tokens(w) == 1 for w in WORDS)
    assert estimate_tokens(" ".join(WORDS)) == len(WORDS)


# ----------------------------------------------------------------------------- random


def test_random_prompts_have_the_drawn_length_and_vary() -> None:
    source = load_dataset("random", input_len="uniform:20,200", seed=0, tokenizer_path=None)
    rng = random.Random(1)
    prompts = [source.next_request(rng) for _ in range(200)]
    lengths = [p.input_tokens_estimate for p in prompts]
    assert min(lengths) >= 20 and max(lengths) <= 200 and len(set(lengths)) > 50
    for p in prompts:
        assert p.messages == [{"role": "user", "content": p.prompt}]
        assert estimate_tokens(p.prompt) == p.input_tokens_estimate
        assert p.max_tokens is None
    # no shared prefixes: the first six words differ between every pair of prompts
    heads = {tuple(p.prompt.split()[:6]) for p in prompts}
    assert len(heads) == len(prompts)


def test_random_is_deterministic_per_rng_and_uses_default_length() -> None:
    source = load_dataset("random", input_len=None, seed=3, tokenizer_path=None)
    a = [source.next_request(random.Random(7)).prompt for _ in range(3)]
    assert a[0] == a[1] == a[2]
    assert source.next_request(random.Random(8)).prompt != a[0]
    assert source.next_request().input_tokens_estimate == int(DEFAULT_INPUT_LEN)
    # the source's own generator, seeded by load_dataset's seed
    again = load_dataset("random", input_len="", seed=3, tokenizer_path=None)
    fresh = load_dataset("random", input_len="", seed=3, tokenizer_path=None)
    assert again.next_request().prompt == fresh.next_request().prompt


def test_bad_input_len_is_refused() -> None:
    with pytest.raises(InputError, match="--llm-input-len"):
        load_dataset("random", input_len="uniform:9", seed=0, tokenizer_path=None)


# ----------------------------------------------------------------------------- openqa


def test_openqa_is_a_few_hundred_distinct_plain_questions() -> None:
    source = load_dataset("openqa", input_len=None, seed=0, tokenizer_path=None)
    entries = source._entries
    texts = [e.messages[0]["content"] for e in entries]
    assert len(texts) >= 300 and len(set(texts)) == len(texts)
    lengths = [estimate_tokens(t) for t in texts]
    assert min(lengths) < 10 and max(lengths) > 50  # short and long asks
    rng = random.Random(2)
    drawn = [source.next_request(rng) for _ in range(400)]
    assert len({p.prompt for p in drawn}) > 150
    assert all(p.input_tokens_estimate == estimate_tokens(p.prompt) for p in drawn)


def test_input_len_with_a_fixed_set_is_refused() -> None:
    with pytest.raises(InputError, match="random dataset only"):
        load_dataset("openqa", input_len="128", seed=0, tokenizer_path=None)


# ----------------------------------------------------------------------------- JSONL


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_jsonl_prompts_and_messages(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "p.jsonl",
        [
            json.dumps({"prompt": "What is a lighthouse?", "id": 1}),
            "",
            json.dumps(
                {
                    "messages": [
                        {"role": "system", "content": "Be brief."},
                        {"role": "user", "content": [{"type": "text", "text": "Name a fish."}]},
                    ],
                    "max_tokens": 40,
                }
            ),
        ],
    )
    source = load_dataset(str(path), input_len=None, seed=0, tokenizer_path=None)
    assert len(source) == 2 and source.name == "p.jsonl"
    seen = {}
    rng = random.Random(0)
    while len(seen) < 2:
        p = source.next_request(rng)
        seen[p.prompt] = p
    chat = seen["Be brief.\n\nName a fish."]
    assert chat.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name a fish."},
    ]
    assert chat.max_tokens == 40
    assert seen["What is a lighthouse?"].max_tokens is None
    assert seen["What is a lighthouse?"].input_tokens_estimate == estimate_tokens(
        "What is a lighthouse?"
    )


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"text": "hi"}', "expected a JSON object"),
        ('{"prompt": "a", "messages": []}', "expected a JSON object"),
        ('{"prompt": ""}', "non-empty string"),
        ('{"messages": []}', "non-empty list"),
        ('{"messages": [{"role": "robot", "content": "x"}]}', "role"),
        ('{"messages": [{"role": "user", "content": 5}]}', "must be a string"),
        ('{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}', "non-text"),
        ('{"prompt": "x", "max_tokens": 0}', "max_tokens"),
        ('{"prompt": "x", "max_tokens": "5"}', "max_tokens"),
    ],
)
def test_malformed_jsonl_names_file_and_line(tmp_path: Path, line: str, needle: str) -> None:
    path = _write(tmp_path / "bad.jsonl", ['{"prompt": "fine"}', "", line])
    with pytest.raises(InputError, match=needle) as info:
        load_dataset(str(path), input_len=None, seed=0, tokenizer_path=None)
    assert f"{path}:3:" in str(info.value)
    assert "\n" not in str(info.value)


def test_empty_file_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "empty.jsonl", [""])
    with pytest.raises(InputError, match="no prompts"):
        load_dataset(str(path), input_len=None, seed=0, tokenizer_path=None)


# ----------------------------------------------------------------------------- ShareGPT


def _sharegpt(path: Path, items: object) -> Path:
    path.write_text(json.dumps(items), encoding="utf-8")
    return path


def test_sharegpt_takes_first_human_turn_and_reply_length(tmp_path: Path) -> None:
    path = _sharegpt(
        tmp_path / "share.json",
        [
            {
                "id": "a",
                "conversations": [
                    {"from": "system", "value": "You are kind."},
                    {"from": "human", "value": "Tell me a joke."},
                    {"from": "gpt", "value": "Why did the cat sit on the computer?"},
                    {"from": "human", "value": "Another one."},
                ],
            },
            {"conversations": [{"from": "gpt", "value": "no question here"}]},
            {"conversations": [{"from": "human", "value": "Last question"}]},
            {
                "conversations": [
                    {"from": "human", "value": "First ask"},
                    {"from": "human", "value": "a second human turn is no reply"},
                ]
            },
        ],
    )
    source = load_dataset(str(path), input_len=None, seed=0, tokenizer_path=None)
    assert len(source) == 3  # the conversation without a human turn is skipped
    prompts = {p.prompt: p for p in (source.next_request(random.Random(i)) for i in range(40))}
    joke = prompts["You are kind.\n\nTell me a joke."]
    assert joke.messages[0] == {"role": "system", "content": "You are kind."}
    assert joke.messages[1] == {"role": "user", "content": "Tell me a joke."}
    assert joke.max_tokens == estimate_tokens("Why did the cat sit on the computer?")
    assert prompts["Last question"].max_tokens is None
    assert prompts["First ask"].max_tokens is None


@pytest.mark.parametrize(
    ("items", "needle"),
    [
        ({"conversations": []}, "top level is a dict"),
        ([{"conversations": []}, {"turns": []}], "item 1: expected"),
        ([{"conversations": [{"from": "human", "value": 3}]}], "item 0, turn 0"),
        ([{"conversations": [{"from": "gpt", "value": "only answers"}]}], "no prompts"),
    ],
)
def test_malformed_sharegpt_names_the_item(tmp_path: Path, items: object, needle: str) -> None:
    path = _sharegpt(tmp_path / "s.json", items)
    with pytest.raises(InputError, match=needle):
        load_dataset(f"sharegpt:{path}", input_len=None, seed=0, tokenizer_path=None)


def test_sharegpt_that_is_not_json(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text("[{", encoding="utf-8")
    with pytest.raises(InputError, match=r"s\.json: not JSON \(line 1"):
        load_dataset(str(path), input_len=None, seed=0, tokenizer_path=None)


# ----------------------------------------------------------------------------- formats


def test_format_by_extension_content_and_prefix(tmp_path: Path) -> None:
    share = _sharegpt(tmp_path / "a.json", [{"conversations": [{"from": "human", "value": "q"}]}])
    jsonl_in_json = _write(tmp_path / "b.json", ['{"prompt": "q"}'])
    txt = _write(tmp_path / "c.txt", ['{"prompt": "q"}'])
    odd = _write(tmp_path / "d.data", ["prompt: q"])
    assert sniff_format(share) == "sharegpt"
    assert sniff_format(jsonl_in_json) == "jsonl"
    assert sniff_format(txt) == "jsonl"
    with pytest.raises(InputError, match="cannot tell its format"):
        sniff_format(odd)
    # a forced format wins over the content
    with pytest.raises(InputError, match=r"a\.json:1: expected a JSON object"):
        load_dataset(f"jsonl:{share}", input_len=None, seed=0, tokenizer_path=None)
    assert len(load_dataset(f"jsonl:{jsonl_in_json}", seed=0)) == 1


@pytest.mark.parametrize("spec", ["", "no/such/file.jsonl", "sharegpt:/nope.json"])
def test_unknown_dataset_is_refused(spec: str) -> None:
    with pytest.raises(InputError, match="--llm-dataset"):
        load_dataset(spec, input_len=None, seed=0, tokenizer_path=None)


# ----------------------------------------------------------------------------- tokenizer


def test_missing_tokenizers_package_names_pip_package(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(InputError, match="pip install tokenizers"):
        load_dataset("random", input_len="8", seed=0, tokenizer_path=str(tmp_path))


@pytest.fixture(scope="module")
def bpe_path(tmp_path_factory) -> Path:
    """A tiny byte-level BPE trained here: it splits words into several tokens."""
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=400,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([" ".join(WORDS)] * 3, trainer=trainer)
    folder = tmp_path_factory.mktemp("tok")
    tok.save(str(folder / "tokenizer.json"))
    return folder


def test_tokenizer_makes_random_lengths_exact(bpe_path: Path) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(bpe_path / "tokenizer.json"))
    source = load_dataset("random", input_len="uniform:1,300", seed=0, tokenizer_path=str(bpe_path))
    for i in range(150):
        target = source.input_len.sample(random.Random(i))  # the draw next_request makes first
        p = source.next_request(random.Random(i))
        actual = len(tok.encode(p.prompt, add_special_tokens=False).ids)
        assert actual == p.input_tokens_estimate == target
        assert estimate_tokens(p.prompt) != actual or target < 3  # the BPE splits words


def test_tokenizer_counts_file_prompts(bpe_path: Path, tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(bpe_path / "tokenizer.json"))
    path = _write(tmp_path / "p.jsonl", [json.dumps({"prompt": "Which river is longest?"})])
    source = load_dataset(str(path), input_len=None, seed=0, tokenizer_path=str(bpe_path))
    p = source.next_request()
    assert p.input_tokens_estimate == len(tok.encode(p.prompt, add_special_tokens=False).ids)
    assert p.input_tokens_estimate != estimate_tokens(p.prompt)


def test_bad_tokenizer_paths(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    with pytest.raises(InputError, match="no such file"):
        load_dataset("random", input_len="8", seed=0, tokenizer_path=str(tmp_path / "none"))
    garbage = tmp_path / "tokenizer.json"
    garbage.write_text("{}", encoding="utf-8")
    with pytest.raises(InputError, match=r"not a tokenizer\.json"):
        load_dataset("random", input_len="8", seed=0, tokenizer_path=str(tmp_path))


def test_estimates_equal_what_the_simulated_server_counts(tmp_path: Path) -> None:
    from locust_llm.workloads.textgen import estimate_message_tokens

    path = _write(
        tmp_path / "m.jsonl",
        [
            json.dumps(
                {
                    "messages": [
                        {"role": "system", "content": "Answer in French, please."},
                        {"role": "user", "content": "Where is the Eiffel Tower?"},
                    ]
                }
            )
        ],
    )
    rng = random.Random(0)
    for spec, input_len in (("random", "normal:100,30"), ("openqa", None), (str(path), None)):
        source = load_dataset(spec, input_len=input_len, seed=0, tokenizer_path=None)
        for _ in range(50):
            p = source.next_request(rng)
            assert estimate_message_tokens(p.messages) == p.input_tokens_estimate  # chat
            assert estimate_tokens(p.prompt) == p.input_tokens_estimate  # completions


@pytest.mark.parametrize(
    ("spec", "kind", "params"),
    [  # the simulator's --output-len spellings: the same grammar as the client's lengths
        ("fixed:8", "fixed", (8.0,)),
        ("uniform:48:96", "uniform", (48.0, 96.0)),
        ("exponential:100", "exp", (100.0,)),
        ("lognormal:256:0.5", "lognormal", (256.0, 0.5)),
        ("lognormal:100:0", "lognormal", (100.0, 0.0)),
        ("64", "fixed", (64.0,)),  # and the client's forms, new to --output-len
        ("normal:64,8", "normal", (64.0, 8.0)),
    ],
)
def test_sim_output_len_reads_the_one_grammar(
    spec: str, kind: str, params: tuple[float, ...]
) -> None:
    lengths = OutputLengths(spec, seed=3)
    assert (lengths.distribution.kind, lengths.distribution.params) == (kind, params)
    assert config_from_mapping({"output_len": spec}).output_len == spec
    again = OutputLengths(spec, seed=3)
    rng = random.Random("output-len:3")  # OutputLengths is the sampler on its own seeded stream
    draws = [lengths.draw() for _ in range(20)]
    assert draws == [again.draw() for _ in range(20)]
    assert draws == [parse_distribution(spec).sample(rng) for _ in range(20)]


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("gauss:3", "cannot read"),
        ("fixed:12.5", "whole numbers >= 1"),
        ("uniform:0:5", "whole numbers >= 1"),
        ("uniform:9:5", "HI < LO"),
        ("lognormal:256", "needs 2 parameters"),
        ("exponential:0", "mean"),
    ],
)
def test_sim_output_len_errors_name_the_flag(spec: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle) as info:
        config_from_mapping({"output_len": spec})
    assert str(info.value).startswith("--output-len: ")
