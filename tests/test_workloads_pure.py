"""The pure parts of the workloads: sessions, shared prefixes, traces (no Locust, no server)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from locust_llm.errors import InputError
from locust_llm.sim.prefix_cache import block_hashes
from locust_llm.workloads.datasets import WORDS, load_dataset
from locust_llm.workloads.partition import Partition
from locust_llm.workloads.replay import Replay, TraceBook
from locust_llm.workloads.sessions import (
    Conversation,
    SessionBook,
    ThinkTime,
    answer_text,
    load_sessions,
)
from locust_llm.workloads.shared_prefix import parse_spec
from locust_llm.workloads.textgen import estimate_tokens, message_pieces
from locust_llm.workloads.traces import (
    TraceLine,
    expected_hit_rate,
    read_trace,
    synthetic_mooncake,
    trace_prompt,
    window,
    write_jsonl,
)

# ---------------------------------------------------------------------------------- sessions


def test_think_time_forms_and_errors() -> None:
    rng = random.Random(0)
    assert ThinkTime(2).sample_s(rng) == 2.0
    draws = [ThinkTime("uniform:1,3").sample_s(rng) for _ in range(500)]
    assert min(draws) >= 1.0 and max(draws) <= 3.0 and 1.8 < sum(draws) / 500 < 2.2
    mean = sum(ThinkTime("exponential:0.5").sample_s(rng) for _ in range(4000)) / 4000
    assert 0.45 < mean < 0.55
    for bad in ("soon", "uniform:3,1", "uniform:1", "-1", "gamma:2"):
        with pytest.raises(InputError, match="think time"):
            ThinkTime(bad)


def test_a_conversation_carries_the_server_answers_or_the_datasets(tmp_path: Path) -> None:
    path = tmp_path / "chats.jsonl"
    line = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello there"},
            {"role": "user", "content": "Name a river"},
            {"role": "assistant", "content": "Nile"},
        ]
    }
    path.write_text(json.dumps(line) + "\n\n" + json.dumps({"messages": []}) + "\n")
    source = load_sessions(str(path))
    session = source.session(0)
    assert [t.user for t in session.turns] == ["Hi", "Name a river"]
    assert [t.reply for t in session.turns] == ["Hello there", "Nile"]
    assert session.turns[0].max_tokens == estimate_tokens("Hello there")
    server = Conversation(session, "server")
    assert server.messages() == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    server.answered("What the server said")
    assert server.messages()[-2:] == [
        {"role": "assistant", "content": "What the server said"},
        {"role": "user", "content": "Name a river"},
    ]
    server.answered("x")
    assert server.done
    dataset = Conversation(session, "dataset")
    dataset.answered("ignored")
    assert dataset.messages()[2] == {"role": "assistant", "content": "Hello there"}


def test_sharegpt_conversations_and_bad_files(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    data = [
        {"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b c"}]},
        {"conversations": [{"from": "gpt", "value": "no user turn"}]},
    ]
    path.write_text(json.dumps(data))
    source = load_sessions(f"sharegpt:{path}")
    assert source.size == 1 and source.session(0).turns[0].reply == "b c"
    assert source.session(3).session_id == "sg-3"  # beyond the file: its own id
    with pytest.raises(InputError, match="no such file"):
        load_sessions(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text(json.dumps([{"conversations": [{"from": "human"}]}]))
    with pytest.raises(InputError, match="item 0"):
        load_sessions(str(tmp_path / "bad.json"))
    (tmp_path / "none.jsonl").write_text(json.dumps({"messages": [{"role": "x", "content": ""}]}))
    with pytest.raises(InputError, match="no conversation"):
        load_sessions(str(tmp_path / "none.jsonl"))


def test_synthetic_sessions_are_the_same_in_every_process_and_never_run_twice() -> None:
    def make() -> object:
        return load_sessions("synthetic", turns="uniform:2,4", input_len="fixed:32", seed=5)

    a, b = make(), make()
    assert a.session(7) == b.session(7) and a.session(7) != a.session(8)  # type: ignore[attr-defined]
    turns = a.session(7).turns  # type: ignore[attr-defined]
    assert 2 <= len(turns) <= 4 and all(estimate_tokens(t.user) == 32 for t in turns)
    # three workers' books: together they hand out each session number once
    books = [SessionBook(make()) for _ in range(3)]  # type: ignore[arg-type]
    taken = [books[i].take(i, 3).session_id for _ in range(5) for i in range(3)]
    assert len(taken) == len(set(taken)) == 15
    assert sorted(int(s.split("-")[1]) for s in taken) == list(range(15))


def test_answer_text_reads_chat_completions_whole_bodies_and_responses() -> None:
    chunks = [
        b'{"choices":[{"index":0,"delta":{"content":"Hel"}}]}',
        b'{"choices":[{"index":0,"delta":{"content":"lo"}}]}',
        b'{"choices":[{"index":0,"text":"!"}]}',
        b'{"type":"response.output_text.delta","delta":" ok"}',
        b"not json",
    ]
    assert answer_text(chunks) == "Hello! ok"
    body = b'{"choices":[{"message":{"role":"assistant","content":"whole"}}]}'
    assert answer_text([body]) == "whole"


# ---------------------------------------------------------------------------- shared prefix


def test_shared_prefix_prompts_share_exactly_their_groups_prefix() -> None:
    source = load_dataset("shared-prefix:groups=3,prefix=64,suffix=uniform:5,20", seed=1)
    rng = random.Random(0)
    prompts = [source.next_request(rng) for _ in range(300)]
    prefixes = {" ".join(p.prompt.split()[:64]) for p in prompts}
    assert len(prefixes) == 3
    for p in prompts:
        assert p.input_tokens_estimate == estimate_tokens(p.prompt)
        assert 64 + 5 <= p.input_tokens_estimate <= 64 + 20
    # as the simulator hashes them: the prefix's 4 blocks are shared, the suffix's never
    hashes = [block_hashes(message_pieces(p.messages), 16) for p in prompts]
    firsts = {h[:4] for h in hashes}
    assert len(firsts) == 3
    assert len({h[4] for h in hashes if len(h) > 4}) == sum(len(h) > 4 for h in hashes)


def test_shared_prefix_weights_set_each_groups_share() -> None:
    source = load_dataset("shared-prefix:groups=2,prefix=8,suffix=4,weights=3/1", seed=0)
    rng = random.Random(2)
    heads = [" ".join(source.next_request(rng).prompt.split()[:8]) for _ in range(4000)]
    first = heads.count(heads[0]) / len(heads)
    assert min(first, 1 - first) == pytest.approx(0.25, abs=0.03)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("shared-prefix:groups=0,prefix=8", "groups must be >= 1"),
        ("shared-prefix:groups=two", "integers"),
        ("shared-prefix:size=3", "not one of"),
        ("shared-prefix:groups=2,weights=1/2/3", "2 non-negative shares"),
        ("shared-prefix:groups=1,prefix=8,suffix=wide", "suffix"),
    ],
)
def test_bad_shared_prefix_specs_are_one_line_errors(spec: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        load_dataset(spec)
    assert parse_spec("shared-prefix:groups=2,prefix=8").weights == (1.0, 1.0)


@pytest.fixture(scope="module")
def bpe_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny byte-level BPE trained here (the tokenizers library is the judge of counts)."""
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


def test_with_a_tokenizer_the_prefix_and_the_prompt_counts_are_exact(bpe_path: Path) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(bpe_path / "tokenizer.json"))
    source = load_dataset(
        "shared-prefix:groups=2,prefix=100,suffix=30", seed=0, tokenizer_path=str(bpe_path)
    )
    for prefix in source.prefixes:  # type: ignore[attr-defined]
        assert len(tok.encode(prefix, add_special_tokens=False).ids) == 100
    rng = random.Random(1)
    for _ in range(20):
        p = source.next_request(rng)
        assert p.input_tokens_estimate == len(tok.encode(p.prompt, add_special_tokens=False).ids)
        assert p.input_tokens_estimate != estimate_tokens(p.prompt)  # the BPE splits words


# ---------------------------------------------------------------------------------- traces


def test_the_three_trace_formats_read_alike(tmp_path: Path) -> None:
    moon = tmp_path / "m.jsonl"
    rows = [
        {"timestamp": 1500, "input_length": 700, "output_length": 9, "hash_ids": [1, 2]},
        {"timestamp": 500, "input_length": 600, "output_length": 5, "hash_ids": [1, 3]},
    ]
    write_jsonl(rows, moon)
    lines = read_trace(moon)
    assert [(x.index, x.time_s, x.input_tokens) for x in lines] == [(0, 0.5, 600), (1, 1.5, 700)]
    plain = tmp_path / "p.jsonl"
    write_jsonl([{"timestamp_s": 2.0, "prompt": "Why is the sky blue?", "max_tokens": 7}], plain)
    (one,) = read_trace(plain)
    assert one.prompt == "Why is the sky blue?" and one.output_tokens == 7 and one.time_s == 2.0
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("timestamp,input_length,output_length,hash_ids\n0,20,4,\n250,30,8,5 6\n")
    lines = read_trace(csv_path)
    assert [(x.time_s, x.input_tokens, x.hash_ids) for x in lines] == [
        (0.0, 20, ()),
        (0.25, 30, (5, 6)),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"input_length": 5}', r"no timestamp \(ms\) or timestamp_s"),
        ('{"timestamp": -1, "input_length": 5}', "must be a number >= 0"),
        ('{"timestamp": 0}', "no input_length"),
        ('{"timestamp": 0, "input_length": 5, "hash_ids": ["a"]}', "hash_ids"),
        ("[1, 2]", "expected an object"),
        ("{nope", "not JSON"),
    ],
)
def test_bad_trace_lines_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 3}\n' + text + "\n")
    with pytest.raises(InputError, match=rf"bad.jsonl:2: .*{message}"):
        read_trace(path)
    with pytest.raises(InputError, match="no such file"):
        read_trace(tmp_path / "missing.jsonl")


def test_a_window_keeps_its_part_of_the_trace_rebased() -> None:
    rows = [{"timestamp": t, "input_length": 4} for t in (0, 1000, 2000, 3000)]
    lines = [
        type(x)(i, x.time_s, x.input_tokens, x.output_tokens)
        for i, x in enumerate(read_trace_rows(rows))
    ]
    kept = window(lines, 1.0, 3.0)
    assert [(x.index, x.time_s) for x in kept] == [(0, 0.0), (1, 1.0)]
    with pytest.raises(InputError, match="empty"):
        window(lines, 2.0, 1.0)


def read_trace_rows(rows: list[dict[str, object]]) -> list:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return read_trace(write_jsonl(rows, Path(tmp) / "t.jsonl"))


def test_equal_hash_ids_make_identical_blocks_and_the_simulators_hashes_agree() -> None:
    lines = read_trace_rows(
        [
            {"timestamp": 0, "input_length": 1100, "hash_ids": [7, 8, 9]},
            {"timestamp": 1, "input_length": 1300, "hash_ids": [7, 8, 10]},
            {"timestamp": 2, "input_length": 600, "hash_ids": [8, 11]},
        ]
    )
    prompts = [trace_prompt(x) for x in lines]
    assert [p.input_tokens_estimate for p in prompts] == [1100, 1300, 600]
    assert all(estimate_tokens(p.prompt) == p.input_tokens_estimate for p in prompts)
    a, b, c = (block_hashes(message_pieces(p.messages), 16) for p in prompts)
    assert a[:64] == b[:64] and a[64] != b[64]  # two 512-token blocks in common
    assert not set(c) & set(a)  # block 8 after another first block is another prefix


def test_expected_hit_rate_by_hand() -> None:
    lines = read_trace_rows(
        [
            {"timestamp": 0, "input_length": 1024, "hash_ids": [1, 2]},
            {"timestamp": 1, "input_length": 1100, "hash_ids": [1, 2, 3]},  # 1024 hit
            {"timestamp": 2, "input_length": 1024, "hash_ids": [1, 2]},  # all but the last 16
            {"timestamp": 3, "input_length": 600, "hash_ids": [2, 4]},  # other prefix: 0
            {"timestamp": 4, "input_length": 1100, "hash_ids": [1, 2, 3]},  # + 64 of block 3
        ]
    )
    hits = 0 + 1024 + 1008 + 0 + (1024 + 64)
    assert expected_hit_rate(lines) == pytest.approx(hits / (1024 + 1100 + 1024 + 600 + 1100))
    assert math.isnan(expected_hit_rate([]))


def test_synthetic_mooncake_rows_have_the_documented_shape() -> None:
    rows = synthetic_mooncake(500, rate_per_s=50.0, groups=4, shared_blocks=2, seed=3)
    assert [r["timestamp"] for r in rows] == sorted(r["timestamp"] for r in rows)
    assert rows[-1]["timestamp"] / 1000 == pytest.approx(500 / 50.0, rel=0.15)
    for r in rows:
        n = len(r["hash_ids"])
        assert 512 * (n - 1) < r["input_length"] <= 512 * n
    lines = read_trace_rows(rows)
    assert 0.3 < expected_hit_rate(lines) < 0.7


def test_a_partition_owns_each_number_once() -> None:
    parts = [Partition(i, 3) for i in range(3)]
    assert all(sum(p.owns(n) for p in parts) == 1 for n in range(30))


def test_a_trace_book_takes_adopted_lines_in_time_order() -> None:
    lines = [TraceLine(index=i, time_s=i * 0.1, input_tokens=8, output_tokens=4) for i in range(10)]
    book, part = TraceBook(Replay(lines, 1.0, 512)), Partition(index=0, count=2)
    assert [book.claim(part).index for _ in range(2)] == [0, 2]  # type: ignore[union-attr]
    part.adopted.extend([5, 7, 9])  # a lost worker's lines not due yet
    claimed = [book.claim(part) for _ in range(6)]
    assert [x.index if x else None for x in claimed] == [4, 5, 6, 7, 8, 9]
    assert book.claim(part) is None
    part.adopted.append(3)  # adopted late: still sent (late), never twice
    assert book.unclaimed(part) == [lines[3]] and book.claim(part) is None
