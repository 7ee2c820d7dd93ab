"""Model discovery's pure parts in-process: the model list's path and its first id, and the one
line a bad answer gives (the request itself is covered end to end in test_hints.py)."""

from __future__ import annotations

import pytest

from locust_llm.client.discovery import first_model_id, models_path
from locust_llm.errors import InputError


def test_model_discovery_reads_the_first_id_and_names_the_way_out() -> None:
    assert models_path("http://h:8000") == "/v1/models"
    assert models_path("https://h/api/") == "/api/v1/models"
    body = b'{"data": [{"id": "qwen"}, {"id": "other"}]}'
    assert first_model_id(200, body, "h/v1/models") == "qwen"
    assert first_model_id(200, b'{"data": []}', "h/v1/models") == ""
    for status, bad, says in (
        (500, b"", "GET h/v1/models: HTTP 500, no model list; name the model with --llm-model"),
        (404, b"", "GET h/v1/models: HTTP 404, no model list at this URL: check that --host is"),
        (200, b"[1]", "GET h/v1/models: not an OpenAI model list (AttributeError"),
    ):
        with pytest.raises(InputError) as err:
            first_model_id(status, bad, "h/v1/models")
        assert str(err.value).startswith(says)
