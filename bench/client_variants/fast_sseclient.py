"""Variant ``fast-sseclient``: sseclient-py's ``SSEClient(resp)`` over FastHttpUser's
``post(..., stream=True)`` response, as its documentation suggests for a response object.

``SSEClient`` iterates the response, which geventhttpclient serves in ``block_size`` (4 KB)
reads; each event's ``data`` is handed to the shared parser as a ``data:`` line.
"""

from __future__ import annotations

from typing import Any

from locust import FastHttpUser, constant, task
from sseclient import SSEClient

from bench.client_variants.harness import PATH, install_gc_probe, one_request

install_gc_probe()


class FastSseClient(FastHttpUser):
    """Events from ``SSEClient(resp).events()``."""

    wait_time = constant(0)

    def transport(self, body: dict[str, Any], headers: dict[str, str]) -> Any:
        resp = self.client.post(PATH, json=body, headers=headers, stream=True)
        resp.raise_for_status()
        if resp.status_code >= 400:
            raise RuntimeError(f"HTTP {resp.status_code}")
        events = SSEClient(resp).events()
        return (b"data: " + ev.data.encode() for ev in events), resp.stream.release

    @task
    def generate(self) -> None:
        one_request(self, self.transport)
