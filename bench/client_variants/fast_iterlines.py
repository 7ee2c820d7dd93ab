"""Variant ``fast-iterlines``: FastHttpUser, Locust's own streaming API.

``self.client.iter_lines(path, method="POST", json=body)`` = ``post(..., stream=True)`` then
``iter_content(chunk_size=1024)`` split into lines (decoded to str; encoded back to bytes here
for the shared parser). Locust fires the ``request`` event when the response head arrives.
"""

from __future__ import annotations

from typing import Any

from locust import FastHttpUser, constant, task

from bench.client_variants.harness import PATH, install_gc_probe, one_request

install_gc_probe()


class FastIterLines(FastHttpUser):
    """Lines from ``FastHttpSession.iter_lines`` (1024-byte reads)."""

    wait_time = constant(0)

    def transport(self, body: dict[str, Any], headers: dict[str, str]) -> Any:
        lines = self.client.iter_lines(PATH, method="POST", json=body, headers=headers)
        return (line.encode() for line in lines), lambda: None

    @task
    def generate(self) -> None:
        one_request(self, self.transport)
