"""A long hold at one concurrency to watch latency and throughput drift (stability).

    locust -f locustfiles/soak.py --host http://127.0.0.1:8000 --headless --llm-soak 30m@50

The report gives P99 latency and throughput per minute and their drift in % per hour.
Run alone (``python locustfiles/soak.py``) it sends a few requests from one user.
"""

from __future__ import annotations

import os

from locust import constant, run_single_user

from locust_llm.shapes import StagesShape
from locust_llm.user import ChatUser


class Chat(ChatUser):
    """One streamed chat completion after another."""

    wait_time = constant(0)
    host = os.environ.get("LOCUST_HOST", "http://127.0.0.1:8000")


class Soak(StagesShape):
    """A single soak stage from --llm-soak DURATION@CONCURRENCY."""


if __name__ == "__main__":
    run_single_user(Chat)
