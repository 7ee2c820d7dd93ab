"""Variant ``fast-readline``: FastHttpUser ``post(..., stream=True)``, then
``resp.stream.readline(b"\\n")`` on the underlying geventhttpclient response.

Locust fires the ``request`` event when the response head arrives; the body is read line by
line as its bytes come in (the same read as ours, through Locust's session).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from locust import FastHttpUser, constant, task

from bench.client_variants.harness import PATH, install_gc_probe, one_request

install_gc_probe()


class FastReadline(FastHttpUser):
    """Lines from ``resp.stream.readline(b"\\n")``."""

    wait_time = constant(0)

    def transport(self, body: dict[str, Any], headers: dict[str, str]) -> Any:
        resp = self.client.post(PATH, json=body, headers=headers, stream=True)
        resp.raise_for_status()
        if resp.status_code >= 400:
            raise RuntimeError(f"HTTP {resp.status_code}")
        stream = resp.stream
        return iter(partial(stream.readline, b"\n"), b""), stream.release

    @task
    def generate(self) -> None:
        one_request(self, self.transport)
