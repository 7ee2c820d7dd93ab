"""Stream chat completions from an OpenAI-compatible server, timing every token.

    locust -f locustfiles/chat.py --host http://127.0.0.1:8000 --headless -u 10 -r 10 -t 60s

All ``--llm-*`` options (model, max tokens, dataset, stages, telemetry...) are listed by
``locust-llm options`` (Locust's own ``--help`` prints before this file loads, so it cannot).
Run alone (``python locustfiles/chat.py``) it goes through Locust's single-user debug path: one
user sends ``--llm-debug-requests`` (3) requests to $LOCUST_HOST (default
http://127.0.0.1:8000), prints each (Locust's line, then locust-llm's: TTFT, TPOT, tokens in /
out, E2E and the answer's start) and stops.
"""

from __future__ import annotations

from locust import run_single_user

from locust_llm.client.user import Chat

__all__ = ["Chat"]

if __name__ == "__main__":
    run_single_user(Chat)
