"""locust-llm: load-test OpenAI-compatible LLM servers on Locust's engine.

The package root imports nothing heavy: no locust/gevent (which monkey-patch the process), no
pandas. Import the submodule you need (``locust_llm.user``, ``locust_llm.roofline`` ...); the
names below are resolved lazily on first access, so ``from locust_llm import LLMUser`` works
and imports Locust only then.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "LLMUser": "locust_llm.user",
    "ChatUser": "locust_llm.user",
    "CompletionUser": "locust_llm.user",
    "llm_events": "locust_llm.client.events",
    "ClientOptions": "locust_llm.client.config",
    "register_api": "locust_llm.client.apis.base",
    "RequestRecord": "locust_llm.metrics",
    "ModelSpec": "locust_llm.roofline",
    "GpuSpec": "locust_llm.roofline",
    "Workload": "locust_llm.roofline",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'locust_llm' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
