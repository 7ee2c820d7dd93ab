"""Stream text completions (``/v1/completions``) from an OpenAI-compatible server.

    locust -f locustfiles/completions.py --host http://127.0.0.1:8000 --headless -u 10 -t 60s

Run alone (``python locustfiles/completions.py``) one user sends ``--llm-debug-requests`` (3)
requests to $LOCUST_HOST (default http://127.0.0.1:8000), prints each (with its TTFT, TPOT,
tokens and text) and stops.
"""

from __future__ import annotations

from locust import constant, run_single_user

from locust_llm.client.user import CompletionUser


class Completions(CompletionUser):
    """One streamed text completion after another (closed loop, no think time)."""

    wait_time = constant(0)
    host = "http://127.0.0.1:8000"


if __name__ == "__main__":
    run_single_user(Completions)
