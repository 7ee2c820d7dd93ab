"""Variant ``requests-iterlines``: Locust's requests-based HttpUser, ``post(..., stream=True)``
then ``resp.iter_lines()`` (requests' default 512-byte chunk size; urllib3 yields each HTTP
chunk as it arrives). Locust fires the ``request`` event when the response head arrives.
"""

from __future__ import annotations

from typing import Any

from locust import HttpUser, constant, task

from bench.client_variants.harness import PATH, install_gc_probe, one_request

install_gc_probe()


class RequestsIterLines(HttpUser):
    """Lines from ``requests.Response.iter_lines()``."""

    wait_time = constant(0)

    def transport(self, body: dict[str, Any], headers: dict[str, str]) -> Any:
        resp = self.client.post(PATH, json=body, headers=headers, stream=True)
        if resp.status_code >= 400:
            resp.close()
            raise RuntimeError(f"HTTP {resp.status_code}")
        return resp.iter_lines(), resp.close

    @task
    def generate(self) -> None:
        one_request(self, self.transport)
