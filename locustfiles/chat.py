"""Stream chat completions from an OpenAI-compatible server, timing every token.

    locust -f locustfiles/chat.py --host http://127.0.0.1:8000 --headless -u 10 -r 10 -t 60s

All ``--llm-*`` options (model, max tokens, dataset, stages, telemetry...) are listed by
``locust -f locustfiles/chat.py --help``. Run alone (``python locustfiles/chat.py``) it sends a
few requests from one user against $LOCUST_HOST (default http://127.0.0.1:8000), for debugging.
"""

from __future__ import annotations

import os

from locust import constant, run_single_user

from locust_llm.user import ChatUser


class Chat(ChatUser):
    """One streamed chat completion after another (closed loop, no think time)."""

    wait_time = constant(0)
    host = os.environ.get("LOCUST_HOST", "http://127.0.0.1:8000")


if __name__ == "__main__":
    run_single_user(Chat)
