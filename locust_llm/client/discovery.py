"""Which model a server serves, for a user class that names none: the first id of its
``GET /v1/models`` (OpenAI's model list). Any problem is one :class:`InputError` line naming
the server and how to name the model instead (the run stops before any load)."""

from __future__ import annotations

import json

from locust_llm.client.transport import READ_ERRORS, Transport
from locust_llm.errors import InputError
from locust_llm.options.config import ClientOptions

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 10.0
_NAME_IT = "name the model with --llm-model (locust-llm run: --model)"


def models_path(host: str) -> str:
    """The model list's path on ``host`` (its own base path kept: ``http://h/api`` ->
    ``/api/v1/models``)."""
    base_path = host.split("://", 1)[-1].partition("/")[2]
    return ("/" + base_path.rstrip("/") if base_path else "") + "/v1/models"


def first_model_id(status: int, body: bytes, where: str) -> str:
    """The first id of a model list answer ('' when it lists none); ``where``: ``host + path``
    for the error message."""
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
    """The first model id ``host`` lists at /v1/models ('' if it lists none)."""
    transport = Transport(
        connect_timeout_s=CONNECT_TIMEOUT_S,
        read_timeout_s=READ_TIMEOUT_S,
        insecure=options.insecure,
        ca_bundle=options.ca_bundle,
    )
    path = models_path(host)
    headers = {k: v for k, v in options.request_headers().items() if k != "Accept"}
    try:
        status, body = transport.get(host, path, headers)
    except READ_ERRORS as exc:
        raise InputError(
            f"cannot reach {host} ({exc}) to list its models (GET {path}): is the server "
            "up and --host right?"
        ) from None
    finally:
        transport.close()
    return first_model_id(status, body, f"{host}{path}")
