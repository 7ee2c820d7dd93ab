"""SessionUser and TraceReplayUser: the user classes of multi-turn sessions and trace replay.

``SessionUser`` runs one conversation at a time, one request per turn, carrying the history
(the server's answers by default), with ``think_time_s`` between turns; every record carries
``session_id`` and ``turn``. ``TraceReplayUser`` sends the lines of ``trace`` at their trace
times (divided by ``speedup``) from the replay's origin, open loop: a pool of users, each
claiming the next line of this process's partition and waiting for its time; its record keeps
the scheduled time (dispatch delay = start - scheduled) and ``trace_line``. A line the run
ends before sending is recorded as ``cancelled`` (counted, never silently dropped). Run it
with :class:`locust_llm.client.shapes.TraceShape`, which starts the replay on every worker at one
origin. A worker lost mid-replay leaves its lines not yet due to the live workers (they send
them on the same schedule); its lines that were due and never reported get one ``cancelled``
record each from the master ("lost with worker ..."). See docs/workloads.md.
"""

from __future__ import annotations

import math
import time
import uuid
from typing import Any, ClassVar, NoReturn

import gevent
from locust import events
from locust.exception import StopUser

from locust_llm.client import shares as parts
from locust_llm.client.apis.base import get_api
from locust_llm.client.events import llm_events
from locust_llm.client.user import ChatUser, LLMUser
from locust_llm.metrics import RequestRecord, StreamTiming
from locust_llm.workloads.partition import Partition
from locust_llm.workloads.prompt import Prompt
from locust_llm.workloads.replay import Replay, TraceBook, load_replay
from locust_llm.workloads.sessions import (
    HISTORY_MODES,
    Conversation,
    SessionBook,
    ThinkTime,
    answer_text,
    flatten,
    load_sessions,
    message_tokens,
)
from locust_llm.workloads.traces import (
    MOONCAKE_BLOCK_TOKENS,
    TraceLine,
    trace_prompt,
)

parts.install()

_POLL_S = 0.05
#: a lost worker's lines due later than this from now go to the live workers (time for the
#: hand-over message to reach them); earlier ones are recorded as lost
HAND_OVER_LEAD_S = 0.5
_books: dict[tuple[int, type], Any] = {}
_lost_lines: dict[int, int] = {}  # master: environment -> lines recorded as lost with a worker


def _book(user: Any, make: Any) -> Any:
    """One shared object per (process runtime, user class): the users' common cursor."""
    key = (id(user.runtime), type(user))
    book = _books.get(key)
    if book is None or book[0] is not user.runtime:
        book = _books[key] = (user.runtime, make())
    return book[1]


def _share(user: Any) -> Partition:
    """This worker's share, once the master has said it (a new worker waits for the answer)."""
    part = parts.partition(user.environment)
    while not part.known:
        if user._stopping() or user.runtime.gate.stopped:
            raise StopUser()
        gevent.sleep(_POLL_S)
    if part.empty:
        _idle_until_stopped(user)
    return part


def _idle_until_stopped(user: Any) -> NoReturn:
    """Send nothing more: wait for the run to stop this user."""
    while not (user._stopping() or user.runtime.gate.stopped):
        gevent.sleep(_POLL_S * 4)
    raise StopUser()


class SessionUser(ChatUser):
    """Multi-turn conversations: one request per turn, the history carried, think time between.

    ``sessions``: ``synthetic`` (``session_turns`` turns of ``turn_input_len`` words, answers
    capped at ``turn_output_len``), or a ShareGPT JSON / JSONL conversations file.
    ``history``: ``server`` (carry the server's answers) or ``dataset`` (the file's replies).
    """

    abstract = True
    sessions: ClassVar[str] = "synthetic"
    session_turns: ClassVar[str] = "uniform:2,6"
    turn_input_len: ClassVar[str] = "fixed:128"
    turn_output_len: ClassVar[str] = "fixed:64"
    think_time_s: ClassVar[str | float] = 0.0
    history: ClassVar[str] = "server"

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        if self.history not in HISTORY_MODES:
            raise ValueError(f"history {self.history!r}: expected one of {HISTORY_MODES}")
        self._think = ThinkTime(self.think_time_s)
        self._conversation: Conversation | None = None
        self._wait_s = 0.0

    def wait_time(self) -> float:  # type: ignore[override]
        """Locust's wait between tasks: the think time before the next turn (0 between
        sessions)."""
        return self._wait_s

    def generate(self) -> None:  # type: ignore[override]
        """One turn; a worker without a share of the sessions (it joined a running test)
        sends nothing and idles until the run stops."""
        _share(self)
        LLMUser.generate(self)

    def _session_book(self) -> SessionBook:
        def make() -> SessionBook:
            return SessionBook(
                load_sessions(
                    self.sessions,
                    turns=self.session_turns,
                    input_len=self.turn_input_len,
                    output_len=self.turn_output_len,
                    seed=self.options.seed,
                )
            )

        book: SessionBook = _book(self, make)
        return book

    def next_prompt(self, record: RequestRecord) -> Prompt:
        conv = self._conversation
        if conv is None or conv.done:
            part = parts.partition(self.environment)
            session = self._session_book().take(part.index, part.count)
            conv = self._conversation = Conversation(session, self.history)
        record.session_id, record.turn = conv.session.session_id, conv.turn
        messages = conv.messages()
        return Prompt(messages, flatten(messages), message_tokens(messages), conv.max_tokens())

    def send(self, *, scheduled_wall_s: float = math.nan) -> RequestRecord:
        self.answer_sink = []
        try:
            record = super().send(scheduled_wall_s=scheduled_wall_s)
        finally:
            payloads, self.answer_sink = self.answer_sink, None
        conv = self._conversation
        if conv is None or conv.session.session_id != record.session_id:
            return record
        if record.ok:
            conv.answered(answer_text(payloads))
        if not record.ok or conv.done:  # a failed turn ends its session: no answer to carry
            self._conversation, self._wait_s = None, 0.0
        else:
            self._wait_s = self._think.sample_s(self.rng)
        return record


class TraceReplayUser(ChatUser):
    """Replays ``trace`` open loop on its timestamps (run with ``shapes.TraceShape``).

    ``speedup`` divides the trace's times; ``trace_window_s = (start, end)`` keeps that part of
    the trace (seconds of trace time); ``block_tokens``: tokens per hash id (Mooncake: 512).
    ``replay_users``: the pool size (None: from the trace's peak rate).
    """

    abstract = True
    trace: ClassVar[str] = ""
    speedup: ClassVar[float] = 1.0
    trace_window_s: ClassVar[tuple[float, float]] = (0.0, math.inf)
    block_tokens: ClassVar[int] = MOONCAKE_BLOCK_TOKENS
    replay_users: ClassVar[int | None] = None

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        self._line: TraceLine | None = None
        self._prompt: Prompt | None = None

    def wait_time(self) -> float:  # type: ignore[override]
        return 0.0

    # what TraceShape reads of the class (shapes.ReplaySource)
    @classmethod
    def load_replay(cls) -> Replay:
        """The trace this class replays (read once per process)."""
        return load_replay(cls)

    @staticmethod
    def lost_lines(environment: Any) -> int:
        """Master: the lines recorded as lost with their worker in this run."""
        return lost_lines_recorded(environment)

    def _trace_book(self) -> TraceBook:
        book: TraceBook = _book(self, lambda: TraceBook(load_replay(type(self))))
        return book

    def _origin_wall_s(self) -> float:
        """The replay's time 0 (the shape sends it); without a shape, this process's first
        claim (each process on its own clock)."""
        part = parts.partition(self.environment)
        while math.isnan(part.origin_wall_s):
            if self.environment.shape_class is None:
                part.origin_wall_s = time.time()
                break
            if self._stopping() or self.runtime.gate.stopped:
                raise StopUser()
            gevent.sleep(_POLL_S)
        return part.origin_wall_s

    def generate(self) -> None:  # type: ignore[override]
        """Claim this process's next line, wait for its time, send it (or record it unsent)."""
        gate = self.runtime.gate
        _share(self)
        if not gate.acquire(self._stopping):  # the replay stage has no quota: instant
            raise StopUser()
        stage = gate.stage
        origin = self._origin_wall_s()
        book = self._trace_book()
        line = self._claim_or_idle(book)
        if line is None:  # this process's lines are all claimed: idle until the run stops
            gate.release(stage)
            _idle_until_stopped(self)
        when = origin + line.time_s / book.replay.speedup
        # the prompt is built while waiting, so its cost is not part of the dispatch delay
        self._line = line
        self._prompt = trace_prompt(line, block_tokens=book.replay.block_tokens)
        try:
            if not gate.wait_until(when, stage, self._stopping):
                gate.release(stage)
                self.record_not_sent(line, when, "the run ended before its time")
                raise StopUser()
            self.send(scheduled_wall_s=when)
        finally:
            self._line, self._prompt = None, None

    def _claim_or_idle(self, book: TraceBook) -> TraceLine | None:
        """The next line; when this process has none left, wait for lines a lost worker may
        leave it (None once the run stops)."""
        part = parts.partition(self.environment)
        line = book.claim(part)
        while line is None and not (self._stopping() or self.runtime.gate.stopped):
            gevent.sleep(_POLL_S)
            line = book.claim(part)
        return line

    def next_prompt(self, record: RequestRecord) -> Prompt:
        line, prompt = self._line, self._prompt
        if line is None:  # send() called directly (not from the replay's own task)
            line = self._trace_book().claim(parts.partition(self.environment))
            if line is None:
                raise StopUser()
        record.trace_line = line.index
        return prompt or trace_prompt(line, block_tokens=self._trace_book().replay.block_tokens)

    def record_not_sent(self, line: TraceLine, scheduled_wall_s: float, why: str) -> None:
        """One record for a line that was never sent (``cancelled``: the load test's doing)."""
        record = RequestRecord(
            request_id=str(uuid.uuid4()),
            endpoint=self.endpoint,
            worker_id=self.runtime.worker_id,
            user_id=self.user_index,
            stage=self.runtime.gate.stage,
            scheduled_wall_s=scheduled_wall_s,
            start_wall_s=time.time(),
            error_kind="cancelled",
            error_message=f"trace line {line.index} not sent: {why}",
            trace_line=line.index,
        )
        self.runtime.request_done(self, record, StreamTiming(t0=0.0))

    def on_stop(self) -> None:
        """The run stops: the lines nobody claimed yet get their 'not sent' records."""
        book = self._trace_book()
        part = parts.partition(self.environment)
        for line in book.unclaimed(part) if not math.isnan(part.origin_wall_s) else ():
            when = part.origin_wall_s + line.time_s / book.replay.speedup
            self.record_not_sent(line, when, "the run ended before its time")
        super().on_stop()


def lost_lines_recorded(environment: Any) -> int:
    """Master: the trace lines recorded as lost with their worker in this run."""
    return _lost_lines.get(id(environment), 0)


def _on_worker_lost(environment: Any, worker: str, runtime: Any, **_kw: Any) -> None:
    """Master: a worker is lost mid-replay. Its lines not due yet go to the live workers; its
    lines that were due and that no record reported get one ``cancelled`` record each (sent
    and never reported, or never sent: the master cannot tell which)."""
    classes = [c for c in environment.user_classes if issubclass(c, TraceReplayUser)]
    part = parts.partition(environment)
    found = parts.share_of(environment, worker)
    if not classes or math.isnan(part.origin_wall_s) or found is None:
        return
    share, others = found
    replay = load_replay(classes[0])
    recorded = runtime.recorder.trace_lines_by_worker.get(worker, set())
    adopted = set(share.adopted)
    mine = [
        x
        for x in replay.lines
        if (share.owns(x.index) or x.index in adopted) and x.index not in recorded
    ]
    live = {c.id for c in environment.runner.clients.all if c.state != "missing"}
    heirs = [w for w in others if w in live]
    cutoff = time.time() + HAND_OVER_LEAD_S

    def due(x: TraceLine) -> float:
        return part.origin_wall_s + x.time_s / replay.speedup

    later = [x.index for x in mine if heirs and due(x) >= cutoff]
    if later:
        parts.hand_over(environment, later, heirs)
    handed = set(later)
    for x in mine:
        if x.index in handed:
            continue
        record = RequestRecord(
            request_id=str(uuid.uuid4()),
            endpoint=get_api(runtime.settings_for(classes[0]).api).path,
            worker_id=worker,
            stage=runtime.gate.stage,
            scheduled_wall_s=due(x),
            start_wall_s=time.time(),
            error_kind="cancelled",
            error_message=f"trace line {x.index} lost with worker {worker}: sent and never "
            "reported, or never sent",
            trace_line=x.index,
        )
        runtime.request_done(None, record, StreamTiming(t0=0.0))
        _lost_lines[id(environment)] = _lost_lines.get(id(environment), 0) + 1


def _forget_lost_lines(environment: Any, **_kw: Any) -> None:
    """A new run in the same process (the web UI's next start) counts its own lost lines."""
    _lost_lines.pop(id(environment), None)


def _install_hand_over() -> None:
    if _on_worker_lost not in llm_events.worker_lost._handlers:
        llm_events.worker_lost.add_listener(_on_worker_lost)
        events.test_start.add_listener(_forget_lost_lines)


_install_hand_over()


class EmbeddingsUser(LLMUser):
    """``/v1/embeddings``: each request embeds ``batch_size`` prompts of the class's data set
    (never streamed; the record's ``batch_inputs`` and ``input_tokens`` give inputs/s and
    tokens/s)."""

    abstract = True
    api = "embeddings"
    batch_size: ClassVar[int] = 1

    def __init__(self, environment: Any) -> None:
        super().__init__(environment)
        if self.batch_size < 1:
            raise ValueError(f"{type(self).__name__}.batch_size must be >= 1")
        self._batch: list[str] = []

    def next_prompt(self, record: RequestRecord) -> Prompt:
        source = self.runtime.dataset_for(self.settings)
        prompts = [source.next_request(self.rng) for _ in range(self.batch_size)]
        self._batch = [p.prompt for p in prompts]
        record.batch_inputs = len(prompts)
        tokens = sum(p.input_tokens_estimate for p in prompts)
        return Prompt(prompts[0].messages, prompts[0].prompt, tokens, 1)

    def build_body(self, prompt: Any, max_tokens: int) -> dict[str, Any]:
        body = super().build_body(prompt, max_tokens)
        body["input"] = list(self._batch) or body["input"]
        return body


# Locust adds a base class's tasks to every subclass's: replace LLMUser's with their own
SessionUser.tasks = [SessionUser.generate]
TraceReplayUser.tasks = [TraceReplayUser.generate]
