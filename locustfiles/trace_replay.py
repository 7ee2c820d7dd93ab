"""Replay a Mooncake-format trace on its own timestamps, open loop, across any number of workers.

    locust -f locustfiles/trace_replay.py --host http://127.0.0.1:8000 --headless

The trace is ``$LOCUST_LLM_TRACE`` (default: the 200-line sample next to this file), its times
divided by ``$LOCUST_LLM_SPEEDUP`` (default 1). Equal hash ids become identical 512-token
blocks, so the server's prefix cache sees the sharing production saw. ``TraceShape`` runs one
``trace replay`` stage and stops when every line has been answered; each record keeps its
scheduled time (dispatch delay) and ``trace_line``.
Run alone (``python locustfiles/trace_replay.py``) it is Locust's single-user debug path.
"""

from __future__ import annotations

import os
from pathlib import Path

from locust import run_single_user

from locust_llm.client.shapes import TraceShape
from locust_llm.client.workload_users import TraceReplayUser

SAMPLE = Path(__file__).parent / "traces" / "sample_mooncake.jsonl"


class Replay(TraceReplayUser):
    host = "http://127.0.0.1:8000"
    trace = os.environ.get("LOCUST_LLM_TRACE", str(SAMPLE))
    speedup = float(os.environ.get("LOCUST_LLM_SPEEDUP", "1"))


class Shape(TraceShape):
    pass


__all__ = ["Replay", "Shape"]

if __name__ == "__main__":
    run_single_user(Replay)
