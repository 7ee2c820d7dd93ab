"""Multi-turn chat sessions: each user runs conversations, one request per turn, history carried.

    locust -f locustfiles/sessions.py --host http://127.0.0.1:8000 --headless -u 8 -r 8 -t 60s

Synthetic sessions of 2-6 turns (128 words a user turn, answers capped at 64 tokens), the
server's answers carried into the next turn, 1 s of think time. Every record carries
``session_id`` and ``turn``; the report adds TTFT by turn and the sessions' latency and
throughput. Set ``sessions`` to a ShareGPT JSON or JSONL conversations file to replay real ones.
Run alone (``python locustfiles/sessions.py``) it is Locust's single-user debug path.
"""

from __future__ import annotations

from locust import run_single_user

from locust_llm.client.workload_users import SessionUser


class Sessions(SessionUser):
    host = "http://127.0.0.1:8000"
    sessions = "synthetic"
    session_turns = "uniform:2,6"
    turn_input_len = "fixed:128"
    turn_output_len = "fixed:64"
    think_time_s = 1.0
    history = "server"


if __name__ == "__main__":
    run_single_user(Sessions)
