"""Which model a server serves, for a user class that names none: the first id of its
``GET /v1/models`` (OpenAI's model list).

A server that cannot be reached (refused, reset, timed out) is a :class:`RequestFailed` of
kind ``connect`` or ``timeout``: the request that needed the model ends as that record and
the user backs off, so a server that comes up later is found by the next request. Any other
problem (an HTTP error, an answer that is not a model list) is one :class:`InputError` line
naming the URL tried and the way out that fits it (the run stops before any load)."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from geventhttpclient.response import HTTPConnectionClosed

from locust_llm.client.transport import READ_ERRORS, Transport, send_failure
from locust_llm.errors import InputError, RequestFailed
from locust_llm.options.config import ClientOptions
from locust_llm.options.readers import API_VERSION_SEGMENT

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 10.0
_NAME_IT = "name the model with --llm-model (locust-llm run: --model)"
#: failures that say the server was not reached (it may come up): records, not a stop
UNREACHED_KINDS = frozenset({"connect", "timeout"})


def models_path(host: str) -> str:
    """The model list's path on ``host`` (its own base path kept: ``http://h/api`` ->
    ``/api/v1/models``)."""
    base_path = host.split("://", 1)[-1].partition("/")[2]
    return ("/" + base_path.rstrip("/") if base_path else "") + API_VERSION_SEGMENT + "/models"


def models_url(host: str) -> str:
    """The whole URL of the model list on ``host`` (what a message names)."""
    parts = urlsplit(host)
    return f"{parts.scheme}://{parts.netloc}{models_path(host)}"


def first_model_id(status: int, body: bytes, where: str) -> str:
    """The first id of a model list answer ('' when it lists none); ``where``: the URL asked,
    for the error message."""
    if status in (401, 403):
        raise InputError(
            f"GET {where}: HTTP {status}, the server refused the request: give its API key "
            "(--llm-api-key or $OPENAI_API_KEY; locust-llm run: --api-key)"
        )
    if status == 404:
        raise InputError(
            f"GET {where}: HTTP 404, no model list at this URL: check that --host is the "
            f"server's base URL (with or without /v1); if it is, {_NAME_IT}"
        )
    if status >= 400:
        raise InputError(f"GET {where}: HTTP {status}, no model list; {_NAME_IT}")
    try:
        data = json.loads(body).get("data") or []
        return str(data[0]["id"]) if data else ""
    except (ValueError, KeyError, IndexError, AttributeError, TypeError) as exc:
        raise InputError(
            f"GET {where}: not an OpenAI model list ({type(exc).__name__}: {exc}); {_NAME_IT}"
        ) from None


def discover_model(host: str, options: ClientOptions) -> str:
    """The first model id ``host`` (a base URL) lists at /v1/models ('' if it lists none)."""
    transport = Transport(
        connect_timeout_s=CONNECT_TIMEOUT_S,
        read_timeout_s=READ_TIMEOUT_S,
        insecure=options.insecure,
        ca_bundle=options.ca_bundle,
    )
    path = models_path(host)
    url = models_url(host)
    headers = {k: v for k, v in options.request_headers().items() if k != "Accept"}
    try:
        status, body = transport.get(host, path, headers)
    except READ_ERRORS as exc:
        if isinstance(exc, HTTPConnectionClosed):  # closed before any byte of an answer
            failure = RequestFailed("connect", f"{type(exc).__name__}: {exc}")
        else:
            failure = send_failure(exc)
        if failure.kind in UNREACHED_KINDS:
            raise RequestFailed(
                failure.kind,
                f"cannot reach {host} ({failure.message}) to list its models (GET {url}): is "
                "the server up and --host right?",
            ) from None
        raise InputError(f"GET {url}: {type(exc).__name__}: {exc}; {_NAME_IT}") from None
    finally:
        transport.close()
    return first_model_id(status, body, url)
