"""Redaction, in-process: every form of every secret is masked before anything is cut.

Hypothesis generates keys with quotes, backslashes, ``%``, ``+``, ``/`` and non-ASCII letters,
embeds them in text in each form a server or a serializer may write them in, and cuts that text
anywhere; the forms the test checks are spelled here, independently of the redactor's own list.
The client's read loop (:mod:`locust_llm.client.stream`) is driven with scripted answers whose
bodies echo the key across every limit it cuts at (the error body's, the quoted head's, the
record's message): what is left of the filler around the key is all that remains.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import logging
import re
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redaction_forms import assert_no_form, assert_no_tail, forms

from locust_llm import cli
from locust_llm.client.apis.base import get_api
from locust_llm.client.redact import (
    MASK,
    MIN_SECRET_LEN,
    RedactingFilter,
    Redactor,
    argument_secrets,
    clip,
    masked_url,
    redactor_for,
    secrets_of,
)
from locust_llm.client.runinfo import masked_command_line, new_run_info
from locust_llm.client.stream import (
    ERROR_BODY_LIMIT,
    HEAD_BYTES,
    LINE_LIMIT,
    MESSAGE_LIMIT,
    Exchange,
    StreamReader,
    read_to_record,
)
from locust_llm.launch.run_options import host_args, launch_redactor
from locust_llm.metrics import RequestRecord
from locust_llm.options import config

#: key characters: what breaks naive masking (quotes, backslash, escapes, non-ASCII, URL-special)
KEY_CHARS = st.sampled_from(list("abcXYZ0189-_\"'\\%+/=&:@üéß€\u4e2d\U0001f511\t"))
keys = st.text(KEY_CHARS, min_size=MIN_SECRET_LEN, max_size=24).filter(
    lambda k: k.strip() == k and not k.startswith("-")
)
FILLER = "."  # never in a key: what is left of a message once the key is masked


PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---- the redactor ------------------------------------------------------------------------------
@PROPERTY
@given(key=keys, before=st.text(max_size=20), after=st.text(max_size=20), which=st.integers(0, 7))
def test_every_form_of_a_key_is_masked_in_any_text(
    key: str, before: str, after: str, which: int
) -> None:
    form = sorted(forms(key))[which % len(forms(key))]
    out = Redactor([key])(before + form + after)
    assert_no_form(out, key)
    assert MASK in out


@PROPERTY
@given(key=keys, pad=st.integers(0, 40), cut=st.integers(0, 80), which=st.integers(0, 7))
def test_text_cut_before_it_was_masked_keeps_no_beginning_of_a_key(
    key: str, pad: int, cut: int, which: int
) -> None:
    form = sorted(forms(key))[which % len(forms(key))]
    text = (FILLER * pad + form + FILLER * 5)[:cut]
    out = Redactor([key])(text, truncated=True)
    assert_no_form(out, key)
    assert_no_tail(out, key)
    assert set(out) <= {FILLER, "*"}


@PROPERTY
@given(key=keys, pad=st.integers(0, 400), limit=st.integers(1, 400))
def test_masking_comes_before_the_cut(key: str, pad: int, limit: int) -> None:
    out = Redactor([key]).clip(FILLER * pad + key + FILLER * 3, limit)
    assert len(out) <= limit and set(out) <= {FILLER, "*"}
    assert MASK in out or len(out) <= pad  # a mask the cut would split is dropped whole


def test_a_header_value_masks_its_token_alone_and_a_basic_token_its_credentials() -> None:
    basic = base64.b64encode(b"alice:hunter2-pw").decode()
    opts = config.ClientOptions(
        headers=(("Authorization", "Bearer tok-ABCDEF"), ("Proxy-Authorization", f"Basic {basic}"))
    )
    redact = redactor_for(opts)
    assert redact("echo tok-ABCDEF") == f"echo {MASK}"
    assert redact("user alice:hunter2-pw, pw hunter2-pw") == f"user {MASK}, pw {MASK}"
    assert "Bearer" in redact("scheme Bearer stays")  # the scheme word is not a secret


def test_url_credentials_are_secrets_and_any_url_loses_them() -> None:
    opts = config.ClientOptions(
        hosts=("http://bob:p%40ss-word@a:1",), server_metrics="http://m:tok-metrics@b:2/metrics"
    )
    secrets = secrets_of(opts, ["https://carol:s3cret-pw@c/v1"])
    for value in ("bob:p%40ss-word", "p%40ss-word", "p@ss-word", "tok-metrics", "s3cret-pw"):
        assert value in secrets
    redact = Redactor(secrets)
    assert redact("password p@ss-word, token tok-metrics") == f"password {MASK}, token {MASK}"
    # a URL's credentials, known or not
    assert masked_url("x http://u:v@h:8/p?q=a@b y") == f"x http://{MASK}@h:8/p?q=a@b y"
    assert Redactor()("GET https://who:ever@h/x failed") == f"GET https://{MASK}@h/x failed"
    assert masked_url("http://h:8/p") == "http://h:8/p"


def test_a_short_secret_is_masked_by_position_not_by_value() -> None:
    redact = Redactor(["abc", "key-long"])
    assert redact.too_short == ("abc",)
    assert redact("abc and key-long") == f"abc and {MASK}"  # "abc" would mask ordinary text
    argv = ["locust", "--llm-api-key", "abc"]
    assert masked_command_line(argv, ["abc"]) == ["locust", "--llm-api-key", MASK]


def test_clip_never_splits_a_mask() -> None:
    assert clip(f"aaaa{MASK}bbb", 5) == "aaaa"
    assert clip(f"aaaa{MASK}bbb", 7) == f"aaaa{MASK}"
    assert clip("short", 10) == "short"


# ---- the read loop: answers echoing the key across every cut ------------------------------------
class Answer:
    """A response with a status, a content type and a body, read as the transports read."""

    def __init__(self, status: int, content_type: str, body: bytes) -> None:
        self.status_code = status
        self._type = content_type
        self._body = body

    def readline(self, sep: bytes = b"\n", limit: int = -1) -> bytes:
        end = self._body.find(sep)
        end = len(self._body) if end < 0 else end + len(sep)
        if limit >= 0:  # at most limit bytes, as the transports' readers return
            end = min(end, limit)
        line, self._body = self._body[:end], self._body[end:]
        return line

    def read(self, length: int = -1) -> bytes:
        length = len(self._body) if length < 0 else length
        data, self._body = self._body[:length], self._body[length:]
        return data

    def get(self, key: str, default: Any = None) -> Any:
        return self._type if key.lower() == "content-type" else default


def _read(answer: Answer, key: str) -> str:
    redact = Redactor([key])
    reader = StreamReader(get_api("chat"), redact=redact)
    ex = Exchange(RequestRecord(request_id="r", endpoint="/v1/chat/completions"), redact=redact)
    ex.stamp_send()
    record = read_to_record(reader, answer, ex)
    assert not record.ok
    return record.error_message


#: pads that put the key across the limits: the record's message, the error body, the head
PADS = st.one_of(
    st.integers(0, 40),
    st.integers(MESSAGE_LIMIT - 40, MESSAGE_LIMIT + 5),
    st.integers(ERROR_BODY_LIMIT - 40, ERROR_BODY_LIMIT + 2),
    st.integers(HEAD_BYTES - 30, HEAD_BYTES + 2),
    st.integers(LINE_LIMIT - 40, LINE_LIMIT + 2),
)


def _echo(key: str, pad: int, which: int) -> bytes:
    form = sorted(forms(key))[which % len(forms(key))]
    return (FILLER * pad + form + FILLER * 8).encode("utf-8")


@PROPERTY
@given(key=keys, pad=PADS, which=st.integers(0, 7))
def test_an_http_error_echoing_the_key_leaves_only_the_filler(
    key: str, pad: int, which: int
) -> None:
    message = _read(Answer(401, "text/plain", _echo(key, pad, which)), key)
    assert message.startswith("HTTP 401: ")
    assert set(message[len("HTTP 401: ") :]) <= {FILLER, "*"}, message
    assert len(message) <= MESSAGE_LIMIT


@PROPERTY
@given(key=keys, pad=PADS, which=st.integers(0, 7))
def test_a_non_stream_answer_echoing_the_key_is_quoted_masked(
    key: str, pad: int, which: int
) -> None:
    message = _read(Answer(200, "text/html", _echo(key, pad, which)), key)
    prefix = "expected text/event-stream, got text/html: b'"
    assert message.startswith(prefix), message
    assert set(message[len(prefix) : -1]) <= {FILLER, "*"}, message


@PROPERTY
@given(key=keys, pad=PADS)
def test_an_in_stream_error_or_malformed_line_with_the_key_is_masked(key: str, pad: int) -> None:
    error = json.dumps({"error": {"message": FILLER * pad + key}})
    message = _read(Answer(200, "text/event-stream", f"data: {error}\n\n".encode()), key)
    assert_no_form(message, key)
    assert_no_tail(message, key)
    bad = b"data: {" + _echo(key, pad, 0) + b"\n\n"
    message = _read(Answer(200, "text/event-stream", bad), key)
    assert message.startswith("malformed chunk: b'data: {"), message
    quoted = message[len("malformed chunk: b'data: {") :]
    quoted = re.sub(r"\\(n'?)?$", "", quoted)  # the line's end, or what the cut left of it
    assert set(quoted) <= {FILLER, "*"}, message


# ---- logs, run.json, refusals ------------------------------------------------------------------
@PROPERTY
@given(key=keys)
def test_a_log_line_and_its_traceback_are_masked(key: str) -> None:
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "sent %s", (key,), None)
    try:
        raise RuntimeError(json.dumps({"key": key}))
    except RuntimeError:
        record.exc_info = sys.exc_info()
    RedactingFilter(Redactor([key])).filter(record)
    text = logging.Formatter().format(record)
    assert_no_form(text, key)
    assert "RuntimeError" in text and MASK in text


def test_run_json_holds_no_credentials_of_the_host(tmp_path: Path) -> None:
    opts = config.ClientOptions(api_key="sk-runjson-1")
    host = "http://user:pa55-word@127.0.0.1:9"
    argv = ["locust", "--host", host, "--llm-api-key", "sk-runjson-1"]
    info = new_run_info(opts, tmp_path / "r", [host], argv)
    text = info.to_json()
    for secret in ("pa55-word", "user:pa55-word", "sk-runjson-1"):
        assert secret not in text
    assert info.host == f"http://{MASK}@127.0.0.1:9" and info.hosts == [info.host]


def test_the_launcher_passes_a_host_with_credentials_by_environment() -> None:
    assert host_args("http://u:pw-secret@h:1") == ([], {"LOCUST_HOST": "http://u:pw-secret@h:1"})
    assert host_args("http://h:1") == (["--host", "http://h:1"], {})
    args = argparse.Namespace(
        host="http://u:pw-secret@h:1", api_key="sk-launch-1", llm_header=["X-T: Bearer tok-hdr1"]
    )
    redact = launch_redactor(args)
    assert redact("pw-secret sk-launch-1 tok-hdr1") == f"{MASK} {MASK} {MASK}"


REFUSALS = [
    ["run", "--llm-api-key", "{k}"],  # no --host
    ["run", "--host", "http://h:1", "--llm-api-key", "{k}", "--bogus", "{k}"],
    ["run", "--host", "http://h:1", "--api-key={k}", "--workers", "{k}"],
    ["run", "--host", "http://u:{k}@h:1", "--concurrency"],
    ["run", "--host", "http://h:1", "--llm-header", "Authorization: Bearer {k}", "--max-tokens"],
    ["demo", "--llm-api-key", "{k}"],
]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def _not_an_int(text: str) -> bool:
    """A key that parses as an int ('1000', ' 7', '1_0', Arabic-Indic digits) would make
    `--workers KEY` valid and start a real run (the lead saw 1,000 workers spawned)."""
    try:
        int(text)
    except ValueError:
        return True
    return False


@given(
    key=keys.filter(lambda k: "\t" not in k and _not_an_int(k)),
    which=st.integers(0, len(REFUSALS) - 1),
)
def test_a_refused_command_line_shows_no_form_of_the_key(key: str, which: int) -> None:
    argv = [arg.replace("{k}", key) for arg in REFUSALS[which]]
    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stdout(stdout), redirect_stderr(stderr), pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    out, err = stdout.getvalue(), stderr.getvalue()
    assert exit_.value.code == 2 and "error:" in err
    assert_no_form(out + err, key)


def test_a_short_key_in_a_refusal_is_masked_where_it_stands_alone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        cli.main(["run", "--host", "http://h:1", "--llm-api-key", "zq", "--workers", "zq"])
    err = capsys.readouterr().err
    assert "'zq'" not in err and "invalid int value: '***'" in err
    assert argument_secrets(["--llm-api-k", "zq"]) == ["zq"]


def test_telemetry_names_a_scraped_target_without_its_credentials(tmp_path: Path) -> None:
    from locust_llm.telemetry.scraper import TelemetryScraper

    target = "http://scrape:pw-tele-77@127.0.0.1:9/metrics"
    metrics = "vllm:num_requests_running 3\n"
    scraper = TelemetryScraper(
        [target], fetch=lambda _url, _timeout: metrics, shown_source=Redactor(["pw-tele-77"])
    )
    assert scraper.scrape_once(now=1.0) > 0
    scraper.write(tmp_path)
    assert set(scraper.to_frame()["source"]) == {f"http://{MASK}@127.0.0.1:9/metrics"}
    assert b"pw-tele-77" not in (tmp_path / "telemetry.parquet").read_bytes()
