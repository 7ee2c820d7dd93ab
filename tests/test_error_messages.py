"""Each error kind's most frequent message (locust_llm/error_messages.py): JSON bodies read for
their message, numbers and ids folded, the cut, the bound, merging and its wire form; and the
errors verdict quoting the message instead of a guess."""

from __future__ import annotations

import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from locust_llm.error_messages import (
    MAX_MESSAGES,
    MESSAGE_CHARS,
    MessageTally,
    kind_messages,
    message_key,
    server_words,
)
from locust_llm.report.diagnosis.actions import ERROR_ACTIONS
from locust_llm.report.diagnosis.verdict import stage_verdict
from locust_llm.sim.config import SimConfig
from locust_llm.sim.engine import Engine, RequestTooLarge
from locust_llm.sim.openai_format import error_body

TOO_LONG = (
    "This model's maximum context length is 64 tokens. However, you requested {} tokens "
    "({} in the messages, 16 in the completion). Please reduce the length of the messages or "
    "completion."
)


def _http(status: int, body: str, limit: int = 300) -> str:
    """A record's message for an HTTP error, as the client makes it (cut to its limit)."""
    return f"HTTP {status}: {body}"[:limit]


def test_a_json_error_body_is_read_for_its_message() -> None:
    openai = json.dumps({"error": {"message": "The model `x` does not exist.", "code": 404}})
    vllm = json.dumps({"object": "error", "message": "bad 'n'", "type": "BadRequestError"})
    fastapi = json.dumps({"detail": [{"loc": ["body"], "msg": "x", "message": "field required"}]})
    assert server_words(_http(404, openai)) == "HTTP 404: The model `x` does not exist."
    assert server_words(_http(400, vllm)) == "HTTP 400: bad 'n'"
    assert server_words(_http(422, fastapi)) == "HTTP 422: field required"
    assert server_words(_http(502, "<html>\n  Bad   gateway</html>")) == (
        "HTTP 502: <html> Bad gateway</html>"
    )
    assert server_words("read timed out: timed out") == "read timed out: timed out"
    # a body cut at the record's limit still gives its message, up to the cut
    long = json.dumps({"error": {"message": "x" * 400 + ' "quoted"'}})
    assert server_words(_http(400, long)) == "HTTP 400: " + "x" * (
        300 - len('HTTP 400: {"error": {"message": "')
    )
    escaped = json.dumps({"error": {"message": 'say "hi"\nnow'}})
    assert server_words(_http(400, escaped)) == 'HTTP 400: say "hi" now'


def test_numbers_and_ids_are_folded_and_the_agreed_ones_kept() -> None:
    assert message_key("request 17 too long")[0] == message_key("request 18 too long")[0]
    assert message_key("request 17 too long")[0] != message_key("reply 17 too long")[0]
    messages = [
        _http(400, error_body(400, TOO_LONG.format(n + 16, n)).decode()) for n in (90, 200, 90)
    ]
    (found,) = kind_messages(["http_4xx"] * 3, messages, requests=12)
    assert found.kind == "http_4xx" and found.count == found.message_count == 3
    assert found.messages == 1 and found.share == pytest.approx(0.25)
    # 64 and 16 were the same in every request: kept; the requested lengths differed: {n}
    assert found.message.startswith(
        "HTTP 400: This model's maximum context length is 64 tokens. However, you requested "
        "{n} tokens ({n} in the messages, 16 in the completion)."
    )
    ids = [
        f"no session {i:08x}-1b2c-4d5e-8f90-a1b2c3d4e5f6 for user chatcmpl-{i}abcdef12"
        for i in (1, 2)
    ]
    (found,) = kind_messages(["http_4xx", "http_4xx"], ids)
    assert found.message == "no session {id} for user {id}" and math.isnan(found.share)


def test_the_real_simulator_message_groups_across_lengths() -> None:
    """The simulator's own 400 for a prompt past --max-model-len, at two prompt lengths."""
    engine = Engine(SimConfig(max_model_len=100))
    said = []
    for prompt in (120, 150):
        with pytest.raises(RequestTooLarge) as info:
            engine.check_fits(prompt, 16)
        said.append(_http(400, error_body(400, str(info.value)).decode()))
    (found,) = kind_messages(["http_4xx", "http_4xx"], said)
    assert found.message_count == 2 and "maximum context length is 100 tokens" in found.message
    assert "you requested {n} tokens ({n} in the messages, 16 in the completion)" in found.message


def test_the_most_frequent_message_and_kind_come_first() -> None:
    kinds = ["http_5xx", "http_4xx", "http_4xx", "http_4xx", "cancelled", "", "http_4xx"]
    messages = [
        "HTTP 500: boom",
        "HTTP 400: a 1",
        "HTTP 400: b",
        "HTTP 400: a 2",
        "stopped",
        "",
        "",
    ]
    found = kind_messages(kinds, messages, requests=10)
    assert [k.kind for k in found] == ["http_4xx", "http_5xx"]  # cancelled and ok: left out
    four = found[0]
    # 4 failures, 2 of them "a {n}", one "b", one without a message
    assert (four.count, four.message, four.message_count, four.messages) == (
        4,
        "HTTP 400: a {n}",
        2,
        2,
    )
    assert found[1].share == pytest.approx(0.1)
    (silent,) = kind_messages(["timeout"], [""])
    assert silent.message == "" and silent.message_count == 0 and silent.count == 1


def test_the_cut_and_the_bound() -> None:
    base = "the upstream said " + "very " * 60
    (found,) = kind_messages(["http_5xx"] * 2, [base + "tail one", base + "tail two"])
    # past MESSAGE_CHARS characters two messages are one, shown cut
    assert found.message_count == 2 and found.message.endswith("…")
    assert len(found.message) == MESSAGE_CHARS + 1
    words = ["".join(random.Random(i).choices("abcdefgh", k=12)) for i in range(3 * MAX_MESSAGES)]
    (many,) = kind_messages(["bad_payload"] * len(words), words)
    assert many.count == len(words) and many.messages == MAX_MESSAGES


_TEMPLATES = ("request {} too long", "HTTP 400: slot {} busy, retry in {} s", "engine died")


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["http_4xx", "http_5xx", "timeout", "cancelled"]),
            st.integers(0, len(_TEMPLATES) - 1),
            st.integers(0, 99999),
            st.integers(0, 9),
        ),
        max_size=40,
    ),
    st.integers(0, 40),
)
def test_merging_halves_through_json_equals_one_tally(
    failures: list[tuple[str, int, int, int]], split: int
) -> None:
    """What the live stats do: workers' tallies sent as JSON and merged on the master equal one
    tally of everything; each kind's count is its failures'."""
    said = [(k, _TEMPLATES[t].format(a, b)) for k, t, a, b in failures]
    whole, left, right = MessageTally(), MessageTally(), MessageTally()
    for i, (kind, message) in enumerate(said):
        whole.add(kind, message)
        (left if i < split else right).add(kind, message)
    merged = MessageTally.from_dict(json.loads(json.dumps(left.to_dict())))
    merged.merge(MessageTally.from_dict(json.loads(json.dumps(right.to_dict()))))
    assert merged.summary(50) == whole.summary(50)
    counted = [k for k, _ in said if k != "cancelled"]
    assert {k.kind: k.count for k in whole.summary()} == {k: counted.count(k) for k in set(counted)}
    for k in whole.summary():
        assert k.message_count <= k.count and k.messages <= len(_TEMPLATES)


def _failing_row(**messages: object) -> dict:
    row = {
        "stage": 0, "kind": "step", "concurrency": 4.0, "rate": math.nan, "requests": 40.0,
        "completed": 10.0, "qps": 1.0, "error_rate": 0.75, "error_rate_http_4xx": 0.5,
        "error_rate_http_5xx": 0.25, "server_samples": 0.0,
    }  # fmt: skip
    row.update(messages)
    return row


def test_the_errors_verdict_quotes_the_message_instead_of_a_guess() -> None:
    said = {
        k.kind: k
        for k in kind_messages(
            ["http_4xx"] * 20 + ["http_5xx"] * 10,
            [
                _http(400, error_body(400, f"prompt of {n} tokens is too long").decode())
                for n in range(20)
            ]
            + ["HTTP 500: engine died"] * 10,
        )
    }
    v = stage_verdict(_failing_row(error_messages=said))
    assert v.kind == "errors"
    text = "\n".join(v.actions)
    assert 'http_4xx: "HTTP 400: prompt of {n} tokens is too long" (20 of 20)' in text
    assert 'http_5xx: "HTTP 500: engine died" (10 of 10)' in text
    assert "prompt too long?" not in text  # the guess is gone
    # no message recorded (an old run dir, or failures that carried none): the hint stays
    hinted = stage_verdict(_failing_row())
    assert ERROR_ACTIONS["http_4xx"] in hinted.actions


def test_the_report_quotes_the_message_as_it_came_whatever_the_device(tmp_path) -> None:
    """A failing stage's messages in the document (errors table and console), counted over the
    stage's records; a report for a CPU keeps the server's "GPU" in them (the device's words
    rewrite our sentences, never the server's)."""
    from dataclasses import replace as with_

    import pandas as pd
    from rundir_factory import make_run, regime

    from locust_llm.report.build import build_report
    from locust_llm.report.document import document
    from locust_llm.report.load import load_run
    from locust_llm.report.render_console import render_console
    from locust_llm.report.render_md import render_markdown
    from locust_llm.report.wording import DeviceWords

    specs, kw = regime("decode")
    specs = [with_(specs[0], qps=20.0, errors={"oom": 0.1, "http_5xx": 0.2})]
    run_dir = make_run(tmp_path / "run", specs, stage_s=5, telemetry=False, **kw)
    records = pd.read_parquet(run_dir / "requests.parquet")
    oom = records["error_kind"] == "oom"
    five = records["error_kind"] == "http_5xx"
    records.loc[oom, "error_message"] = [
        f"HTTP 500: CUDA out of memory on GPU 0; tried to allocate {i} MiB"
        for i in range(oom.sum())
    ]
    records.loc[five, "error_message"] = "HTTP 503: no GPU worker free; NVML says busy"
    records.to_parquet(run_dir / "requests.parquet", index=False)
    report = build_report(load_run(run_dir))
    report.words = DeviceWords("CPU")
    kinds = {k.kind: k for k in report.errors}
    assert kinds["oom"].count == kinds["oom"].message_count == int(oom.sum())
    assert kinds["http_5xx"].share == pytest.approx(five.sum() / len(records))
    table = document(report).section("error-messages").blocks[1]
    cells = {row[0]: row for row in table.rows}
    assert cells["oom"][4] == "HTTP 500: CUDA out of memory on GPU 0; tried to allocate {n} MiB"
    assert cells["http_5xx"][4] == "HTTP 503: no GPU worker free; NVML says busy"
    assert "| http_5xx |" in render_markdown(report)
    console = render_console(report)
    assert "HTTP 503: no GPU worker free; NVML says busy" in console


def test_a_cpu_report_s_words_leave_a_quoted_message_alone() -> None:
    from locust_llm.report.diagnosis.actions import error_action
    from locust_llm.report.wording import DeviceWords

    action = error_action("http_5xx", "HTTP 503: no GPU free; NVML busy", 3, 4)
    assert (
        action
        == 'http_5xx: "HTTP 503: no GPU free; NVML busy" (3 of 4); the server\'s log has the rest'
    )
    cpu = DeviceWords("CPU")
    assert cpu.say(action) == action
    # our own words still change: a GPU-only clause goes, "GPU" becomes the device
    assert cpu.say('GPU busy; "GPU 0"; NVML says so') == 'CPU busy; "GPU 0"'


def test_the_oom_verdict_quotes_the_server_s_message() -> None:
    said = kind_messages(
        ["oom"] * 3, [f"HTTP 500: CUDA out of memory, tried {n} MiB" for n in (2, 4, 8)]
    )
    row = _failing_row(error_rate=0.1, error_rate_http_4xx=0.0, error_rate_http_5xx=0.0)
    v = stage_verdict({**row, "error_rate_oom": 0.1, "error_messages": {"oom": said[0]}})
    assert v.kind == "memory_oom"
    assert 'the server said "HTTP 500: CUDA out of memory, tried {n} MiB" (3 of 3)' in v.evidence
