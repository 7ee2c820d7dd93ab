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
* the peak RSS of the process that read the answers (``VmHWM``, reset when the load starts and
  read at each request event by a helper locustfile) grows by less than :data:`RSS_SLACK`;
  with the limit raised to 64 MiB the same measure sees the client hold the 64 MiB it read
  (the control that the measure can fail). A master and a worker: the worker is not lost.

Measured here (growth over the RSS at the load's start, kernel / ghc): normal answers 0.2 /
0.2 MiB; two endless lines at the 1 MiB default 1.3 / 3.3 MiB; two bodies at an 8 MiB limit
7.9 / 8.3 MiB (at the 64 MiB default 67 / 74 MiB); one line at a 64 MiB limit 127 / 192 MiB.
Before the limits the kernel transport peaked at 704 MiB on the two 128 MiB lines (189 MiB now)
and recorded them as ``stream_broken`` (the probe's 2 GB line took a ghc worker to 8.3 GB).
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pandas as pd
import pytest
from cluster_utils import LOCUST, ROOT
from conftest import run_distributed
from reliability_servers import Quiet, serving

from locust_llm.client.discovery import discover_model
from locust_llm.errors import InputError
from locust_llm.options.config import ClientOptions

pytestmark = pytest.mark.slow

#: the size of each huge answer (never sent whole: the client hangs up at its limit)
HUGE_BYTES = 128 << 20
#: how much a run's peak RSS may grow while it reads the huge answers: measured 1-8 MiB (an
#: 8 MiB body read in pieces is the most), 64 MiB read of a line already 127 MiB or more; the
#: slack sits between, with room for the allocator's noise on a busy machine
RSS_SLACK = 48 << 20
REQUESTS = 8
HUGE_AT = frozenset({2, 5})  # which requests (1-based, in arrival order) get a huge answer
BLOCK = 64 << 10

_HWM_LOCUSTFILE = '''"""Test helper: this process's RSS when the load started and its peak RSS while
it sent requests (kB each, into peaks/ beside it). The peak is reset at test_start (clear_refs) and
read at every request event, so the run dir's writing at the end is not counted."""
import os

from locust import events

_kb = {"start": 0, "peak": 0}


def _status_kb(field):
    with open("/proc/self/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith(field)))


@events.test_start.add_listener
def _note_start(environment, **_kw):
    if not _kb["start"]:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # VmHWM := VmRSS
        _kb["start"] = _kb["peak"] = _status_kb("VmRSS:")


@events.request.add_listener
def _note_peak(**_kw):
    _kb["peak"] = max(_kb["peak"], _status_kb("VmHWM:"))


@events.quitting.add_listener
def _write_peak(environment, **_kw):
    role = type(environment.runner).__name__
    peaks = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peaks")
    with open(os.path.join(peaks, f"{role}-{os.getpid()}"), "w") as out:
        out.write(f"{_kb['start']} {_kb['peak']}")
'''


def _growth(directory: Path) -> dict[str, int]:
    """Each process's peak RSS over its RSS when the load started (bytes), by runner class
    (LocalRunner, MasterRunner, WorkerRunner)."""
    growth = {}
    for path in directory.iterdir():
        start_kb, peak_kb = (int(v) for v in path.read_text().split())
        assert start_kb > 0, path  # test_start came
        growth[path.name.split("-")[0]] = (peak_kb - start_kb) * 1024
    return growth


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


def _hwm_env(tmp_path: Path) -> tuple[Path, Path]:
    """The helper locustfile and the folder its processes write their peaks to."""
    helper, peaks = tmp_path / "hwm_locustfile.py", tmp_path / "peaks"
    helper.write_text(_HWM_LOCUSTFILE)
    peaks.mkdir()
    return helper, peaks


def _run(
    tmp_path: Path, transport: str, huge_at: frozenset[int], *extra: str
) -> tuple[pd.DataFrame, int, Plan]:
    """One single-process run of REQUESTS requests by 2 users: its records, its peak RSS in
    bytes, and what the server saw."""
    helper, peaks = _hwm_env(tmp_path)
    run_dir = tmp_path / "run"
    plan = Plan(huge_at)
    with serving(misbehaving(plan)) as url:
        out = subprocess.run(
            [LOCUST, "-f", f"locustfiles/sweep.py,{helper}", "--headless", "--host", url,
             "--llm-model", "m", "--llm-concurrency", "2", "--llm-stage-requests",
             str(REQUESTS), "--llm-run-dir", str(run_dir), "--llm-server-metrics", "none",
             "--llm-transport", transport, "--stop-timeout", "5", *extra],
            cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    # Locust exits 1 when any request failed
    assert out.returncode == (1 if huge_at else 0), (out.stdout[-1500:], out.stderr[-3000:])
    return pd.read_parquet(run_dir / "requests.parquet"), _growth(peaks)["LocalRunner"], plan


@pytest.fixture(scope="module", params=["kernel", "ghc"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


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
    transport: str, extra: tuple[str, ...], message: str, tmp_path: Path
) -> None:
    records, growth, plan = _run(tmp_path, transport, HUGE_AT, *extra)
    assert len(records) == REQUESTS == plan.posts  # every request sent is one record
    bad = records[~records["ok"]]
    assert len(bad) == len(HUGE_AT) and (bad["error_kind"] == "bad_payload").all()
    assert bad["error_message"].str.contains(message).all(), bad["error_message"].tolist()
    assert records["ok"].sum() == REQUESTS - len(HUGE_AT)  # the other requests went on
    assert plan.reused_after_huge == 0  # a huge answer's connection carried nothing more
    assert len(plan.sent) == len(HUGE_AT) and max(plan.sent) < HUGE_BYTES // 2, plan.sent
    assert growth < RSS_SLACK, growth >> 20


def test_a_raised_limit_reads_that_much_and_the_measure_sees_it(
    transport: str, tmp_path: Path
) -> None:
    """The control of the RSS measure, and of the option: with the line limit raised to 64 MiB
    the client reads 64 MiB of the endless line before it gives up, and its peak RSS grows by
    more than RSS_SLACK."""
    records, growth, _plan = _run(tmp_path, transport, frozenset({2}), "--llm-max-event-bytes",
                                  "64MiB")  # fmt: skip
    bad = records[~records["ok"]]
    assert len(bad) == 1 and bad["error_message"].iloc[0].startswith(
        "SSE line over the 64 MiB limit (--llm-max-event-bytes): 67108865 bytes without"
    ), bad["error_message"].tolist()
    assert growth > RSS_SLACK, growth >> 20


def test_a_worker_reading_huge_lines_keeps_serving_and_is_not_lost(
    transport: str, tmp_path: Path
) -> None:
    """The probe's case: a master and a worker, the worker's users read endless lines (before,
    its loop stalled, the master gave it up for lost and the run wrote no record)."""
    helper, peaks = _hwm_env(tmp_path)
    run_dir = tmp_path / "run"
    plan = Plan(HUGE_AT)
    with serving(misbehaving(plan)) as url:
        code, output = run_distributed(
            f"locustfiles/sweep.py,{helper}",
            ["--host", url, "--llm-model", "m", "--llm-concurrency", "2",
             "--llm-stage-requests", str(REQUESTS), "--llm-run-dir", str(run_dir),
             "--llm-server-metrics", "none", "--llm-transport", transport,
             "--stop-timeout", "5"],
            workers=1, worker_cwd=tmp_path,
        )  # fmt: skip
    assert code == 1, output[-3000:]  # Locust's exit code when a request failed
    records = pd.read_parquet(run_dir / "requests.parquet")
    assert len(records) == REQUESTS == plan.posts and records["ok"].sum() == REQUESTS - 2
    assert (records[~records["ok"]]["error_kind"] == "bad_payload").all()
    assert json.loads((run_dir / "run.json").read_text()).get("lost_workers", {}) == {}
    assert plan.reused_after_huge == 0
    growth = _growth(peaks)
    assert growth["WorkerRunner"] < RSS_SLACK, growth


class EndlessModels(Quiet):
    """Answers GET /v1/models with a chunked JSON body that never ends (up to HUGE_BYTES)."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        block = b"%x\r\n%s\r\n" % (BLOCK, b" " * BLOCK)
        try:
            self.wfile.write(b"1\r\n{\r\n")
            for _ in range(HUGE_BYTES // BLOCK):
                self.wfile.write(block)
        except OSError:  # the client hung up
            pass


def test_model_discovery_refuses_a_models_list_past_the_body_limit() -> None:
    with serving(EndlessModels) as url, pytest.raises(InputError) as err:
        discover_model(url, ClientOptions())
    assert f"body over {64 << 20} bytes" in str(err.value), str(err.value)
