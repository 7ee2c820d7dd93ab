"""ChatUser / CompletionUser: stream one completion per task and time every token.

The request goes out over geventhttpclient (the library under Locust's FastHttpUser), used
directly so that nothing is fired on our behalf: each LLM request fires exactly one Locust
``request`` event (name = endpoint, response_time = E2E in ms, response_length = output tokens,
exception on failure). Lines are read with ``readline(b"\\n")``, which returns as soon as a
line's bytes are in, so every chunk is timestamped (``perf_counter``) on arrival; bigger
fixed-size reads batch tokens and skew TTFT and TPOT (see docs/client.md for the measurement).

A failure never kills the user: every request sent ends as exactly one ``RequestRecord``,
successful or with one of ``metrics.ERROR_KINDS`` (plus ``cancelled`` when the load test itself
stopped the request).
"""

from __future__ import annotations

import errno
import itertools
import json
import random
import socket
import time
from time import perf_counter
from typing import Any, ClassVar
from urllib.parse import urlsplit

import gevent
from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError
from locust import User, task
from locust.exception import StopUser

from locust_llm import plugin, sse
from locust_llm.metrics import (
    NAN,
    RequestRecord,
    StreamTiming,
    classify_http_error,
    summarize_stream,
)

_CHAT = "/v1/chat/completions"
_COMPLETIONS = "/v1/completions"
_ERROR_BODY_LIMIT = 4096
_TERMINATOR_WAIT_S = 0.05
_request_ids = itertools.count()


class _StreamError(Exception):
    """Internal: a stream ended badly; ``kind`` is its error kind."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class LLMUser(User):
    """Base of the LLM users: one streamed completion per task, exactly one record per request.

    Subclass and set ``endpoint``; override :meth:`build_body` to shape requests. Options come
    from the ``--llm-*`` flags (see ``locust_llm.options``).
    """

    abstract = True
    endpoint: ClassVar[str] = _CHAT

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        self.runtime = plugin.runtime(environment)
        self.user_index = self.runtime.next_user_index()
        self.rng = random.Random(self.runtime.options.llm_seed * 1_000_003 + self.user_index)
        self._clients: dict[str, HTTPClient] = {}

    # ---- Locust lifecycle ---------------------------------------------------------------------
    def on_stop(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    @task
    def generate(self) -> None:
        """One request: wait for a stage permit and (open loop) its slot; send it, record it.

        A user that Locust asks to stop while it waits sends nothing more (StopUser); an
        open-loop slot whose stage ended before it came due is dropped, not sent in the next.
        """
        runtime = self.runtime
        if not runtime.acquire_permit(self):
            raise StopUser()
        stage = runtime.current_stage
        scheduled = runtime.claim_arrival(self)
        if scheduled is not None and not (
            scheduled == scheduled and runtime.wait_until(scheduled, stage, self)
        ):
            runtime.release_permit(stage)
            if self._state == "stopping":
                raise StopUser()
            return
        self.send(scheduled_wall_s=NAN if scheduled is None else scheduled)

    # ---- request building ---------------------------------------------------------------------
    def build_body(self, prompt: Any, max_tokens: int) -> dict[str, Any]:
        """The JSON body of one request (chat shape)."""
        opts = self.runtime.options
        body: dict[str, Any] = {"model": self.runtime.model, "messages": prompt.messages}
        self._common_fields(body, max_tokens, opts)
        return body

    def _common_fields(self, body: dict[str, Any], max_tokens: int, opts: Any) -> None:
        stream = not opts.llm_no_stream
        body["stream"] = stream
        if stream:
            body["stream_options"] = {"include_usage": True}
        body[opts.llm_max_tokens_field] = max_tokens
        body["temperature"] = opts.llm_temperature
        if opts.llm_ignore_eos:
            body["ignore_eos"] = True
        body.update(self.runtime.extra_body)

    # ---- sending ------------------------------------------------------------------------------
    def _client_for(self, base_url: str) -> HTTPClient:
        client = self._clients.get(base_url)
        if client is None:
            opts = self.runtime.options
            parts = urlsplit(base_url)
            client = HTTPClient(
                parts.hostname or "127.0.0.1",
                parts.port,
                ssl=parts.scheme == "https",
                connection_timeout=opts.llm_connect_timeout,
                network_timeout=opts.llm_read_timeout,
                concurrency=1,
                insecure=bool(opts.llm_insecure),
            )
            self._clients[base_url] = client
        return client

    def send(self, *, scheduled_wall_s: float = NAN) -> RequestRecord:
        """Send one request now and return its record (already recorded and reported)."""
        runtime = self.runtime
        prompt = runtime.dataset.next_request(self.rng)
        max_tokens = runtime.output_cap(prompt, self.rng)
        body = json.dumps(self.build_body(prompt, max_tokens)).encode()
        base_url = runtime.next_host()
        path = urlsplit(base_url).path.rstrip("/") + self.endpoint
        record = RequestRecord(
            request_id=f"{runtime.worker_id}-{next(_request_ids)}",
            endpoint=self.endpoint,
            model=runtime.model,
            worker_id=runtime.worker_id,
            user_id=self.user_index,
            stage=runtime.current_stage,
            scheduled_wall_s=scheduled_wall_s,
            input_tokens=prompt.input_tokens_estimate,
            input_tokens_estimated=True,
        )
        runtime.request_started()
        timing = StreamTiming(t0=0.0)
        usage_tokens: int | None = None
        try:
            with gevent.Timeout(
                runtime.options.llm_total_timeout, _StreamError("timeout", "total timeout")
            ):
                usage_tokens = self._exchange(base_url, path, body, record, timing)
            record.ok = True
        except _StreamError as exc:
            record.error_kind, record.error_message = exc.kind, str(exc)[:300]
        except Exception as exc:  # never lose a request: whatever broke, it gets its record
            record.error_kind = "bad_payload"
            record.error_message = f"unexpected {type(exc).__name__}: {exc}"[:300]
        except gevent.GreenletExit:
            record.error_kind, record.error_message = "cancelled", "stopped by the load test"
            self._finish(record, timing, usage_tokens)
            self._drop_client(base_url)
            raise
        if not record.ok:
            self._drop_client(base_url)
        return self._finish(record, timing, usage_tokens)

    def _finish(
        self, record: RequestRecord, timing: StreamTiming, usage_tokens: int | None
    ) -> RequestRecord:
        if timing.t0 and timing.end_time != timing.end_time:  # nan: set the end now
            timing.end_time = perf_counter()
        if timing.t0:
            summarize_stream(record, timing, usage_tokens)
        self.runtime.request_done(record, timing)
        return record

    def _drop_client(self, base_url: str) -> None:
        client = self._clients.pop(base_url, None)
        if client is not None:
            client.close()

    def _exchange(
        self, base_url: str, path: str, body: bytes, record: RequestRecord, timing: StreamTiming
    ) -> int | None:
        """Write the request, read the response; fills ``timing``. Returns usage tokens."""
        client = self._client_for(base_url)
        headers = {**self.runtime.headers, "X-Request-Id": record.request_id}
        record.start_wall_s = time.time()
        timing.t0 = perf_counter()
        try:
            resp = client.request("POST", path, body=body, headers=headers)
        except (ConnectionRefusedError, ConnectionResetError, HTTPConnectionClosed) as exc:
            raise _StreamError("connect", f"{type(exc).__name__}: {exc}") from None
        except HTTPParseError as exc:  # a garbled or cut response head
            raise _StreamError("bad_payload", f"bad response head: {exc}") from None
        except TimeoutError as exc:
            raise _StreamError("timeout", f"no response: {exc}") from None
        except OSError as exc:
            kind = "timeout" if exc.errno == errno.ETIMEDOUT else "connect"
            raise _StreamError(kind, f"{type(exc).__name__}: {exc}") from None
        status = resp.status_code
        record.status_code = status
        try:
            if status >= 400:
                text = self._read_error_body(resp)
                raise _StreamError(
                    classify_http_error(status, text), f"HTTP {status}: {text[:200]}"
                )
            if self.runtime.options.llm_no_stream:
                return self._read_whole(resp, record, timing)
            return self._read_stream(resp, record, timing)
        finally:
            resp.release()

    @staticmethod
    def _read_error_body(resp: Any) -> str:
        try:
            return resp.read(_ERROR_BODY_LIMIT).decode("utf-8", "replace")
        except Exception:  # a broken error body is still an HTTP error
            return ""

    def _read_whole(self, resp: Any, record: RequestRecord, timing: StreamTiming) -> int | None:
        try:
            data = resp.read()
        except (OSError, HTTPConnectionClosed, HTTPParseError) as exc:
            raise _read_failure(exc) from None
        timing.end_time = perf_counter()
        try:
            chunk = sse.parse_response_body(data)
        except ValueError as exc:
            raise _StreamError("bad_payload", str(exc)) from None
        if chunk.prompt_tokens >= 0:
            record.input_tokens, record.input_tokens_estimated = chunk.prompt_tokens, False
        return chunk.completion_tokens if chunk.completion_tokens >= 0 else None

    def _read_stream(self, resp: Any, record: RequestRecord, timing: StreamTiming) -> int | None:
        """The per-chunk loop: the hot path of the whole tool."""
        times = timing.chunk_times
        tokens = timing.chunk_tokens
        parse = sse.parse_chunk
        data_payload = sse.data_payload
        first_token_hook = self.runtime.first_token_hook
        usage_tokens: int | None = None
        prev_usage = 0
        readline = resp.readline
        done = False
        while True:
            try:
                line = readline(b"\n")
            except (OSError, HTTPConnectionClosed, HTTPParseError) as exc:
                raise _read_failure(exc) from None
            now = perf_counter()
            if not line:
                break
            payload = data_payload(line)
            if payload is None:
                continue
            kind, chunk = parse(payload)
            if kind == sse.KIND_CHUNK:
                assert chunk is not None
                if chunk.error is not None:
                    raise _StreamError(classify_http_error(500, chunk.error), chunk.error[:200])
                if chunk.completion_tokens >= 0:
                    usage_tokens = chunk.completion_tokens
                    if chunk.prompt_tokens >= 0:
                        record.input_tokens = chunk.prompt_tokens
                        record.input_tokens_estimated = False
                    if chunk.reasoning_tokens >= 0:
                        record.reasoning_tokens = chunk.reasoning_tokens
                if chunk.content or chunk.reasoning:
                    if not times and first_token_hook is not None:
                        first_token_hook(record, now - timing.t0)
                    times.append(now)
                    if chunk.completion_tokens >= 0:  # continuous usage: tokens in this chunk
                        tokens.append(chunk.completion_tokens - prev_usage)
                        prev_usage = chunk.completion_tokens
                    else:
                        tokens.append(0)
                    if chunk.content and timing.first_content_time != timing.first_content_time:
                        timing.first_content_time = now
            elif kind == sse.KIND_DONE:
                done = True
                timing.end_time = now
                break
            elif kind == sse.KIND_BAD:
                timing.end_time = now
                raise _StreamError("bad_payload", f"malformed chunk: {line[:120]!r}")
        if not done:
            timing.end_time = perf_counter()
            raise _StreamError(
                "stream_broken", f"stream closed after {len(times)} chunks without [DONE]"
            )
        if not resp.message_complete:  # the chunked terminator may follow [DONE] a bit later:
            with gevent.Timeout(_TERMINATOR_WAIT_S, False):  # wait for it, or the connection
                resp.read()  # cannot be reused (every request would pay a new connect)
        return usage_tokens


def _read_failure(exc: BaseException) -> _StreamError:
    if isinstance(exc, TimeoutError | socket.timeout):
        return _StreamError("timeout", f"read timed out: {exc}")
    return _StreamError("stream_broken", f"{type(exc).__name__}: {exc}")


class ChatUser(LLMUser):
    """Streams ``/v1/chat/completions`` (messages as plain strings)."""

    abstract = True
    endpoint = _CHAT


class CompletionUser(LLMUser):
    """Streams ``/v1/completions`` (a plain-text prompt)."""

    abstract = True
    endpoint = _COMPLETIONS

    def build_body(self, prompt: Any, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.runtime.model, "prompt": prompt.prompt}
        self._common_fields(body, max_tokens, self.runtime.options)
        return body
