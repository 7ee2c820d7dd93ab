"""Variant ``ours``: locust_llm's ChatUser as shipped (the sweep locustfile), plus a GC probe.

Same classes as ``locustfiles/sweep.py``; run with the ``--llm-*`` flags. Its records come from
the run directory's requests.parquet; only the garbage-collector pauses are added here.
"""

from __future__ import annotations

from locust import constant

from bench.client_variants.harness import install_gc_probe
from locust_llm.client.shapes import StagesShape
from locust_llm.client.user import ChatUser

install_gc_probe()


class Chat(ChatUser):
    """One streamed chat completion after another (geventhttpclient, readline per line)."""

    wait_time = constant(0)


class Stages(StagesShape):
    """The stages given by --llm-concurrency / --llm-stage-requests."""
