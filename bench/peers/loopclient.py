"""A bare gevent client (no Locust) running one read loop of ``bench.peers.readloops``.

    python -m bench.peers.loopclient URL VARIANT STREAMS REQUESTS OUT.json
    python -m bench.peers.loopclient micro VARIANT TOKENS STREAMS

Closed loop: STREAMS greenlets, one geventhttpclient connection each, REQUESTS in all; writes
the records (our definitions) to OUT.json. It isolates the read loop's cost from Locust's.
``micro``: CPU microseconds per token of the read loop alone, over socket pairs in this process
(a writer greenlet per stream sends the simulator's own chunk bytes one token per write).
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import gc  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from time import perf_counter  # noqa: E402
from urllib.parse import urlsplit  # noqa: E402

import gevent  # noqa: E402
from geventhttpclient import HTTPClient  # noqa: E402

from bench.peers.common import MAX_TOKENS, MODEL, prompt_text  # noqa: E402
from bench.peers.readloops import VARIANTS  # noqa: E402


def main(url: str, variant: str, streams: int, requests: int, out: str) -> None:
    parts = urlsplit(url)
    read = VARIANTS[variant]
    counter = itertools.count()
    records: list[dict[str, float]] = []
    headers = {"Content-Type": "application/json"}

    def user() -> None:
        client = HTTPClient(parts.hostname, parts.port, concurrency=1, network_timeout=120)
        while (i := next(counter)) < requests:
            body = json.dumps({"model": MODEL, "stream": True, "max_tokens": MAX_TOKENS,
                               "stream_options": {"include_usage": True},
                               "messages": [{"role": "user", "content": prompt_text(i)}]}
                              ).encode()  # fmt: skip
            wall, t0 = time.time(), perf_counter()
            resp = client.request("POST", "/v1/chat/completions", body=body, headers=headers)
            first, last, end, _, usage, prompt = read(resp)
            resp.release()
            n = usage
            records.append({"start_wall_s": wall, "ttft_s": first - t0, "e2e_s": end - t0,
                            "tpot_s": (last - first) / (n - 1) if n > 1 else float("nan"),
                            "itl_mean_s": (last - first) / (n - 1) if n > 1 else float("nan"),
                            "output_tokens": n, "last_token_s": last - t0,
                            "input_tokens": prompt})  # fmt: skip
        client.close()

    gc.freeze()
    gevent.joinall([gevent.spawn(user) for _ in range(streams)])
    with open(out, "w") as f:
        json.dump(records, f)


def micro(variant: str, tokens: int, streams: int) -> float:
    """CPU us per token of ``variant`` reading ``streams`` x ``tokens``-token answers."""
    import socket

    from geventhttpclient.response import HTTPSocketResponse

    from locust_llm.sim.openai_format import DONE, ChunkFormatter

    fmt = ChunkFormatter(chat=True, request_id="chatcmpl-micro", model=MODEL, prompt_tokens=100,
                         include_usage=True, continuous_usage=False)  # fmt: skip
    pieces = [fmt.role() + fmt.content("tok", 1)]
    pieces += [fmt.content(" tok", i) for i in range(2, tokens)]
    pieces.append(fmt.content(" end", tokens, "length") + fmt.usage(tokens) + DONE)
    wire = [
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%b\r\n" % (len(pieces[0]), pieces[0])
    ]
    wire += [b"%x\r\n%b\r\n" % (len(p), p) for p in pieces[1:-1]]
    wire.append(b"%x\r\n%b\r\n0\r\n\r\n" % (len(pieces[-1]), pieces[-1]))
    read = VARIANTS[variant]
    pairs = [socket.socketpair() for _ in range(streams)]

    def writer(sock: socket.socket) -> None:
        for w in wire:
            sock.sendall(w)
            gevent.sleep(0)

    def reader(sock: socket.socket) -> None:
        resp = HTTPSocketResponse(sock, method="POST")
        result = read(resp)
        assert result[3] == tokens and result[4] == tokens, result

    gc.freeze()
    cpu0 = time.process_time()
    jobs = [gevent.spawn(writer, a) for a, _ in pairs] + [gevent.spawn(reader, b) for _, b in pairs]
    gevent.joinall(jobs, raise_error=True)
    cpu = time.process_time() - cpu0
    # the writers' share: the same writes with a reader that only drains the bytes
    pairs = [socket.socketpair() for _ in range(streams)]

    def sink(sock: socket.socket) -> None:
        got = 0
        total = sum(map(len, wire))
        while got < total:
            got += len(sock.recv(65536))

    cpu0 = time.process_time()
    jobs = [gevent.spawn(writer, a) for a, _ in pairs] + [gevent.spawn(sink, b) for _, b in pairs]
    gevent.joinall(jobs, raise_error=True)
    base = time.process_time() - cpu0
    return (cpu - base) / (tokens * streams) * 1e6


if __name__ == "__main__":
    if sys.argv[1] == "micro":
        us = micro(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        print(json.dumps({"variant": sys.argv[2], "cpu_us_per_token": us}))
    else:
        main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
