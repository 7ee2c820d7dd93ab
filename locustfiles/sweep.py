"""A stepped concurrency (or rate) sweep: the seed's procedure, stage by stage.

    locust -f locustfiles/sweep.py --host http://127.0.0.1:8000 --headless \\
        --llm-concurrency 1,10,50,100,200 --llm-stage-requests 10,20,100,200,400

Open loop instead: ``--llm-rate 1,2,4,8 --llm-stage-duration 60``. A final hold:
``--llm-soak 30m@100``. Stage windows land in run.json; ``locust-llm report RUN_DIR`` reads them.
Run alone (``python locustfiles/sweep.py``) one user sends ``--llm-debug-requests`` (3) requests
to $LOCUST_HOST (default http://127.0.0.1:8000) and stops.
"""

from __future__ import annotations

from locust import run_single_user

from locust_llm.client.sweep_locustfile import Chat, Stages

__all__ = ["Chat", "Stages"]

if __name__ == "__main__":
    run_single_user(Chat)
