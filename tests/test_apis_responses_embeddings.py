"""The Responses API and embeddings: our adapters, the simulator's endpoints, and the official
``openai`` client reading the simulator (an independent judge of the wire format)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_locust

from locust_llm.client import sse
from locust_llm.client.apis.base import BodyRequest, get_api, registered_apis
from locust_llm.sim.testing import running_sim
from locust_llm.workloads.datasets import Prompt
from locust_llm.workloads.textgen import estimate_tokens

PROMPT = Prompt([{"role": "user", "content": "Name a river"}], "Name a river", 3, None)
SIM = {"zero_cost": True, "step_overhead_s": 0.002, "output_len": "fixed:6"}


def test_both_adapters_are_registered_by_name() -> None:
    responses, embeddings = get_api("responses"), get_api("embeddings")
    assert {"responses", "embeddings"} <= set(registered_apis())
    body = responses.build_body(BodyRequest(model="m", prompt=PROMPT, max_tokens=9))
    assert body["input"] == PROMPT.messages and body["max_output_tokens"] == 9 and body["stream"]
    assert embeddings.build_body(BodyRequest(model="m", prompt=PROMPT, max_tokens=1)) == {
        "model": "m",
        "input": ["Name a river"],
    }
    assert not embeddings.streams and responses.streams


def test_responses_events_classify_as_tokens_reasoning_end_and_errors() -> None:
    classify = get_api("responses").classify
    kind, chunk = classify(b'{"type":"response.output_text.delta","delta":"Hi"}')
    assert kind == sse.KIND_CHUNK and chunk is not None and chunk.content
    kind, chunk = classify(b'{"type":"response.reasoning_text.delta","delta":"hmm"}')
    assert chunk is not None and chunk.reasoning and not chunk.content
    assert classify(b'{"type":"response.created","response":{}}')[0] == sse.KIND_IGNORE
    usage = {
        "input_tokens": 11,
        "output_tokens": 7,
        "input_tokens_details": {"cached_tokens": 4},
        "output_tokens_details": {"reasoning_tokens": 3},
    }
    kind, chunk = classify(
        json.dumps({"type": "response.completed", "response": {"usage": usage}}).encode()
    )
    assert kind == sse.KIND_DONE and chunk is not None
    assert (
        chunk.prompt_tokens,
        chunk.completion_tokens,
        chunk.cached_tokens,
        chunk.reasoning_tokens,
    ) == (11, 7, 4, 3)
    kind, chunk = classify(b'{"type":"error","message":"boom","error":{"message":"boom"}}')
    assert chunk is not None and chunk.error == "boom"
    assert classify(b"{broken")[0] == sse.KIND_BAD


def _openai(url: str):  # the official client, pointed at the simulator
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def test_the_official_client_streams_the_simulators_responses_api() -> None:
    with running_sim(**SIM) as url, _openai(url) as client:  # closed: no socket left
        stream = client.responses.create(
            model="mistral-7b", input="Name a river", max_output_tokens=5, stream=True
        )
        events = list(stream)
        whole = client.responses.create(
            model="mistral-7b", input=[{"role": "user", "content": "Hi there"}]
        )
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds.count("response.output_text.delta") == 5
    assert kinds[-1] == "response.incomplete"  # max_output_tokens cut the answer
    final = events[-1].response
    assert final.usage.output_tokens == 5 and final.usage.input_tokens == estimate_tokens(
        "Name a river"
    )
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert final.output_text == text
    assert whole.status == "completed" and whole.usage.output_tokens == 6 and whole.output_text


def test_the_official_client_reads_the_simulators_embeddings() -> None:
    with running_sim(**SIM) as url, _openai(url) as client:  # closed: no socket left
        got = client.embeddings.create(model="mistral-7b", input=["a river", "the longest river"])
        again = client.embeddings.create(model="mistral-7b", input="a river")
    assert [d.index for d in got.data] == [0, 1] and len(got.data[0].embedding) == 64
    assert got.data[0].embedding == again.data[0].embedding  # fixed by the text
    assert sum(v * v for v in got.data[1].embedding) == pytest.approx(1.0)
    assert got.usage.prompt_tokens == estimate_tokens("a river") + estimate_tokens(
        "the longest river"
    )


LOCUSTFILE = """
from locust import constant
from locust_llm.client.user import LLMUser
from locust_llm.client.workload_users import EmbeddingsUser

class Responses(LLMUser):
    api = "responses"
    max_tokens = 5
    wait_time = constant(0)

class Embed(EmbeddingsUser):
    batch_size = 4
    input_len = 12
    wait_time = constant(0)
"""


def test_both_apis_under_locust_one_record_per_request(tmp_path: Path) -> None:
    locustfile, run_dir, trace = tmp_path / "apis.py", tmp_path / "run", tmp_path / "sim.jsonl"
    locustfile.write_text(LOCUSTFILE)
    with running_sim(trace_path=str(trace), **SIM) as url:
        out = run_locust([
            "-f", str(locustfile), "--headless", "--host", url, "-u", "4", "-r", "4", "-t", "3s",
            "--stop-timeout", "5", "--llm-run-dir", str(run_dir),
        ])  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    records = pd.read_parquet(run_dir / "requests.parquet")
    assert records.ok.all(), records.error_message.unique()
    sent = {r["client_request_id"]: r for r in map(json.loads, trace.read_text().splitlines())}
    assert set(records.request_id) == set(sent)
    resp = records[records.endpoint == "/v1/responses"]
    emb = records[records.endpoint == "/v1/embeddings"]
    assert len(resp) > 5 and len(emb) > 5
    assert (resp.output_tokens == 5).all() and not resp.tokens_estimated.any()
    assert (resp.ttft_s > 0).all() and (resp.chunks == 5).all()
    assert (emb.batch_inputs == 4).all() and emb.ttft_s.isna().all() and (emb.e2e_s > 0).all()
    for row in emb.itertuples():
        assert row.input_tokens == sent[row.request_id]["prompt_tokens"] == 4 * 12
    assert {sent[r]["endpoint"] for r in emb.request_id} == {"embeddings"}


def _post(url: str, path: str, body: dict) -> bytes:
    import urllib.request

    req = urllib.request.Request(
        url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.read()


def test_our_adapters_read_the_simulators_whole_bodies() -> None:
    responses, embeddings = get_api("responses"), get_api("embeddings")
    with running_sim(**SIM) as url:
        whole = _post(url, "/v1/responses", {"input": "Name a river", "max_output_tokens": 4})
        vectors = _post(url, "/v1/embeddings", {"input": ["a river", "two"]})
        streamed = _post(
            url, "/v1/responses", {"input": "Name a river", "max_output_tokens": 3, "stream": True}
        )
    chunk = responses.parse_body(whole)
    assert (chunk.completion_tokens, chunk.cached_tokens) == (4, 0)
    assert chunk.prompt_tokens == estimate_tokens("Name a river")
    assert chunk.content
    chunk = embeddings.parse_body(vectors)
    assert chunk.prompt_tokens == estimate_tokens("a river") + 1 and chunk.completion_tokens == 0
    kinds = [
        responses.classify(payload)[0]
        for payload in (sse.data_payload(x) for x in streamed.split(b"\n"))
        if payload is not None
    ]
    assert kinds.count(sse.KIND_CHUNK) == 3 and kinds[-1] == sse.KIND_DONE
    with pytest.raises(ValueError, match="no 'output' list"):
        responses.parse_body(b'{"choices": []}')
    with pytest.raises(ValueError, match="no 'data' list"):
        embeddings.parse_body(b'{"data": [{"index": 0}]}')
