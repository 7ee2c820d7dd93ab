"""LLMUser, ChatUser, CompletionUser: stream one completion per task and time every token.

Subclass one in a locustfile; every task is one request. Settings are class attributes, each
``None`` by default, meaning "the ``--llm-*`` option" (see :mod:`locust_llm.options.settings`)::

    class Small(ChatUser):
        host = "http://127.0.0.1:8000"   # Locust's own attribute; --host overrides it
        model = "qwen2.5-0.5b"           # --llm-model
        api = "chat"                     # an API adapter name: chat, completions, ...
        dataset = "openqa"               # --llm-dataset
        max_tokens = "uniform:64,256"    # --llm-max-tokens: output lengths
        input_len = 512                  # --llm-input-len (random data set)
        connect_timeout_s = 5.0          # --llm-connect-timeout (also read_/total_timeout_s)

Each request fires exactly one Locust ``request`` event (name = endpoint, response_time = E2E in
ms, response_length = output tokens, ``context=self.context()``, ``start_time``; the failure as
the exception). The response is read by :mod:`locust_llm.client.stream` (pure): lines with
``readline(b"\\n")``, which returns as soon as a line's bytes are in, so every chunk is
timestamped (``perf_counter``) on arrival; bigger fixed-size reads batch tokens and skew TTFT and
TPOT (see docs/client.md for the measurement). This module adds what needs Locust and gevent:
the total timeout, the connection's keep-alive and the events.

A failure never kills the user: every request sent ends as exactly one ``RequestRecord``,
successful or with one of ``metrics.ERROR_KINDS``: ``cancelled`` when the load test itself
stopped the request, ``client_error`` when locust-llm's own code raised (reported through
Locust's ``user_error`` event, never as the server's failure).
"""

from __future__ import annotations

import itertools
import json
import logging
import random
import time
import uuid
from typing import Any, ClassVar
from urllib.parse import urlsplit

import gevent
from locust import User, constant, task
from locust.exception import StopUser

from locust_llm.client import lifecycle
from locust_llm.client.apis.base import ApiAdapter, BodyRequest, get_api
from locust_llm.client.backoff import Backoff
from locust_llm.client.events import llm_events
from locust_llm.client.kernel_transport import select_transport
from locust_llm.client.runtime import runtime
from locust_llm.client.stream import Exchange, StreamReader
from locust_llm.client.transport import READ_ERRORS, Transport
from locust_llm.errors import RequestFailed
from locust_llm.metrics import NAN, RequestRecord
from locust_llm.options.config import ClientOptions
from locust_llm.options.settings import CLASS_ATTRIBUTES, UserSettings, resolve_settings
from locust_llm.workloads.sessions import answer_text

logger = logging.getLogger("locust_llm")

_TERMINATOR_WAIT_S = 0.05
_TERMINATOR_BYTES = 4096  # what may follow [DONE] (the chunked terminator, trailers) and be read


class LLMUser(User):
    """Base of the LLM users: one streamed request per task, exactly one record per request.

    Set ``api`` (a registered adapter name) or subclass :class:`ChatUser` /
    :class:`CompletionUser`; the class attributes below override the ``--llm-*`` options for
    this class only. Override :meth:`build_body` to shape requests further.
    """

    abstract = True
    api: ClassVar[str] = "chat"
    model: ClassVar[str | None] = None
    dataset: ClassVar[str | None] = None
    max_tokens: ClassVar[int | str | None] = None
    input_len: ClassVar[int | str | None] = None
    connect_timeout_s: ClassVar[float | None] = None
    read_timeout_s: ClassVar[float | None] = None
    total_timeout_s: ClassVar[float | None] = None
    #: how requests reach the server (the seam for another transport; None: --llm-transport)
    transport_class: ClassVar[type[Transport] | None] = None
    #: when a list, the payloads of the answer's content chunks (or its whole body) are
    #: appended to it: multi-turn sessions read the server's answer from them
    answer_sink: list[bytes] | None = None
    _preconnected = False  # --llm-preconnect done (per instance once it ran)

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        self.runtime = runtime(environment)
        self.options: ClientOptions = self.runtime.options
        self.settings: UserSettings = self.runtime.settings_for(type(self))
        self.adapter: ApiAdapter = get_api(self.settings.api)
        self.endpoint = self.adapter.path
        self.user_index = self.runtime.next_user_index()
        self.rng = random.Random(self.runtime.prompt_seed(self.user_index))
        hosts = list(self.settings.hosts)
        # round robin over the servers, each user starting at a different one
        start = self.user_index % len(hosts) if hosts else 0
        self._hosts = itertools.cycle(hosts[start:] + hosts[:start]) if hosts else None
        transport_class = self.transport_class or select_transport(self.options.transport)
        self.transport = transport_class(
            connect_timeout_s=self.settings.connect_timeout_s,
            read_timeout_s=self.settings.read_timeout_s,
            insecure=self.options.insecure,
            ca_bundle=self.options.ca_bundle,
            on_reconnect=self.runtime.count_reconnect,
        )
        self.backoff = Backoff(cap_s=self.options.backoff_max_s)
        self.reader = StreamReader(
            self.adapter,
            stream=not self.options.no_stream,
            read_errors=READ_ERRORS,
            on_first_token=llm_events.first_token.fire,
            redact=self.runtime.redact,
            max_event_bytes=self.options.max_event_bytes,
            max_body_bytes=self.options.max_body_bytes,
        )

    @classmethod
    def resolve_settings(cls, options: ClientOptions, locust_host: str | None) -> UserSettings:
        """This class's settings: its attributes, the options where an attribute is None;
        ``locust_host`` (``--host``) wins over the class's ``host``, as in Locust."""
        return resolve_settings(
            options,
            host=locust_host or cls.host,
            api=cls.api,
            **{name: getattr(cls, name) for name in CLASS_ATTRIBUTES},
        )

    # ---- Locust lifecycle ---------------------------------------------------------------------
    def on_stop(self) -> None:
        self.transport.close()

    def _stopping(self) -> bool:
        """True once Locust has asked this user to stop (graceful stop)."""
        return getattr(self, "_state", None) == "stopping"

    @task
    def generate(self) -> None:
        """One request: wait for a stage permit and (open loop) its slot; send it, record it.

        A user that Locust asks to stop while it waits sends nothing more (StopUser); an
        open-loop slot whose stage ended before it came due is dropped, not sent in the next.
        """
        gate = self.runtime.gate
        if self.options.preconnect and not self._preconnected:
            self._preconnect()
        if not gate.acquire(self._stopping):
            raise StopUser()
        stage = gate.stage
        scheduled = gate.claim_arrival(self._stopping)
        if scheduled is not None and not (
            scheduled == scheduled and gate.wait_for_arrival(scheduled, stage, self._stopping)
        ):
            gate.release(stage)
            if self._stopping():
                raise StopUser()
            return
        record = self.send(scheduled_wall_s=NAN if scheduled is None else scheduled)
        delay_s = self.backoff.after(record.error_kind, self.rng)
        if delay_s > 0:  # the server is unreachable: wait (the stop or a new stage ends it)
            self.runtime.backing_off(delay_s, self.backoff.failures)
            self.runtime.recorder.backing_off += 1  # live: users waiting now
            try:
                gate.wait_until(time.time() + delay_s, stage, self._stopping)
            finally:
                self.runtime.recorder.backing_off -= 1

    def _preconnect(self) -> None:
        """``--llm-preconnect``: open a connection to each of the user's servers before its
        first request (a server that cannot be reached fails that request, with its kind)."""
        self._preconnected = True
        for base_url in dict.fromkeys(self.settings.hosts):
            try:
                self.transport.preconnect(base_url)  # bounded by the connect timeout
            except OSError:
                self.transport.drop(base_url)

    # ---- request building ---------------------------------------------------------------------
    def build_body(self, prompt: Any, max_tokens: int) -> dict[str, Any]:
        """The JSON body of one request (the API adapter's shape)."""
        opts = self.options
        return self.adapter.build_body(
            BodyRequest(
                model=self.runtime.model_for(self.settings),
                prompt=prompt,
                max_tokens=max_tokens,
                stream=opts.stream,
                max_tokens_field=opts.max_tokens_field,
                temperature=opts.temperature,
                ignore_eos=opts.ignore_eos,
                extra_body=opts.extra_body,
            )
        )

    def next_host(self) -> str:
        if self._hosts is None:
            raise RequestFailed("client_error", "no --host given: the server's base URL")
        return next(self._hosts)

    # ---- sending ------------------------------------------------------------------------------
    def send(self, *, scheduled_wall_s: float = NAN) -> RequestRecord:
        """Send one request now and return its record (already recorded and reported)."""
        rt = self.runtime
        ex = Exchange(
            RequestRecord(
                request_id=str(uuid.uuid4()),  # UUID4: some servers refuse any other X-Request-Id
                endpoint=self.endpoint,
                worker_id=rt.worker_id,
                user_id=self.user_index,
                stage=rt.gate.stage,
                scheduled_wall_s=scheduled_wall_s,
            ),
            redact=rt.redact,
        )
        rt.request_started()
        debug_sink = rt.is_debug and self.answer_sink is None  # the debug path shows the text
        if debug_sink:
            self.answer_sink = []
        try:
            return self._send(ex)
        finally:
            if debug_sink:
                self.answer_sink = None

    def _send(self, ex: Exchange) -> RequestRecord:
        record = ex.record
        base_url = ""
        try:
            with gevent.Timeout(
                self.settings.total_timeout_s, RequestFailed("timeout", "total timeout")
            ):
                base_url = self.next_host()
                body = self._prepare(record)
                path = urlsplit(base_url).path.rstrip("/") + self.endpoint
                usage_tokens = self._exchange(base_url, path, body, ex)
            ex.succeeded(usage_tokens)
        except RequestFailed as exc:
            ex.failed(exc)
        except Exception as exc:  # our own bug: never lose a request, never blame the server
            ex.failed(exc)  # client_error
            logger.exception("locust-llm: client error in %s", type(self).__name__)
            self.environment.events.user_error.fire(
                user_instance=self, exception=exc, tb=exc.__traceback__
            )
        except gevent.GreenletExit:
            ex.cancelled()
            self._finish(ex)
            self.transport.drop(base_url)
            raise
        if not record.ok and base_url:
            self.transport.drop(base_url)
        return self._finish(ex)

    def _prepare(self, record: RequestRecord) -> bytes:
        """Draw the prompt and output cap; fill the record's model and input estimate."""
        prompt = self.next_prompt(record)
        max_tokens = self.runtime.output_cap(self.settings, prompt, self.rng)
        body_obj = self.build_body(prompt, max_tokens)
        record.model = str(body_obj.get("model", ""))
        record.input_tokens = prompt.input_tokens_estimate
        record.input_tokens_estimated = True
        return json.dumps(body_obj).encode()

    def next_prompt(self, record: RequestRecord) -> Any:
        """The next request's :class:`~locust_llm.workloads.datasets.Prompt` (the class's data set);
        sessions and trace replay override it and tag ``record`` (session, turn, trace line)."""
        return self.runtime.dataset_for(self.settings).next_request(self.rng)

    def _finish(self, ex: Exchange) -> RequestRecord:
        record = ex.finish()
        if self.runtime.is_debug and self.answer_sink is not None:  # for the debug line
            self.runtime.debug_answers[record.request_id] = answer_text(self.answer_sink)
        self.runtime.request_done(self, record, ex.timing)
        return record

    def _exchange(self, base_url: str, path: str, body: bytes, ex: Exchange) -> int | None:
        """Write the request, read the response into ``ex``. Returns usage tokens."""
        headers = self.runtime.headers
        if self.options.request_id_header:
            headers = {**headers, "X-Request-Id": ex.record.request_id}
        resp = self.transport.post(
            base_url, path, body, headers, before_send=ex.stamp_send, after_send=ex.stamp_sent
        )
        try:
            usage_tokens = self.reader.read(resp, ex, self.answer_sink)
            if self.reader.streamed and not resp.message_complete:
                # the chunked terminator may follow [DONE] a bit later: wait for it, or the
                # connection cannot be reused (every request would pay a new connect)
                with gevent.Timeout(_TERMINATOR_WAIT_S, False):
                    resp.read(_TERMINATOR_BYTES)  # more than that: the connection is dropped
            return usage_tokens
        finally:
            self.transport.release(base_url, resp)


lifecycle.install(LLMUser)  # the --llm-* options and Locust listeners, once per process


class ChatUser(LLMUser):
    """Streams ``/v1/chat/completions`` (messages as plain strings)."""

    abstract = True
    api = "chat"


class CompletionUser(LLMUser):
    """Streams ``/v1/completions`` (a plain-text prompt)."""

    abstract = True
    api = "completions"


class Chat(ChatUser):
    """One streamed chat completion after another (closed loop, no think time).

    The user class of the ready locustfiles and of ``locust-llm demo`` / ``run``; its ``host``
    is the default for Locust's single-user debug path (``python locustfiles/chat.py``), which
    ``--host`` or ``$LOCUST_HOST`` override as usual.
    """

    wait_time = constant(0)
    host = "http://127.0.0.1:8000"
