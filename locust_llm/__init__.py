"""locust-llm: load-test OpenAI-compatible LLM servers on Locust's engine.

The package root imports nothing heavy: no locust/gevent (which monkey-patch the process), no
pandas. The names below are resolved lazily on first access, so ``from locust_llm import
ChatUser`` works and imports Locust only then. The package is arranged by family
(``docs/architecture.md``); the flat module paths of earlier releases still import
(``locust_llm._compat``).
"""

from __future__ import annotations

import importlib
from typing import Any

from locust_llm import _compat

__version__ = "0.1.0"

_LAZY = {
    "LLMUser": "locust_llm.client.user",
    "ChatUser": "locust_llm.client.user",
    "CompletionUser": "locust_llm.client.user",
    "llm_events": "locust_llm.client.events",
    "ClientOptions": "locust_llm.options.config",
    "register_api": "locust_llm.client.apis.base",
    "RequestRecord": "locust_llm.metrics",
    "ModelSpec": "locust_llm.roofline.floors",
    "GpuSpec": "locust_llm.roofline.floors",
    "Workload": "locust_llm.roofline.floors",
    "Chat": "locust_llm.client.user",
    "StagesShape": "locust_llm.client.shapes",
    "TraceShape": "locust_llm.client.shapes",
    "SessionUser": "locust_llm.client.workload_users",
    "TraceReplayUser": "locust_llm.client.workload_users",
    "EmbeddingsUser": "locust_llm.client.workload_users",
    "load_dataset": "locust_llm.workloads.datasets",
    "TelemetryScraper": "locust_llm.telemetry.scraper",
    "read_prometheus": "locust_llm.telemetry.promapi",
}

__all__ = ["__version__", *_LAZY]

_compat.install()


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'locust_llm' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
