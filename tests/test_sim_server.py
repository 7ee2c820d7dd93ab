"""The simulator over real sockets: OpenAI client, formats, keep-alive, errors, trace, CLI."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from urllib.parse import urlparse

import openai
import pytest

from locust_llm.sim.testing import running_sim
from locust_llm.sim.trace import read_trace

FAST = {"step_overhead_s": 0.0, "zero_cost": True}


def post(url: str, path: str, body: object, raw: bytes | None = None) -> tuple[int, dict, bytes]:
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    data = raw if raw is not None else json.dumps(body).encode()
    conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    out = resp.status, dict(resp.getheaders()), resp.read()
    conn.close()
    return out


def events(payload: bytes) -> list[str]:
    return [line[6:] for line in payload.decode().split("\n\n") if line.startswith("data: ")]


def test_openai_client_streams_and_reads_usage() -> None:
    with running_sim(**FAST) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
        stream = client.chat.completions.create(
            model="mistral-7b",
            messages=[{"role": "user", "content": "hello there"}],
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert chunks[0].choices[0].delta.role == "assistant"
        assert chunks[-1].usage.completion_tokens == 12 and chunks[-1].usage.prompt_tokens == 4
        assert chunks[-2].choices[0].finish_reason == "length"
        assert len(text.split()) == 12
        full = client.chat.completions.create(
            model="mistral-7b",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=5,
            extra_body={"ignore_eos": True},
        )
        assert (
            full.usage.completion_tokens == 5 and len(full.choices[0].message.content.split()) == 5
        )
        comp = client.completions.create(
            model="mistral-7b", prompt="a b c", max_tokens=3, extra_body={"ignore_eos": True}
        )
        assert comp.object == "text_completion" and comp.usage.prompt_tokens == 3
        assert [m.id for m in client.models.list()] == ["mistral-7b"]


def test_keep_alive_and_stream_options() -> None:
    with running_sim(tokens_per_chunk=3, **FAST) as url:
        u = urlparse(url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        sockets = set()
        for _ in range(3):
            body = {
                "messages": [{"role": "user", "content": "x"}],
                "max_completion_tokens": 7,
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            }
            conn.request("POST", "/v1/chat/completions", body=json.dumps(body))
            resp = conn.getresponse()
            evs = events(resp.read())
            sockets.add(id(conn.sock))
            assert resp.status == 200 and evs[-1] == "[DONE]"
            objs = [json.loads(e) for e in evs[:-1]]
            assert all("usage" in o and o["usage"] is not None for o in objs)
            content = [o for o in objs if o["choices"] and o["choices"][0]["delta"].get("content")]
            assert [o["usage"]["completion_tokens"] for o in content] == [3, 6, 7]
        assert len(sockets) == 1  # one connection served all three
        conn.close()


def test_output_length_distribution_and_max_tokens() -> None:
    with running_sim(output_len="fixed:5", **FAST) as url:
        body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 50}
        _, _, data = post(url, "/v1/chat/completions", body)
        reply = json.loads(data)
        assert reply["usage"]["completion_tokens"] == 5
        assert reply["choices"][0]["finish_reason"] == "stop"
        body["max_tokens"] = 3
        reply = json.loads(post(url, "/v1/chat/completions", body)[2])
        assert reply["usage"]["completion_tokens"] == 3
        assert reply["choices"][0]["finish_reason"] == "length"


def test_same_seed_same_answers() -> None:
    def answers(seed: int) -> list[str]:
        with running_sim(seed=seed, **FAST) as url:
            body = {"messages": [{"role": "user", "content": "x"}]}
            return [
                json.loads(post(url, "/v1/chat/completions", body)[2])["choices"][0]["message"][
                    "content"
                ]
                for _ in range(3)
            ]

    first = answers(11)
    assert first == answers(11)
    assert first != answers(12)


@pytest.mark.parametrize(
    ("path", "body", "status", "needle"),
    [
        ("/v1/chat/completions", {"messages": []}, 400, "messages"),
        ("/v1/chat/completions", {"model": "gpt-x", "messages": [{"role": "user"}]}, 404, "gpt-x"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "a"}], "max_tokens": 0},
            400,
            "max_tokens",
        ),
        ("/v1/completions", {"prompt": 5}, 400, "prompt"),
        ("/v1/chat/completions", b"{not json", 400, "not valid JSON"),
        ("/v1/chat/completions", [1, 2], 400, "JSON object"),
        ("/v1/nothing", {}, 404, "no route"),
        ("/health", {}, 405, "GET"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "a"}], "max_tokens": 5000},
            400,
            "whole cache holds",
        ),
    ],
)
def test_bad_requests_get_openai_errors(path: str, body: object, status: int, needle: str) -> None:
    with running_sim(num_gpu_blocks_override=64, **FAST) as url:
        raw = body if isinstance(body, bytes) else None
        code, _, data = post(url, path, body, raw)
        err = json.loads(data)["error"]
        assert code == status and needle in err["message"] and err["code"] == status
        with urllib.request.urlopen(url + "/health", timeout=5) as health:
            assert health.status == 200  # still alive


def test_oom_mode_answers_cuda_out_of_memory() -> None:
    with running_sim(num_gpu_blocks_override=64, oom=True, **FAST) as url:
        body = {"messages": [{"role": "user", "content": "a"}], "max_tokens": 5000}
        code, _, data = post(url, "/v1/chat/completions", body)
        assert code == 500 and "CUDA out of memory" in json.loads(data)["error"]["message"]


def test_metrics_and_trace(tmp_path) -> None:
    trace = tmp_path / "t.jsonl"
    with running_sim(trace_path=str(trace), **FAST) as url:
        for stream in (True, False):
            body = {
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4,
                "ignore_eos": True,
                "stream": stream,
            }
            assert post(url, "/v1/chat/completions", body)[0] == 200
        text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    assert 'vllm:generation_tokens_total{model_name="mistral-7b"} 8.0' in text
    assert 'vllm:e2e_request_latency_seconds_count{model_name="mistral-7b"} 2.0' in text
    assert "nvml_gpu_utilization_ratio" in text and 'gpu="0"' in text
    assert "nvml_memory_used_bytes" in text and "nvml_power_usage_watts" in text
    records = read_trace(trace)
    assert [r["tokens_sent"] for r in records] == [4, 4]
    for r in records:
        assert r["arrival"] <= r["admission"] <= r["first_token"] <= r["last_token"]
        assert r["outcome"] == "ok" and r["preemptions"] == 0


def test_client_disconnect_aborts_the_request(tmp_path) -> None:
    trace = tmp_path / "t.jsonl"
    with running_sim(trace_path=str(trace), step_overhead_s=0.01, zero_cost=True) as url:
        u = urlparse(url)
        body = json.dumps(
            {
                "messages": [{"role": "user", "content": "x"}],
                "max_tokens": 1000,
                "ignore_eos": True,
                "stream": True,
            }
        ).encode()
        with socket.create_connection((u.hostname, u.port), timeout=5) as s:
            s.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%b"
                % (len(body), body)
            )
            assert s.recv(100).startswith(b"HTTP/1.1 200")
        for _ in range(100):
            metrics = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
            if 'vllm:num_requests_running{model_name="mistral-7b"} 0.0' in metrics:
                break
        else:
            raise AssertionError("aborted request still running")
    (record,) = read_trace(trace)
    assert record["outcome"] == "aborted" and record["tokens_sent"] < 1000


def test_cli_prints_url_first_and_stops(tmp_path) -> None:
    cfg = tmp_path / "sim.toml"
    cfg.write_text('served_model_name = "twin"\nzero_cost = true\n')
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "locust_llm.cli",
            "sim",
            "--port",
            "0",
            "--config",
            str(cfg),
            "--seed",
            "3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        models = json.loads(urllib.request.urlopen(url + "/v1/models", timeout=5).read())
        assert models["data"][0]["id"] == "twin"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "KV blocks" in err


def test_cli_bad_input_exits_2() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "locust_llm.cli", "sim", "--fault", "boom:1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "--fault" in out.stderr and len(out.stderr.splitlines()) == 1
