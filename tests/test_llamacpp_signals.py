"""llama.cpp's telemetry and batch limit, in-process: the signal map over a real ``/metrics`` page
(``tests/llamacpp/metrics_sample.txt``, captured from llama-server after 4 requests on 2 slots)
and :mod:`locust_llm.telemetry.batch_limit` against fake fetches of ``/props`` answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from locust_llm.telemetry.batch_limit import probe, run_info_extra
from locust_llm.telemetry.vocabularies import extract_signals, spoken_vocabularies

SAMPLE = Path(__file__).with_name("llamacpp") / "metrics_sample.txt"


def test_a_real_llamacpp_page_maps_to_canonical_signals() -> None:
    signals = {s: v for s, _gpu, v in extract_signals(SAMPLE.read_text())}
    assert signals == {
        "running": 0.0,
        "waiting": 0.0,
        "generation_tokens_total": 28.0,
        "prompt_tokens_computed_total": 104.0,
        "prompt_tokens_cached_total": 20.0,
        "decode_calls_total": 21.0,
        "prompt_seconds_total": 0.001418,
        "busy_slots_per_decode": pytest.approx(1.33333),
    }
    assert spoken_vocabularies(SAMPLE.read_text()) == {"llamacpp"}


PROPS = '{"total_slots": 4, "model_alias": "m", "build_info": "b1"}'


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (PROPS, (4, "llama.cpp /props total_slots")),
        ('{"total_slots": 0}', None),
        ('{"total_slots": true}', None),
        ('{"total_slots": "4"}', None),
        ("[4]", None),
        ("<html>not found</html>", None),
        (OSError("connection refused"), None),
    ],
)
def test_probe_reads_only_a_positive_whole_slot_count(
    answer: str | Exception, expected: tuple[int, str] | None
) -> None:
    asked: list[str] = []

    def fetch(url: str, timeout_s: float) -> str:
        asked.append(url)
        assert timeout_s <= 2.0
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert probe("http://127.0.0.1:9/", fetch) == expected
    assert asked == ["http://127.0.0.1:9/props"]


def test_a_given_limit_wins_and_no_answer_means_no_limit() -> None:
    def never(url: str, timeout_s: float) -> str:
        raise AssertionError("not asked when the limit is given")

    assert run_info_extra(8, "http://h", never) == {
        "max_num_seqs": 8,
        "max_num_seqs_source": "--llm-server-max-num-seqs",
    }
    assert run_info_extra(0, "http://h", lambda u, t: PROPS) == {
        "max_num_seqs": 4,
        "max_num_seqs_source": "llama.cpp /props total_slots",
    }
    assert run_info_extra(0, "http://h", lambda u, t: "{}") == {}
    assert run_info_extra(0, "", never) == {}
