"""Shared system prompts: every prompt opens with one of 4 shared 1024-token prefixes.

    locust -f locustfiles/shared_prefix.py --host http://127.0.0.1:8000 --headless -u 8 -r 8 -t 60s

Each request is a shared prefix (one of 4 groups, equal shares) followed by 128 words of its
own; a server with prefix caching computes each prefix once. With ``--llm-tokenizer`` the
prefix is exactly 1024 tokens of that tokenizer. The same data set works anywhere a data set
does: ``--llm-dataset shared-prefix:groups=4,prefix=1024,suffix=128``.
Run alone (``python locustfiles/shared_prefix.py``) it is Locust's single-user debug path.
"""

from __future__ import annotations

from locust import constant, run_single_user

from locust_llm.client.user import ChatUser


class SharedPrefix(ChatUser):
    host = "http://127.0.0.1:8000"
    dataset = "shared-prefix:groups=4,prefix=1024,suffix=128"
    max_tokens = 64
    wait_time = constant(0)


if __name__ == "__main__":
    run_single_user(SharedPrefix)
