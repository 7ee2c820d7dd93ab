"""Stream OpenAI's Responses API (``/v1/responses``): typed events, usage in ``response.completed``.

    locust -f locustfiles/responses.py --host http://127.0.0.1:8000 --headless -u 8 -r 8 -t 60s

The same timing as chat (TTFT from the first ``response.output_text.delta``, reasoning deltas
counted as reasoning); every ``--llm-*`` option applies. Run alone
(``python locustfiles/responses.py``) it is Locust's single-user debug path.
"""

from __future__ import annotations

from locust import constant, run_single_user

from locust_llm.client.user import LLMUser


class Responses(LLMUser):
    host = "http://127.0.0.1:8000"
    api = "responses"
    wait_time = constant(0)


if __name__ == "__main__":
    run_single_user(Responses)
