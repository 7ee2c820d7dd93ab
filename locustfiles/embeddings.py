"""Embeddings (``/v1/embeddings``): batches of prompts, never streamed; inputs/s and tokens/s.

    locust -f locustfiles/embeddings.py --host http://127.0.0.1:8000 --headless -u 8 -r 8 -t 60s

Each request embeds ``batch_size`` (8) prompts of the data set (``--llm-dataset``, random
words of ``--llm-input-len`` by default); the record's ``batch_inputs`` and ``input_tokens``
give the report's inputs/s and tokens/s. Run alone (``python locustfiles/embeddings.py``) it is
Locust's single-user debug path.
"""

from __future__ import annotations

from locust import constant, run_single_user

from locust_llm.client.workload_users import EmbeddingsUser


class Embeddings(EmbeddingsUser):
    host = "http://127.0.0.1:8000"
    batch_size = 8
    wait_time = constant(0)


if __name__ == "__main__":
    run_single_user(Embeddings)
