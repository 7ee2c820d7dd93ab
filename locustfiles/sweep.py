"""A stepped concurrency (or rate) sweep: the seed's procedure, stage by stage.

    locust -f locustfiles/sweep.py --host http://127.0.0.1:8000 --headless \\
        --llm-concurrency 1,10,50,100,200 --llm-stage-requests 10,20,100,200,400

Open loop instead: ``--llm-rate 1,2,4,8 --llm-stage-duration 60``. A final hold:
``--llm-soak 30m@100``. Stage windows land in run.json; ``locust-llm report RUN_DIR`` reads them.
Run alone (``python locustfiles/sweep.py``) it sends a few requests from one user.
"""

from __future__ import annotations

import os

from locust import constant, run_single_user

from locust_llm.shapes import StagesShape
from locust_llm.user import ChatUser


class Chat(ChatUser):
    """One streamed chat completion after another; the shape sets how many users run."""

    wait_time = constant(0)
    host = os.environ.get("LOCUST_HOST", "http://127.0.0.1:8000")


class Stages(StagesShape):
    """The stages given by --llm-concurrency / --llm-rate / --llm-soak."""


if __name__ == "__main__":
    run_single_user(Chat)
