"""A long hold at one concurrency to watch latency and throughput drift (stability).

    locust -f locustfiles/soak.py --host http://127.0.0.1:8000 --headless --llm-soak 30m@50

The report gives P99 latency and throughput per minute and their drift in % per hour.
Run alone (``python locustfiles/soak.py``) one user sends ``--llm-debug-requests`` (3) requests
to $LOCUST_HOST (default http://127.0.0.1:8000) and stops.
"""

from __future__ import annotations

from locust import run_single_user

from locust_llm.client.shapes import StagesShape
from locust_llm.client.user import Chat

__all__ = ["Chat", "Soak"]


class Soak(StagesShape):
    """A single soak stage from --llm-soak DURATION@CONCURRENCY."""


if __name__ == "__main__":
    run_single_user(Chat)
