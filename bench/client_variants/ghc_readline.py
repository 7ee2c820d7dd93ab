"""Variant ``ghc-readline``: our transport (geventhttpclient ``HTTPClient`` used directly,
``readline(b"\\n")`` per SSE line) in the bench's minimal user, without locust_llm's plugin.

It separates the transport's cost from the rest of ``ours`` (stages, permits, live stats,
recorder). One Locust ``request`` event per request is fired by the harness.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from geventhttpclient import HTTPClient
from locust import User, constant, task

from bench.client_variants.harness import PATH, install_gc_probe, one_request

install_gc_probe()


class GhcReadline(User):
    """One connection per user; lines via ``resp.readline(b"\\n")``."""

    wait_time = constant(0)

    def on_start(self) -> None:
        parts = urlsplit(self.host)
        self.http = HTTPClient(parts.hostname, parts.port, concurrency=1,
                               connection_timeout=60, network_timeout=60)  # fmt: skip

    def on_stop(self) -> None:
        self.http.close()

    def transport(self, body: dict[str, Any], headers: dict[str, str]) -> Any:
        resp = self.http.request("POST", PATH, body=json.dumps(body).encode(), headers=headers)
        if resp.status_code >= 400:
            resp.release()
            raise RuntimeError(f"HTTP {resp.status_code}")
        return iter(partial(resp.readline, b"\n"), b""), resp.release

    @task
    def generate(self) -> None:
        one_request(self, self.transport, fire_event=True)
