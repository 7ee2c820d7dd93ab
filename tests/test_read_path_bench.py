"""bench/read_path.py: the read path it times reads every token of its answers into an ok
record (else it stops), and the command prints both figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.read_path import answer_reads, read_answer, split_check_us
from locust_llm.client.apis.base import get_api
from locust_llm.client.stamped_read import COMPILED
from locust_llm.client.stream import StreamReader

ROOT = Path(__file__).resolve().parents[1]


def test_the_timed_answer_is_read_whole_and_a_short_one_is_refused() -> None:
    reader = StreamReader(get_api("chat"))
    read_answer(reader, answer_reads(7), 7)  # 7 tokens, as many as it was built with
    with pytest.raises(SystemExit):  # a count that does not match stops the bench
        read_answer(reader, answer_reads(7), 8)


def test_the_command_prints_the_read_path_and_the_parse() -> None:
    done = subprocess.run(
        [sys.executable, "bench/read_path.py", "--rounds", "1", "--requests", "2", "--tokens", "5"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("read path: ") and "us per token" in lines[0]
    assert lines[1].startswith("parse_chunk: ") and "us per chunk" in lines[1]
    forms = ["C", "Python"] if COMPILED else ["Python"]
    assert [line.split(":")[0] for line in lines[2:]] == [f"split check, {f}" for f in forms]


def test_both_forms_of_the_split_check_count_the_timed_chunk() -> None:
    timed = split_check_us(1, number=10)  # it stops where a form does not count the chunk
    assert set(timed) == ({"C", "Python"} if COMPILED else {"Python"})
