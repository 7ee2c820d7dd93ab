"""The "LLM" tab in Locust's web UI, ``/llm/stats`` (JSON) and ``/llm/metrics`` (Prometheus)."""

from __future__ import annotations

from typing import Any


def install(environment: Any, runtime: Any) -> None:
    """Add the LLM tab and its routes to ``environment.web_ui`` (filled in by issue 8)."""
