"""Base URLs as users write them, in-process (issue 28 item 1-3): the one reader of a server URL
(a final ``/v1`` dropped, any other base path kept), the paths requests and model discovery are
then made under, the refusal of a URL without a scheme, discovery's advice per HTTP status, and
the end-of-run words when nothing completed (the LLM table, the unreachable line, the report's
reading). The same behaviour end to end, through the real CLI and Locust: test_base_urls.py."""

from __future__ import annotations

import math
from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from locust_llm.client.apis.base import get_api
from locust_llm.client.discovery import first_model_id, models_url
from locust_llm.errors import InputError
from locust_llm.live.llmstats import LiveStats, format_table, unreachable_line
from locust_llm.metrics import RequestRecord
from locust_llm.options.config import ClientOptions
from locust_llm.options.readers import base_url, hosts, split_hosts
from locust_llm.options.settings import resolve_settings
from locust_llm.options.validate import http_url
from locust_llm.report.diagnosis.knee import find_knee

_SEGMENT = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..")
)
_ORIGIN = st.builds(
    lambda scheme, host, port: f"{scheme}://{host}{port}",
    st.sampled_from(["http", "https", "HTTP"]),
    st.sampled_from(["127.0.0.1", "localhost", "gw.example.com", "[::1]", "user:pw@h"]),
    st.sampled_from(["", ":8000", ":1"]),
)
#: a base path that does not itself end in the /v1 segment (a gateway's prefix, or none)
_PREFIX = (
    st.lists(_SEGMENT, max_size=3)
    .map(lambda segs: "".join("/" + s for s in segs))
    .filter(lambda p: not p.endswith("/v1"))
)


@settings(max_examples=60, deadline=None)
@given(origin=_ORIGIN, prefix=_PREFIX, suffix=st.sampled_from(["", "/", "/v1", "/v1/", "/v1//"]),
       pad=st.sampled_from(["", " ", "\t"]))  # fmt: skip
def test_a_final_v1_is_the_api_version_and_any_other_base_path_stays(
    origin: str, prefix: str, suffix: str, pad: str
) -> None:
    base = origin + prefix
    given_url = f"{pad}{base}{suffix}{pad}"
    assert base_url(given_url) == base
    assert base_url(base_url(given_url)) == base  # read twice, the same server
    # every adapter's path goes under the base path: the OpenAI SDK's URL for that base_url
    sdk_base = base + "/v1"
    for api in ("chat", "completions", "responses", "embeddings"):
        endpoint = get_api(api).path
        assert endpoint.startswith("/v1/")
        request_path = urlsplit(base_url(given_url)).path.rstrip("/") + endpoint
        assert request_path == urlsplit(sdk_base).path + endpoint[len("/v1") :]
    lower_scheme = origin.replace("HTTP://", "http://")  # urlsplit reads a scheme in lower case
    assert models_url(base_url(given_url)) == f"{lower_scheme}{prefix}/v1/models"


def test_only_one_final_v1_segment_is_dropped_and_nothing_else() -> None:
    assert base_url("http://h:8000/v1/v1") == "http://h:8000/v1"  # the SDK too: /v1/v1/chat/...
    assert base_url("http://h/v10") == "http://h/v10"
    assert base_url("http://h/api-v1") == "http://h/api-v1"
    assert base_url("http://h/v1?api-version=2") == "http://h/v1?api-version=2"
    # no scheme: left as written (without trailing slashes) for the check to refuse
    assert base_url("127.0.0.1:8000/v1/") == "127.0.0.1:8000/v1"


def test_every_way_a_host_is_given_reads_the_same() -> None:
    assert split_hosts(" http://a:1/v1/ , http://b:2,,http://gw/team-a/v1") == (
        "http://a:1", "http://b:2", "http://gw/team-a",
    )  # fmt: skip
    assert hosts("--llm-hosts", "http://a:1/v1,http://b:2/v1/") == ("http://a:1", "http://b:2")
    assert resolve_settings(ClientOptions(), host="http://h:8000/v1/").hosts == ("http://h:8000",)
    many = ClientOptions(hosts=hosts("--llm-hosts", "http://a/v1,http://b"))
    assert resolve_settings(many, host="http://ignored/v1").hosts == ("http://a", "http://b")


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("127.0.0.1:8000",
         "--host '127.0.0.1:8000': no scheme; write http://127.0.0.1:8000 (or "
         "https://127.0.0.1:8000 for TLS)"),
        ("localhost:8000/v1",
         "--host 'localhost:8000/v1': no scheme; write http://localhost:8000/v1 (or "
         "https://localhost:8000/v1 for TLS)"),
        ("", "--host '': empty; expected a URL such as http://127.0.0.1:8000"),
        ("ftp://h", "--host 'ftp://h': expected an http:// or https:// URL (got ftp://)"),
    ],
)  # fmt: skip
def test_a_url_without_a_scheme_is_refused_with_the_url_to_write(url: str, says: str) -> None:
    with pytest.raises(InputError) as err:
        http_url("--host", url)
    assert str(err.value) == says
    http_url("--host", "http://127.0.0.1:8000/v1")  # a scheme, a host: accepted


def test_discovery_advice_fits_the_status_and_names_the_url_asked() -> None:
    url = models_url(base_url("http://127.0.0.1:9/team-a/v1/"))
    assert url == "http://127.0.0.1:9/team-a/v1/models"
    expected = {
        404: f"GET {url}: HTTP 404, no model list at this URL: check that --host is the "
        "server's base URL (with or without /v1); if it is, name the model with --llm-model "
        "(locust-llm run: --model)",
        401: f"GET {url}: HTTP 401, the server refused the request: give its API key "
        "(--llm-api-key or $OPENAI_API_KEY; locust-llm run: --api-key)",
        500: f"GET {url}: HTTP 500, no model list; name the model with --llm-model "
        "(locust-llm run: --model)",
    }
    for status, says in expected.items():
        with pytest.raises(InputError) as err:
            first_model_id(status, b"", url)
        assert str(err.value) == says
    assert first_model_id(200, b'{"data": [{"id": "m"}]}', url) == "m"


def _record(ok: bool, kind: str = "", endpoint: str = "/v1/chat/completions") -> RequestRecord:
    if ok:
        return RequestRecord(request_id="r", endpoint=endpoint, ok=True, ttft_s=0.01,
                             tpot_s=0.002, e2e_s=0.05, output_tokens=8)  # fmt: skip
    return RequestRecord(request_id="r", endpoint=endpoint, error_kind=kind, error_message="x")


def test_nothing_completed_is_one_line_not_a_table_of_nan() -> None:
    stats = LiveStats()
    for _ in range(5):
        stats.add(_record(False, "connect"), [], [])
    assert format_table(stats) == "LLM stats: no request completed (connect 5)"
    hosts_ = ["http://127.0.0.1:9"]
    assert unreachable_line(stats, hosts_) == (
        "server unreachable at http://127.0.0.1:9: 5 requests failed as connect errors, none "
        "completed (is the server up and --host right?)"
    )
    stats.add(_record(False, "http_5xx"), [], [])  # the server answered once: not unreachable
    assert unreachable_line(stats, hosts_) == ""
    assert format_table(stats) == "LLM stats: no request completed (connect 5, http_5xx 1)"
    stats.add(_record(True), [], [])
    table = format_table(stats)
    assert table.startswith("LLM stats (ms)") and "nan" not in table
    assert unreachable_line(stats, hosts_) == ""


def test_a_metric_nothing_measured_reads_n_a_in_the_table() -> None:
    stats = LiveStats()  # embeddings: no stream, so no TTFT/TPOT/ITL
    stats.add(RequestRecord(request_id="r", endpoint="/v1/embeddings", ok=True, e2e_s=0.02), [], [])
    row = format_table(stats).splitlines()[3]
    assert row.split()[:5] == ["/v1/embeddings", "1", "0", "n/a", "n/a"] and "nan" not in row


def test_the_reading_says_nothing_completed() -> None:
    row = {"stage": 0, "kind": "step", "concurrency": 2.0, "rate": math.nan, "requests": 12,
           "completed": 0, "qps": 0.0, "latency_p99_s": math.nan, "error_rate": 1.0}  # fmt: skip
    knee = find_knee([row])
    assert knee.reading == "no request completed: all 12 failed (see the verdict)"
    assert find_knee([]).reading == ""  # no request at all: nothing to say
