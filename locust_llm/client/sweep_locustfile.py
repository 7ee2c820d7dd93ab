"""The locustfile ``locust-llm demo`` and ``locust-llm run`` hand to Locust: chat users + stages.

Kept inside the package so the commands work from an installed wheel; ``locustfiles/sweep.py``
is the same thing for people who run ``locust -f`` themselves.
"""

from __future__ import annotations

from locust_llm.client.shapes import StagesShape
from locust_llm.client.user import Chat

__all__ = ["Chat", "Stages"]


class Stages(StagesShape):
    """The stages given by --llm-concurrency / --llm-rate / --llm-soak."""
