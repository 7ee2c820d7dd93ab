"""Telemetry: Prometheus text in, canonical signals out.

``promtext`` parses the exposition format, ``vocabularies`` maps each server's and exporter's
metric names to ``signals`` (unit, reduction over GPUs and servers), ``scraper`` scrapes
targets during a run into telemetry.parquet, ``promapi`` reads a real Prometheus instead, and
``batch_limit`` finds the server's batch limit (option, probe or gauges).

``from locust_llm.telemetry import X`` for a name of ``scraper`` still works (deprecated).
"""

from typing import Any


def __getattr__(name: str) -> Any:
    from locust_llm._compat import forward

    return forward(__name__, name)
