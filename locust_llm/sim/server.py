"""The simulator's HTTP front: OpenAI routes over the engine, faults, trace and ``/metrics``.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /v1/responses``
(the Responses API: typed events, ``response.completed`` with usage; streaming and not),
``POST /v1/embeddings`` (one prefill of the batch's tokens, then one vector per input),
``GET /v1/models``, ``GET /health``, ``GET /metrics``. Bad requests get an OpenAI-style error
JSON (400 bad body or parameters and requests that cannot fit, 404 unknown model or path, 405
wrong method); nothing a client sends crashes the server.

A streamed answer's head is sent with its first token (or with its failure, which can then
still be a plain 500). Each token is one chunk unless ``tokens_per_chunk`` groups them; the
first chat chunk carries the role, the last one the finish reason, then the usage chunk (when
asked) and ``[DONE]``. Trace timestamps are taken right before the bytes go to the transport.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import weakref
from collections.abc import Sequence
from typing import Any

from locust_llm.sim.config import SimConfig
from locust_llm.sim.engine import Engine, RequestTooLarge, SimRequest, StepResult
from locust_llm.sim.faults import Fault, FaultPlan
from locust_llm.sim.gpu import SimGpuSource
from locust_llm.sim.http import HttpConnection, HttpRequest
from locust_llm.sim.metrics import SimMetrics, build_registry, render
from locust_llm.sim.openai_format import (
    ChunkFormatter,
    ResponsesFormatter,
    embeddings_body,
    error_body,
    full_response,
)
from locust_llm.sim.prefix_cache import block_hashes
from locust_llm.sim.prompt_tokens import EngineTokens
from locust_llm.sim.scheduler import RealTimeScheduler
from locust_llm.sim.trace import TraceWriter, request_times, step_record
from locust_llm.workloads.textgen import (
    OutputLengths,
    WordStream,
    answer_pieces,
    estimate_message_tokens,
    estimate_tokens,
    message_pieces,
    prompt_pieces,
)

CUDA_OOM = (
    "CUDA out of memory. Tried to allocate {mib} MiB (GPU 0; {total:.2f} GiB total capacity; "
    "{free:.2f} GiB free). The KV cache is exhausted."
)


class BadRequest(Exception):
    """A client error: status + message (+ the offending parameter)."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


class SimApp:
    """Everything behind the socket: engine, scheduler, metrics, faults, trace."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config.validated()
        self.engine = Engine(self.config)
        self.model_name = self.config.model_name
        self.metrics = SimMetrics()
        self.gpu_source = SimGpuSource(self.engine)
        self.scheduler = RealTimeScheduler(self.engine, self.deliver)
        self.registry = build_registry(
            self.engine, self.metrics, self.model_name, self.gpu_source, self.scheduler.lag
        )
        self.faults = FaultPlan(self.config.faults, self.config.seed)
        self.lengths = OutputLengths(self.config.output_len, self.config.seed)
        self.engine_tokens = EngineTokens(self.config.tokenizer) if self.config.tokenizer else None
        self.trace = TraceWriter(self.config.trace_path) if self.config.trace_path else None
        self.step_trace = (
            TraceWriter(self.config.step_trace_path, "--step-trace")
            if self.config.step_trace_path
            else None
        )
        # the engine runs on the monotonic clock; trace lines are wall clock
        self.clock_offset_s = time.time() - time.monotonic()
        self.connections: weakref.WeakSet[HttpConnection] = weakref.WeakSet()
        self.request_count = 0
        self.created = int(time.time())

    def connection(self) -> HttpConnection:
        conn = HttpConnection(self.handle, lambda status, msg: error_body(status, msg))
        self.connections.add(conn)
        return conn

    # ---- routing -----------------------------------------------------------------------------
    def handle(self, conn: HttpConnection, req: HttpRequest) -> None:
        try:
            self._route(conn, req)
        except BadRequest as exc:
            conn.respond(exc.status, error_body(exc.status, exc.message, exc.param))

    def _route(self, conn: HttpConnection, req: HttpRequest) -> None:
        path = req.path.rstrip("/") or "/"
        gets = {"/health": self._health, "/v1/models": self._models, "/metrics": self._metrics}
        posts = {
            "/v1/chat/completions": "chat",
            "/v1/completions": "completions",
            "/v1/responses": "responses",
            "/v1/embeddings": "embeddings",
        }
        if path in gets:
            if req.method not in ("GET", "HEAD"):
                raise BadRequest(405, f"{req.method} is not allowed on {path}; use GET")
            gets[path](conn)
        elif path in posts:
            if req.method != "POST":
                raise BadRequest(405, f"{req.method} is not allowed on {path}; use POST")
            self._completion(conn, req, api=posts[path])
        else:
            raise BadRequest(404, f"no route {path}; routes: {', '.join([*gets, *posts])}")

    def _health(self, conn: HttpConnection) -> None:
        conn.respond(200, b"", content_type="text/plain")

    def _models(self, conn: HttpConnection) -> None:
        body = {
            "object": "list",
            "data": [
                {
                    "id": self.model_name,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "locust-llm-sim",
                    "root": self.config.model,
                    "max_model_len": self.config.max_model_len,
                }
            ],
        }
        conn.respond(200, json.dumps(body).encode())

    def _metrics(self, conn: HttpConnection) -> None:
        conn.respond(200, render(self.registry), content_type="text/plain; version=0.0.4")

    # ---- completions -------------------------------------------------------------------------
    def _completion(self, conn: HttpConnection, req: HttpRequest, *, api: str) -> None:
        arrival_wall, arrival_mono = time.time(), time.monotonic()
        chat = api != "completions"
        params = _parse_api_body(req.body, api=api, model_name=self.model_name)
        if self.engine_tokens is not None and api != "embeddings":
            params = self.engine_tokens.counted(params)
        prompt_tokens = params["prompt_tokens"]
        max_tokens, ignore_eos = params["max_tokens"], params["ignore_eos"]
        self.request_count += 1
        number = self.request_count
        drawn = self.lengths.draw()  # drawn for every request, so --seed replays lengths
        room = self.config.max_model_len - prompt_tokens
        if max_tokens is not None:
            output = max_tokens if ignore_eos else min(drawn, max_tokens)
            finish = (
                "length" if output == max_tokens and (ignore_eos or drawn >= max_tokens) else "stop"
            )
        else:
            output, finish = (drawn, "stop") if drawn <= room else (max(room, 1), "length")
        if api == "embeddings":  # one forward pass over the inputs: the first token ends it
            output, finish = 1, "stop"
        fault = self.faults.draw()
        stream = Stream(
            self,
            conn,
            number=number,
            chat=chat,
            api=api,
            params=params,
            output=output,
            finish=finish,
            fault=fault,
            arrival_wall=arrival_wall,
            arrival_mono=arrival_mono,
            client_request_id=req.headers.get("x-request-id", ""),
        )
        if fault is not None and fault.kind in ("http500", "http503", "http429"):
            stream.reject_with_fault(fault)
            return
        hashes: tuple[bytes, ...] = ()
        if self.config.enable_prefix_caching and api != "embeddings":
            # prompt + the answer it will get: a follow-up turn that quotes the answer reuses
            # its blocks too, as in vLLM
            answer = answer_pieces(self.config.seed, number, output, chat=chat)
            hashes = block_hashes([*params["pieces"](), *answer], self.config.block_size)
        front = self.config.front_s(prompt_tokens)  # the API server and the tokenizer first
        if front > 0:
            asyncio.get_running_loop().call_later(
                front, self._enter, stream, prompt_tokens, max_tokens, hashes, arrival_mono + front
            )
            return
        self._enter(stream, prompt_tokens, max_tokens, hashes, arrival_mono)

    def _enter(
        self,
        stream: Stream,
        prompt_tokens: int,
        max_tokens: int | None,
        hashes: tuple[bytes, ...],
        at_mono: float,
    ) -> None:
        """The request reaches the engine (unless its client left while it was in the front)."""
        if stream.done:
            return
        try:
            sim_req = self.engine.add(
                prompt_tokens,
                stream.output,
                arrival_s=at_mono,
                max_tokens=max_tokens,
                block_hashes=hashes,
            )
        except RequestTooLarge as exc:
            if self.config.oom:
                stream.fail("oom")
            else:
                stream.reject(400, str(exc), "messages" if stream.chat else "prompt")
            return
        stream.attach(sim_req)
        self.scheduler.wake()

    def deliver(self, result: StepResult) -> None:
        """Hand a finished step's tokens and failures to their streams (the scheduler calls)."""
        now = time.monotonic()
        if self.step_trace is not None:
            self.step_trace.write(
                step_record(
                    result,
                    clock_offset_s=self.clock_offset_s,
                    kv_usage=self.engine.kv_usage_ratio,
                )
            )
        delay = self.config.detokenize_s_per_token  # from the step's end to the socket
        if delay > 0:
            asyncio.get_running_loop().call_later(delay, self._hand_out, result)
        else:
            self._hand_out(result, now)

    def _hand_out(self, result: StepResult, now: float | None = None) -> None:
        """The step's tokens and failures to their streams."""
        now = time.monotonic() if now is None else now
        for req in result.emitted:
            stream = req.stream
            if isinstance(stream, Stream):
                stream.on_token(now)
        for req in result.failed:
            stream = req.stream
            if isinstance(stream, Stream):
                stream.fail(req.outcome)


def _drop(conn: HttpConnection) -> None:
    hook, conn.on_close = conn.on_close, None
    conn.abort()
    if hook is not None:
        hook()


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest(400, "request body is not valid JSON") from None
    if not isinstance(data, dict):
        raise BadRequest(400, "request body must be a JSON object")
    return data


def _parse_api_body(body: bytes, *, api: str, model_name: str) -> dict[str, Any]:
    """Validate a request body of ``api``; BadRequest names the first problem. Responses and
    embeddings requests are read as the chat / completion request they amount to."""
    data = _json_object(body)
    if api == "responses":
        return {**_parse_body(_responses_as_chat(data), chat=True, model_name=model_name)}
    if api == "embeddings":
        inputs = data.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if (
            not isinstance(inputs, list)
            or not inputs
            or not all(isinstance(x, str) and x for x in inputs)
        ):
            raise BadRequest(400, "'input' must be a non-empty string or list of strings", "input")
        texts = list(inputs)
        params = _parse_body({**data, "prompt": " ".join(texts)}, chat=False, model_name=model_name)
        params["prompt_tokens"] = sum(max(estimate_tokens(t), 1) for t in texts)
        params["inputs"], params["stream"] = texts, False
        return params
    return _parse_body(data, chat=api == "chat", model_name=model_name)


def _responses_as_chat(data: dict[str, Any]) -> dict[str, Any]:
    """A Responses API request as the chat request it amounts to."""
    given = data.get("input")
    if isinstance(given, str):
        messages: list[Any] = [{"role": "user", "content": given}]
    elif isinstance(given, list) and given:
        messages = list(given)
    else:
        raise BadRequest(400, "'input' must be a string or a non-empty list of messages", "input")
    if isinstance(data.get("instructions"), str) and data["instructions"]:
        messages.insert(0, {"role": "system", "content": data["instructions"]})
    chat: dict[str, Any] = {
        "model": data.get("model"),
        "messages": messages,
        "stream": data.get("stream", False),
        "stream_options": {"include_usage": True},
        "ignore_eos": data.get("ignore_eos", False),
    }
    if "max_output_tokens" in data:
        chat["max_tokens"] = data["max_output_tokens"]
    return chat


def _parse_body(data: dict[str, Any], *, chat: bool, model_name: str) -> dict[str, Any]:
    """Validate a chat or completion request; BadRequest names the first problem."""
    model = data.get("model")
    if model is not None and model != model_name:
        raise BadRequest(404, f"The model `{model}` does not exist.", "model")
    if chat:
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest(400, "'messages' must be a non-empty list", "messages")
        if not all(isinstance(m, dict) and "role" in m for m in messages):
            raise BadRequest(400, "each message must be an object with a 'role'", "messages")
        prompt_tokens = estimate_message_tokens(messages)

        def pieces() -> Sequence[str | int]:
            return message_pieces(messages)
    else:
        prompt = data.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            prompt_tokens = estimate_tokens(prompt)
            text = prompt

            def pieces() -> Sequence[str | int]:
                return prompt_pieces(text)
        elif isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
            prompt_tokens = len(prompt)
            ids = prompt

            def pieces() -> Sequence[str | int]:
                return ids
        else:
            raise BadRequest(400, "'prompt' must be a string (or a list of token ids)", "prompt")
    max_tokens = None
    for key in ("max_completion_tokens", "max_tokens"):
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise BadRequest(400, f"'{key}' must be an integer >= 1, got {value!r}", key)
        max_tokens = value if max_tokens is None else max_tokens
    options = data.get("stream_options") or {}
    if not isinstance(options, dict):
        raise BadRequest(400, "'stream_options' must be an object", "stream_options")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(400, "'stream' must be true or false", "stream")
    return {
        "prompt_tokens": max(prompt_tokens, 1),
        "pieces": pieces,  # () -> the prompt's tokens, for the prefix cache's block hashes
        "max_tokens": max_tokens,
        "ignore_eos": bool(data.get("ignore_eos", False)),
        "stream": stream,
        "include_usage": bool(options.get("include_usage", False)),
        "continuous_usage": bool(options.get("continuous_usage_stats", False)),
        # what an engine's own tokenizer counts (SimConfig.tokenizer): the chat or the text
        "messages": data.get("messages") if chat else None,
        "text": data.get("prompt") if isinstance(data.get("prompt"), str) else None,
    }


class Stream:
    """One answer in flight: turns engine tokens into bytes, applies its fault, traces it."""

    def __init__(
        self,
        app: SimApp,
        conn: HttpConnection,
        *,
        number: int,
        chat: bool,
        params: dict[str, Any],
        api: str = "",
        output: int,
        finish: str,
        fault: Fault | None,
        arrival_wall: float,
        arrival_mono: float,
        client_request_id: str = "",
    ) -> None:
        self.app, self.conn, self.chat = app, conn, chat
        self.api = api or ("chat" if chat else "completions")
        self.inputs: list[str] = params.get("inputs", [])
        self.client_request_id = client_request_id
        self.streaming: bool = params["stream"]
        self.prompt_tokens: int = params["prompt_tokens"]
        self.output, self.finish_reason, self.fault = output, finish, fault
        # a reasoning model's chat answer opens with its reasoning (the rest is the answer)
        self.reasoning = min(app.config.reasoning_tokens, output) if self.api == "chat" else 0
        self.reasoning_text: list[str] = []
        self.arrival_wall, self.arrival_mono = arrival_wall, arrival_mono
        self.number = number
        prefix = {"chat": "chatcmpl", "responses": "resp", "embeddings": "embd"}.get(self.api)
        self.id = f"{prefix or 'cmpl'}-sim{number:08d}"
        self.words = WordStream(app.config.seed, number)
        self.fmt: ChunkFormatter | ResponsesFormatter = ChunkFormatter(
            chat=chat,
            request_id=self.id,
            model=app.model_name,
            prompt_tokens=self.prompt_tokens,
            include_usage=params["include_usage"],
            continuous_usage=params["continuous_usage"],
        )
        if self.api == "responses":
            self.fmt = ResponsesFormatter(
                request_id=self.id, model=app.model_name, prompt_tokens=self.prompt_tokens
            )
        self.req: SimRequest | None = None
        self.generated = 0
        self.pending: list[str] = []
        self.text: list[str] = []
        self.chunks_sent = 0
        self.headers_sent = False
        self.done = False
        self.first_token_wall = math.nan
        self.first_answer_wall = math.nan  # first token after the reasoning
        self.last_token_wall = math.nan
        self.last_mono = math.nan
        self.tokens_sent = 0
        self.hold_until = 0.0  # monotonic; bytes wait in self.held until then
        self.held: list[tuple[bytes, int, bool]] = []
        self._timer: asyncio.TimerHandle | None = None
        if fault is not None and fault.kind == "slow_first_byte":
            self._hold(arrival_mono + fault.arg)

    # ---- outcomes without the engine ----------------------------------------------------------
    def reject_with_fault(self, fault: Fault) -> None:
        status = int(fault.kind[4:])
        headers = [("Retry-After", f"{fault.arg:g}")] if status == 429 else []
        message = {
            500: "Internal server error (injected fault)",
            503: "Service unavailable (injected fault)",
            429: "Rate limit reached (injected fault); retry later",
        }[status]
        self.conn.respond(status, error_body(status, message), headers=headers)
        self._complete(f"fault:{fault.kind}", status)

    def reject(self, status: int, message: str, param: str | None) -> None:
        self.conn.respond(status, error_body(status, message, param))
        self._complete("rejected", status)

    def attach(self, req: SimRequest) -> None:
        self.req = req
        req.stream = self
        self.conn.on_close = self.client_gone

    # ---- engine events -----------------------------------------------------------------------
    def on_token(self, now: float) -> None:
        if self.done:
            return
        metrics = self.app.metrics
        if self.generated == 0:
            metrics.ttft.observe(now - self.arrival_mono)
        else:
            metrics.itl.observe(now - self.last_mono)
        self.last_mono = now
        self.generated += 1
        word = self.words.next_word()
        last = self.generated >= self.output
        thinking = self.generated <= self.reasoning
        if not self.streaming:
            (self.reasoning_text if thinking else self.text).append(word)
            if last and self.api in ("responses", "embeddings"):
                self._send(self._whole_other_api(), self.generated, last=True)
            elif last:
                body = full_response(
                    chat=self.chat,
                    request_id=self.id,
                    model=self.app.model_name,
                    text="".join(self.text),
                    prompt_tokens=self.prompt_tokens,
                    completion_tokens=self.generated,
                    finish_reason=self.finish_reason,
                    created=self.fmt.created,
                    cached_tokens=self.req.cached_tokens if self.req is not None else 0,
                    reasoning_text="".join(self.reasoning_text),
                    reasoning_tokens=self.reasoning,
                )
                self._send(body, self.generated, last=True)
            return
        self.pending.append(word)
        ends_reasoning = self.generated == self.reasoning  # a chunk is reasoning or answer
        if len(self.pending) < self.app.config.tokens_per_chunk and not (last or ends_reasoning):
            return
        fmt = self.fmt
        self.chunks_sent += 1
        data = fmt.role() if self.chunks_sent == 1 else b""
        fault = self.fault
        if fault is not None and fault.kind == "malformed" and self.chunks_sent == int(fault.arg):
            data += b'data: {"id": "' + self.id.encode() + b'", "choices": [{"delta": {"con\n\n'
        else:
            data += fmt.content(
                "".join(self.pending),
                self.generated,
                self.finish_reason if last else None,
                reasoning=thinking,
            )
        self.pending.clear()
        if last:
            cached = self.req.cached_tokens if self.req is not None else 0
            data += fmt.usage(self.generated, cached, self.reasoning) + fmt.done
        self._send(data, self.generated, last=last)
        if fault is None or self.done:
            return
        if fault.kind == "disconnect" and self.generated >= fault.arg and not last:
            self._flush_held()
            self.conn.abort()
            self._end_engine()
            self._complete("fault:disconnect", 200)
        elif fault.kind == "stall" and self.chunks_sent == 1 and not last:
            self._hold(time.monotonic() + fault.arg)

    def _whole_other_api(self) -> bytes:
        """The non-streamed body of a Responses API or embeddings request."""
        cached = self.req.cached_tokens if self.req is not None else 0
        if isinstance(self.fmt, ResponsesFormatter):
            text = "".join(self.text)
            return self.fmt.whole(text, self.generated, self.finish_reason, cached)
        return embeddings_body(
            model=self.app.model_name, inputs=self.inputs, prompt_tokens=self.prompt_tokens
        )

    def fail(self, kind: str) -> None:
        """The engine failed the request (``oom``)."""
        if self.done:
            return
        total = self.app.engine.gpu.memory_bytes / 1024**3
        free = total - self.app.engine.memory_used_bytes_per_gpu / 1024**3
        message = CUDA_OOM.format(
            mib=self.app.engine.block_bytes // 2**20 or 1, total=total, free=max(free, 0.0)
        )
        if not self.headers_sent and not self.held:
            self.conn.on_close = None
            self.conn.respond(500, error_body(500, message))
        else:
            if self.held or self.hold_until:
                self._flush_held()
            event = b"data: " + error_body(500, message) + b"\n\n" + self.fmt.done
            self._send(event, 0, last=True)
        self._complete(kind, 500)

    def client_gone(self) -> None:
        if not self.done:
            self._end_engine()
            # a client that leaves during an injected fault (a stall, a malformed chunk) left
            # because of it: the trace names the fault, not a plain abort
            outcome = f"fault:{self.fault.kind}" if self.fault is not None else "aborted"
            self._complete(outcome, 200 if self.headers_sent else 0)

    def _end_engine(self) -> None:
        if self.req is not None:
            self.app.engine.abort(self.req)

    # ---- writing -----------------------------------------------------------------------------
    def _hold(self, until: float) -> None:
        self.hold_until = until
        loop = asyncio.get_running_loop()
        self._timer = loop.call_at(loop.time() + (until - time.monotonic()), self._flush_held)

    def _send(self, data: bytes, tokens: int, *, last: bool) -> None:
        if self.hold_until and time.monotonic() < self.hold_until:
            self.held.append((data, tokens, last))
            return
        self._write(data, tokens, last)

    def _flush_held(self) -> None:
        self.hold_until = 0.0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        held, self.held = self.held, []
        if held and not self.conn.closed:
            data = b"".join(d for d, _, _ in held)
            self._write(data, held[-1][1], any(last for _, _, last in held))

    def _write(self, data: bytes, tokens: int, last: bool) -> None:
        conn, now = self.conn, time.time()
        if tokens:
            if math.isnan(self.first_token_wall):
                self.first_token_wall = now
            if tokens > self.reasoning and math.isnan(self.first_answer_wall):
                self.first_answer_wall = now
            self.last_token_wall = now
            self.tokens_sent = tokens
        if not self.streaming:
            conn.respond(200, data)
        elif not self.headers_sent:
            self.headers_sent = True
            if last:
                conn.start_stream(first=data)
                conn.end_stream()
            else:
                conn.start_stream(first=data)
        elif last:
            conn.end_stream(data)
        else:
            conn.write_chunk(data)
        if last and not self.done:
            outcome = "ok" if self.req is not None and self.req.outcome == "ok" else None
            if outcome is not None and self.req is not None:
                self.app.metrics.e2e.observe(time.monotonic() - self.arrival_mono)
                self.app.metrics.phases(self.req)
                self.app.metrics.finished(self.finish_reason)
                fault = self.fault  # a malformed chunk went out: the client reads a bad payload
                fired = fault is not None and fault.kind == "malformed"
                fired = fired and fault is not None and self.chunks_sent >= int(fault.arg)
                self._complete("fault:malformed" if fired else "ok", 200)

    def _complete(self, outcome: str, status: int) -> None:
        if self.done:
            return
        self.done = True
        if self._timer is not None:
            self._timer.cancel()
        trace = self.app.trace
        if trace is None:
            return
        req = self.req
        times = {"admission": math.nan, "engine_first_token": math.nan, "engine_finish": math.nan}
        if req is not None:
            # engine times on one wall-clock offset, shared with the step trace
            times = request_times(req, clock_offset_s=self.app.clock_offset_s)
            del times["arrival"]
        trace.write(
            {
                "id": self.id,
                "client_request_id": self.client_request_id,
                "endpoint": self.api,
                "stream": self.streaming,
                "arrival": self.arrival_wall,
                **times,
                "first_token": self.first_token_wall,
                "first_answer_token": self.first_answer_wall,
                "last_token": self.last_token_wall,
                "prompt_tokens": self.prompt_tokens,
                "cached_tokens": req.cached_tokens if req is not None else 0,
                "tokens_sent": self.tokens_sent,
                "reasoning_tokens": self.reasoning,
                "preemptions": req.preemptions if req is not None else 0,
                "fault": self.fault.kind if self.fault is not None else None,
                "outcome": outcome,
                "status": status,
            }
        )


class SimServer:
    """The simulator listening on a socket. ``await start()``, read ``url``, ``await stop()``."""

    def __init__(self, config: SimConfig) -> None:
        self.app = SimApp(config)
        self.config = self.app.config
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        host = self.config.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self.app.connection,
            self.config.host,
            self.config.port,
            reuse_address=True,
            backlog=self.config.listen_backlog,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self.app.scheduler.start()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        await self.app.scheduler.stop()
        for conn in list(self.app.connections):
            _drop(conn)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        for trace in (self.app.trace, self.app.step_trace):
            if trace is not None:
                trace.close()
