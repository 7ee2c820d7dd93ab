"""The llama.cpp row of docs/servers.md, measured on a real llama-server (not on our client).

Each fact the conformance table states for llama.cpp's server is checked here with a plain
``http.client`` connection: usage in streams, what happens to a kept-alive connection after a
streamed and after a plain response, what becomes of ``X-Request-Id``, the ``/metrics``
vocabulary our maps read, and ``/props``' slot count (the batch limit).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import pytest
from llamacpp.model import write_tiny_model
from llamacpp.server import LlamaServer, start_llama_server

from locust_llm.telemetry.batch_limit import probe
from locust_llm.telemetry.vocabularies import metric_maps

pytestmark = pytest.mark.slow
SLOTS = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    model = write_tiny_model(tmp_path_factory.mktemp("model"), n_embd=64, n_layer=1, n_head=4)
    with start_llama_server(model.gguf, tmp_path_factory.mktemp("s"), slots=SLOTS) as server:
        yield server


def _connection(server: LlamaServer) -> http.client.HTTPConnection:
    host, port = server.url.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port), timeout=30)


def _chat(conn: http.client.HTTPConnection, *, stream: bool) -> tuple[int, dict[str, str], str]:
    body: dict = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    headers = {"Content-Type": "application/json", "X-Request-Id": "ours-1"}
    conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
    response = conn.getresponse()
    return response.status, dict(response.getheaders()), response.read().decode()


def _chat_once(server: LlamaServer, *, stream: bool) -> tuple[int, dict[str, str], str]:
    """One request on a fresh connection, closed after."""
    conn = _connection(server)
    try:
        return _chat(conn, stream=stream)
    finally:
        conn.close()


def test_streams_carry_usage_in_the_last_chunk(server: LlamaServer) -> None:
    status, _, text = _chat_once(server, stream=True)
    assert status == 200
    events = [json.loads(line[6:]) for line in text.splitlines()
              if line.startswith("data: {")]  # fmt: skip
    assert events[-1]["usage"]["completion_tokens"] == 3
    assert text.rstrip().endswith("data: [DONE]")


def test_a_streamed_response_closes_the_kept_alive_connection_without_saying_so(
    server: LlamaServer,
) -> None:
    conn = _connection(server)
    try:
        status, headers, _ = _chat(conn, stream=True)
        assert status == 200
        assert "close" not in headers.get("Connection", "").lower()
        assert headers.get("Keep-Alive", "").startswith("timeout=")  # it even advertises keep-alive
        with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
            _chat(conn, stream=False)  # the next request on it finds the connection closed
    finally:
        conn.close()


def test_plain_responses_keep_the_connection_alive(server: LlamaServer) -> None:
    conn = _connection(server)
    try:
        assert [_chat(conn, stream=False)[0] for _ in range(3)] == [200, 200, 200]
    finally:
        conn.close()


def test_the_request_id_header_is_ignored(server: LlamaServer) -> None:
    _, headers, text = _chat_once(server, stream=False)
    assert "ours-1" not in json.dumps(headers) and "ours-1" not in text
    assert json.loads(text)["id"].startswith("chatcmpl-")


def test_metrics_speak_the_names_our_maps_read(server: LlamaServer) -> None:
    exposed = set(server.metrics())
    mapped = {m.metric for vocabulary, m in metric_maps() if vocabulary == "llamacpp"}
    assert mapped - exposed == {"llamacpp:kv_cache_usage_ratio"}  # gone from current servers


def test_props_give_the_slot_count_as_the_batch_limit(server: LlamaServer) -> None:
    assert server.get_json("/props")["total_slots"] == SLOTS
    assert probe(server.url) == (SLOTS, "llama.cpp /props total_slots")
