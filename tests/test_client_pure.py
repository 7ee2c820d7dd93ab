"""The client's pure parts in-process: no Locust/gevent imports, options, settings, messages,
secret masking and the API adapter registry (with a toy adapter registered from here)."""

from __future__ import annotations

import json
import subprocess
import sys
from argparse import Namespace
from typing import Any, ClassVar

import pytest

from locust_llm.client import sse
from locust_llm.client.apis.base import (
    ApiAdapter,
    BodyRequest,
    get_api,
    register_api,
    registered_apis,
)
from locust_llm.client.messages import PermitAsk, PermitGrant, RecordBatch, StageMessage
from locust_llm.client.recorder import Recorder
from locust_llm.client.runinfo import masked_command_line
from locust_llm.errors import InputError
from locust_llm.metrics import FAILURE_KINDS, RECORD_FIELDS, RequestRecord
from locust_llm.options import config
from locust_llm.options import table as options_module
from locust_llm.options.settings import resolve_settings
from locust_llm.rundir.layout import is_cpu_warning, warning_text
from locust_llm.workloads.datasets import Prompt

#: The Locust-facing modules: the only ones allowed to import locust or gevent (``webui`` is the
#: web tab's package on the ``hygiene`` branch).
LOCUST_FACING = (
    "locust_llm.client.user",
    "locust_llm.client.shapes",
    "locust_llm.client.workload_users",
    "locust_llm.client.shares",
    "locust_llm.client.sweep_locustfile",
    "locust_llm.client.runtime",
    "locust_llm.client.transport",
    "locust_llm.client.discovery",
    "locust_llm.client.http11",
    "locust_llm.client.ghc_response",
    "locust_llm.client.kernel_transport",
    "locust_llm.client.first_bytes",
    "locust_llm.client.ready_reader",
    "locust_llm.client.hub_local",
    "locust_llm.client.events",
    "locust_llm.client.lifecycle",
    "locust_llm.client.webui_state",
    "locust_llm.webui",
)

#: Runs in a fresh interpreter: imports each module of the package in a forked child of a
#: process that never holds locust/gevent/geventhttpclient, and prints which of them pulled one
#: in. A module whose child found none is then imported by the parent too, so later children
#: inherit it and its dependencies (pandas, pyarrow ...) instead of importing them afresh (7 s
#: instead of 20-35 s): what a child sees is unchanged, since everything the parent holds was
#: shown clean, and the parent checks that it stays so.
_PROBE = r"""
import json, os, pkgutil, sys
import locust_llm
LOCUST = {"locust", "gevent", "geventhttpclient"}
names = ["locust_llm"] + [m.name for m in pkgutil.walk_packages(locust_llm.__path__, "locust_llm.")]
found = {}
for name in names:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            __import__(name)
            roots = {m.split(".")[0] for m in sys.modules}
            bad = sorted(roots & LOCUST)
            out = json.dumps(bad)
        except BaseException as exc:
            out = json.dumps(["import failed: %s: %s" % (type(exc).__name__, exc)])
        os.write(write, out.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        found[name] = json.loads(f.read() or '["no answer"]')
    os.waitpid(pid, 0)
    if found[name] == []:
        __import__(name)
        held = {m.split(".")[0] for m in sys.modules} & LOCUST
        assert not held, "the parent imported %s with %s" % (name, sorted(held))
print(json.dumps(found))
"""


def test_nothing_outside_the_locust_facing_modules_imports_locust_or_gevent() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    found: dict[str, list[str]] = json.loads(out.stdout)
    assert len(found) > 40 and "locust_llm.client.gate" in found  # every module was probed
    facing = {m for m in found if m.startswith(LOCUST_FACING)}
    offenders = {m: v for m, v in found.items() if v and m not in facing}
    assert not offenders, offenders
    # and the Locust-facing ones really are what the list says (the probe sees Locust)
    assert "locust" in found["locust_llm.client.user"] and found["locust_llm.client.gate"] == []
    assert found["locust_llm.client.stream"] == []  # the per-token read loop, pure


def test_the_lazy_root_exports_llm_user_and_imports_locust_only_then() -> None:
    code = (
        "import sys, locust_llm; before = 'locust' in sys.modules; "
        "from locust_llm import LLMUser, llm_events; "
        "print(before, 'locust' in sys.modules, LLMUser.__name__, "
        "sorted(vars(llm_events)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split(None, 3)[:3] == ["False", "True", "LLMUser"]
    assert "first_token" in out.stdout and "request_done" in out.stdout


def _namespace(**overrides: Any) -> Namespace:
    ns = options_module.defaults()
    for key, value in overrides.items():
        setattr(ns, key, value)
    return ns


def test_client_options_read_every_flag_once_and_check_bad_ones() -> None:
    opts = config.from_namespace(
        _namespace(
            llm_header=["X-A: 1", "X-B:two"],
            llm_extra_body='{"top_p": 0.5}',
            llm_hosts="http://a:1/, http://b:2",
            llm_api_key="sk-1",
            llm_rate="1,2",
        )
    )
    assert opts.headers == (("X-A", "1"), ("X-B", "two"))
    assert opts.extra_body == {"top_p": 0.5}
    assert opts.hosts == ("http://a:1", "http://b:2")
    assert opts.open_loop and opts.stream
    headers = opts.request_headers()
    assert headers["Authorization"] == "Bearer sk-1" and headers["X-B"] == "two"
    assert "sk-1" not in repr(opts)  # the key stays out of logs
    with pytest.raises(AttributeError):
        opts.model = "x"  # type: ignore[misc]  # frozen
    for bad, message in (
        (
            {"llm_header": ["no colon"]},
            "--llm-header (the 1st one, 8 characters, not shown): expected 'Name: value'",
        ),
        ({"llm_extra_body": "[1]"}, "--llm-extra-body must be a JSON object"),
        ({"llm_burstiness": -1.0}, "--llm-burstiness -1: expected >= 0 (1 = Poisson)"),
    ):
        with pytest.raises(InputError) as err:
            config.from_namespace(_namespace(**bad))
        assert str(err.value) == message
    assert config.from_namespace(None) == config.ClientOptions()  # the defaults agree


def test_class_attributes_override_options_and_the_command_line_host_wins() -> None:
    opts = config.from_namespace(_namespace(llm_model="m-cli", llm_max_tokens="64"))
    plain = resolve_settings(opts, host="http://class:1/")
    assert (
        plain.model == "m-cli" and plain.max_tokens == "64" and plain.hosts == ("http://class:1",)
    )
    own = resolve_settings(
        opts, host="http://class:1", model="m-class", api="completions", max_tokens=8,
        input_len="uniform:10,20", read_timeout_s=3.0,
    )  # fmt: skip
    assert (own.model, own.api, own.max_tokens, own.input_len) == (
        "m-class", "completions", "8", "uniform:10,20",
    )  # fmt: skip
    assert own.read_timeout_s == 3.0 and own.connect_timeout_s == opts.connect_timeout_s
    spread = config.from_namespace(_namespace(llm_hosts="http://x:1,http://y:2"))
    assert resolve_settings(spread, host="http://class:1").hosts == ("http://x:1", "http://y:2")


def test_messages_survive_their_wire_form() -> None:
    for msg in (
        StageMessage(stage=2, quota=0, rate=8.0, workers=2, start=1.5, open_loop=True),
        PermitAsk(worker="w1", stage=3, n=4),
        PermitGrant(stage=3, n=0),
        RecordBatch(worker="w", records=[(1, "a")], sent=5, recorded=4),
    ):
        wire = json.loads(json.dumps(msg.to_dict()))  # lists for tuples, as msgpack gives
        assert type(msg).from_dict(wire) == msg
    assert StageMessage(stage=0, rate=9.0, workers=3).rate_share == 3.0
    assert StageMessage.from_dict({"stage": 1}).quota is None


def test_the_recorder_counts_what_ends_a_stage_without_its_reader_scanning_rows() -> None:
    recorder = Recorder(is_worker=False)
    for stage, kind in ((0, ""), (0, "http_5xx"), (0, "cancelled"), (1, ""), (0, "client_error")):
        recorder.add(RequestRecord(request_id="r", endpoint="/e", stage=stage, error_kind=kind))
    assert recorder.ended_in(0) == 3 and recorder.ended_in(1) == 1 and recorder.ended_in(2) == 0
    worker = Recorder(is_worker=True)
    worker.request_started()
    worker.add(RequestRecord(request_id="w", endpoint="/e", stage=1))
    recorder.receive_batch(RecordBatch.from_dict(worker.take_batch("w1").to_dict()))
    assert recorder.ended_in(1) == 2 and recorder.values_of("endpoint") == {"/e"}
    assert recorder.count == 6 and len(recorder.unflushed[-1]) == len(RECORD_FIELDS)
    recorder.clear()
    assert recorder.ended_in(0) == 0 and not recorder.unflushed and not recorder.count


def test_client_errors_are_not_server_failures() -> None:
    assert "client_error" not in FAILURE_KINDS and "cancelled" not in FAILURE_KINDS


def test_secrets_are_masked_in_the_recorded_command_line() -> None:
    argv = [
        "locust", "--llm-api-key", "sk-a", "--llm-api-key=sk-b", "--llm-header",
        "api-key: sk-c", "--llm-header=X-T: sk-d", "Authorization: Bearer sk-e", "--llm-model", "m",
    ]  # fmt: skip
    masked = masked_command_line(argv)
    assert not any(s in " ".join(masked) for s in ("sk-a", "sk-b", "sk-c", "sk-d", "sk-e"))
    assert (
        masked[2] == "***" and masked[5] == "api-key: ***" and masked[6] == "--llm-header=X-T: ***"
    )
    assert masked[-2:] == ["--llm-model", "m"]


def test_cpu_warnings_carry_a_code_the_report_reads() -> None:
    text = warning_text("cpu_high_worker")
    assert text.startswith("cpu_high_worker: ") and is_cpu_warning(text)
    assert not is_cpu_warning("telemetry: a scrape failed; the CPU went above 90%")


# ---- API adapters --------------------------------------------------------------------------------
PROMPT = Prompt(messages=[{"role": "user", "content": "hi"}], prompt="hi", input_tokens_estimate=1)


def test_chat_and_completions_build_their_bodies() -> None:
    request = BodyRequest(
        model="m", prompt=PROMPT, max_tokens=9, temperature=0.2, ignore_eos=True,
        extra_body={"top_k": 3},
    )  # fmt: skip
    chat = get_api("chat").build_body(request)
    assert chat == {
        "model": "m", "messages": PROMPT.messages, "stream": True,
        "stream_options": {"include_usage": True}, "max_tokens": 9, "temperature": 0.2,
        "ignore_eos": True, "top_k": 3,
    }  # fmt: skip
    plain = BodyRequest(model="m", prompt=PROMPT, max_tokens=4, stream=False,
                        max_tokens_field="max_completion_tokens")  # fmt: skip
    completions = get_api("completions").build_body(plain)
    assert completions == {"model": "m", "prompt": "hi", "stream": False,
                           "max_completion_tokens": 4, "temperature": 0.0}  # fmt: skip
    assert get_api("chat").path == "/v1/chat/completions"
    assert get_api("completions").path == "/v1/completions"
    assert get_api("chat").classify(b"[DONE]")[0] == sse.KIND_DONE


def test_an_unknown_api_names_the_registered_ones() -> None:
    with pytest.raises(InputError) as err:
        get_api("nope")
    assert str(err.value).startswith("API 'nope' is not registered; registered: ")
    assert "chat" in str(err.value) and "completions" in str(err.value)


@register_api
class ToyEmbeddings(ApiAdapter):
    """A toy API of a shape OpenAI's chat parser refuses: no ``choices``, an end event of its
    own instead of ``[DONE]``."""

    name: ClassVar[str] = "toy"
    path: ClassVar[str] = "/v1/toy"

    def build_body(self, request: BodyRequest) -> dict[str, Any]:
        return {"model": request.model, "input": request.prompt.prompt}

    def classify(self, payload: bytes) -> tuple[int, sse.Chunk | None]:
        event = json.loads(payload)
        if event["type"] == "done":
            return sse.KIND_DONE, None
        return sse.KIND_CHUNK, sse.Chunk(content=bool(event.get("text")))

    def parse_body(self, body: bytes) -> sse.Chunk:
        obj = json.loads(body)
        return sse.Chunk(content=bool(obj["data"]), prompt_tokens=obj["usage"]["prompt_tokens"])


def test_a_new_api_is_one_registered_class() -> None:
    assert "toy" in registered_apis()
    toy = get_api("toy")
    assert toy.build_body(BodyRequest(model="e", prompt=PROMPT, max_tokens=1)) == {
        "model": "e", "input": "hi",
    }  # fmt: skip
    kinds = [toy.classify(p)[0] for p in (b'{"type": "delta", "text": "a"}', b'{"type": "done"}')]
    assert kinds == [sse.KIND_CHUNK, sse.KIND_DONE]
    body = b'{"data": [[0.1]], "usage": {"prompt_tokens": 2}}'
    assert toy.parse_body(body).prompt_tokens == 2
    with pytest.raises(ValueError):  # the chat adapter refuses it: the seam is needed
        get_api("chat").parse_body(body)
    with pytest.raises(TypeError):
        register_api(type("Nameless", (ApiAdapter,), {}))
