"""Our client's core without Locust: the kernel transport, the stream reader and the record.

    python -m bench.peers.coreclient URL STREAMS REQUESTS OUT.json

Closed loop: STREAMS greenlets, one :class:`~locust_llm.client.kernel_transport.KernelTransport`
each, REQUESTS in all, every response read by :class:`~locust_llm.client.stream.StreamReader`
into its :class:`~locust_llm.metrics.RequestRecord` (``read_to_record``, as ``LLMUser`` reads
it), the records written to OUT.json in the benches' definitions. Beside ``ours`` (the same
path under Locust) it splits the client's CPU into its core (transport, framing, SSE parsing,
the record) and what Locust and the run around it add (users and tasks, stats, the journal).
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import gc  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402

import gevent  # noqa: E402

import locust_llm.client.apis.chat  # noqa: E402,F401  (registers the chat API)
from bench.peers.common import MAX_TOKENS, MODEL, prompt_text  # noqa: E402
from locust_llm.client.apis.base import get_api  # noqa: E402
from locust_llm.client.kernel_transport import KernelTransport  # noqa: E402
from locust_llm.client.stream import Exchange, StreamReader, read_to_record  # noqa: E402
from locust_llm.client.transport import READ_ERRORS  # noqa: E402
from locust_llm.metrics import RequestRecord  # noqa: E402

PATH = "/v1/chat/completions"
HEADERS = {"Content-Type": "application/json"}


def main(url: str, streams: int, requests: int, out: str) -> None:
    counter = itertools.count()
    reader = StreamReader(get_api("chat"), read_errors=READ_ERRORS)
    records: list[dict[str, float]] = []

    def user() -> None:
        transport = KernelTransport(connect_timeout_s=30, read_timeout_s=120, insecure=False)
        while (i := next(counter)) < requests:
            body = json.dumps({"model": MODEL, "stream": True, "max_tokens": MAX_TOKENS,
                               "stream_options": {"include_usage": True},
                               "messages": [{"role": "user", "content": prompt_text(i)}]}
                              ).encode()  # fmt: skip
            ex = Exchange(RequestRecord(request_id=str(i), endpoint=PATH))
            resp = transport.post(url, PATH, body, HEADERS, before_send=ex.stamp_send,
                                  after_send=ex.stamp_sent)  # fmt: skip
            record = read_to_record(reader, resp, ex)
            if not resp.message_complete:  # the chunked terminator, so the connection is kept
                resp.read(64)
            transport.release(url, resp)
            if record.ok:
                records.append({"start_wall_s": record.start_wall_s, "ttft_s": record.ttft_s,
                                "e2e_s": record.e2e_s, "tpot_s": record.tpot_s,
                                "itl_mean_s": record.itl_mean_s,
                                "output_tokens": record.output_tokens,
                                "last_token_s": record.last_token_s,
                                "input_tokens": record.input_tokens})  # fmt: skip

    gc.freeze()
    gevent.joinall([gevent.spawn(user) for _ in range(streams)])
    with open(out, "w") as f:
        json.dump(records, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
