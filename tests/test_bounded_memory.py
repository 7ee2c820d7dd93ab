"""Bounded memory whatever a server sends: the real ``locust`` command against a server that
answers some requests with one endless SSE line (no newline) or one huge non-streamed body.

The server (standard library, on 127.0.0.1 port 0) generates those answers on the fly, 64 KiB at
a time, so it holds none of them; it counts what it sent before the client hung up and the
connection each request came on. Each case runs on both transports (``kernel``, our HTTP/1.1
reader; ``ghc``, geventhttpclient) and checks:

* each huge answer is exactly one ``bad_payload`` record naming the size and the limit, and
  every other request (the same users, the same process) succeeds;
* no request came on a connection after that connection carried a huge answer (dropped, not
  reused), and the client hung up long before the end of the answer;
* the peak RSS of the process that read the answers (``VmHWM``, reported by a locustfile at
  Locust's ``quitting``) is within :data:`RSS_SLACK` of the same run with only normal answers;
  an unbounded read holds the whole :data:`HUGE_BYTES` answer (before the fix: 4x it on ghc).
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
from pathlib import Path

import pandas as pd
import pytest
from cluster_utils import LOCUST, ROOT
from reliability_servers import Quiet, serving

pytestmark = pytest.mark.slow

#: the size of each huge answer (never sent whole: the client hangs up at its limit)
HUGE_BYTES = 128 << 20
#: what the huge run's peak RSS may exceed the normal run's by. Measured on this machine: the
#: huge runs peak 0-12 MiB above the normal ones (the 8 MiB body limit's pieces, allocator
#: noise); reading the whole 128 MiB answer adds >= 128 MiB.
RSS_SLACK = 48 << 20
REQUESTS = 8
HUGE_AT = frozenset({2, 5})  # which requests (1-based, in arrival order) get a huge answer
BLOCK = 64 << 10

_HWM_LOCUSTFILE = '''"""Test helper: prints this process's peak RSS when it quits."""
from locust import events


@events.quitting.add_listener
def _print_hwm(environment, **_kw):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                print("LLM-TEST-HWM-KB", line.split()[1], flush=True)
'''
_HWM_LINE = re.compile(r"^LLM-TEST-HWM-KB (\d+)$", re.M)

_TOKENS = (b'{"choices":[{"index":0,"delta":{"content":"hi"}}]}',
           b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}')  # fmt: skip
_WHOLE = json.dumps({
    "choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
}).encode()  # fmt: skip


class Plan:
    """What the server answers, and what it saw (shared by its handler threads)."""

    def __init__(self, huge_at: frozenset[int]) -> None:
        self.huge_at = huge_at
        self.lock = threading.Lock()
        self.posts = 0
        self.sent: list[int] = []  # bytes of each huge answer written before the client left
        self.reused_after_huge = 0  # requests on a connection that had carried a huge answer

    def next(self, poisoned: bool) -> int:
        with self.lock:
            self.posts += 1
            self.reused_after_huge += poisoned
            return self.posts


def misbehaving(plan: Plan) -> type[Quiet]:
    """A handler: normal answers (SSE, or JSON when the request says ``"stream": false``), and
    on the planned requests one endless SSE line or one huge JSON body, chunked."""

    class Handler(Quiet):
        poisoned = False

        def do_POST(self) -> None:
            streamed = json.loads(self.read_body()).get("stream", False)
            n = plan.next(self.poisoned)
            if n not in plan.huge_at:
                if streamed:
                    body = b"".join(b"data: " + t + b"\n\n" for t in _TOKENS)
                    self.reply(200, "text/event-stream", body + b"data: [DONE]\n\n")
                else:
                    self.reply(200, "application/json", _WHOLE)
                return
            self.poisoned = True  # this connection must not carry another request
            self.close_connection = True
            if streamed:
                head = b'data: {"choices":[{"index":0,"delta":{"content":"'
                plan.sent.append(self._chunked("text/event-stream", head))
            else:
                head = b'{"choices":[{"index":0,"message":{"content":"'
                plan.sent.append(self._chunked("application/json", head))

        def _chunked(self, content_type: str, head: bytes) -> int:
            """Write ``head`` and x's up to HUGE_BYTES in 64 KiB chunks; the bytes written."""
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            block = b"%x\r\n%s\r\n" % (BLOCK, b"x" * BLOCK)
            sent = 0
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(head), head))
                while sent < HUGE_BYTES:
                    self.wfile.write(block)
                    sent += BLOCK
                self.wfile.write(b"1\r\n}\r\n0\r\n\r\n")
            except OSError:  # the client hung up: what we want
                pass
            return sent

    return Handler


def _run(
    tmp_path: Path, transport: str, huge_at: frozenset[int], *extra: str
) -> tuple[pd.DataFrame, int, Plan]:
    """One single-process run of REQUESTS requests by 2 users: its records, its peak RSS in
    bytes, and what the server saw."""
    hwm_file = tmp_path / "hwm_locustfile.py"
    hwm_file.write_text(_HWM_LOCUSTFILE)
    run_dir = tmp_path / f"run-{transport}-{len(huge_at)}-{len(extra)}"
    plan = Plan(huge_at)
    with serving(misbehaving(plan)) as url:
        out = subprocess.run(
            [LOCUST, "-f", f"locustfiles/sweep.py,{hwm_file}", "--headless", "--host", url,
             "--llm-model", "m", "--llm-concurrency", "2", "--llm-stage-requests",
             str(REQUESTS), "--llm-run-dir", str(run_dir), "--llm-server-metrics", "none",
             "--llm-transport", transport, "--stop-timeout", "5", *extra],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    found = _HWM_LINE.findall(out.stdout)
    # Locust exits 1 when any request failed
    assert out.returncode == (1 if huge_at else 0) and found, (
        out.stdout[-1500:],
        out.stderr[-3000:],
    )
    return pd.read_parquet(run_dir / "requests.parquet"), int(found[-1]) * 1024, plan


@pytest.fixture(scope="module", params=["kernel", "ghc"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def normal_rss(transport: str, tmp_path_factory: pytest.TempPathFactory) -> int:
    """The peak RSS of the same run with normal answers only (streamed)."""
    records, hwm, plan = _run(tmp_path_factory.mktemp("normal"), transport, frozenset())
    assert len(records) == REQUESTS and records["ok"].all() and plan.posts == REQUESTS
    return hwm


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ((), r"^SSE line over the 1 MiB limit \(--llm-max-event-bytes\): 1048577 bytes without "
             r"a newline; starts b'data: \{\"choices\""),
        (("--llm-no-stream", "--llm-max-body-bytes", "8MiB"),
         r"^response body over the 8 MiB limit \(--llm-max-body-bytes\): 8388609 bytes read$"),
    ],
    ids=["sse-line", "json-body"],
)  # fmt: skip
def test_a_huge_answer_is_one_bad_payload_and_memory_stays_bounded(
    transport: str, normal_rss: int, extra: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    records, hwm, plan = _run(tmp_path, transport, HUGE_AT, *extra)
    assert len(records) == REQUESTS == plan.posts  # every request sent is one record
    bad = records[~records["ok"]]
    assert len(bad) == len(HUGE_AT) and (bad["error_kind"] == "bad_payload").all()
    assert bad["error_message"].str.contains(message).all(), bad["error_message"].tolist()
    assert records["ok"].sum() == REQUESTS - len(HUGE_AT)  # the other requests went on
    assert plan.reused_after_huge == 0  # a huge answer's connection carried nothing more
    assert len(plan.sent) == len(HUGE_AT) and max(plan.sent) < HUGE_BYTES // 2, plan.sent
    assert hwm - normal_rss < RSS_SLACK, (hwm >> 20, normal_rss >> 20)
