"""Runtime: what locust-llm keeps for one Locust Environment in one process.

One per Environment (:func:`runtime`): the :class:`~locust_llm.options.config.ClientOptions`,
the stage gate, the recorder, the live stats, the run dir and its run.json, the data sets,
output-length distributions and model ids the user classes resolved. Users call
:meth:`Runtime.request_done` once per request: Locust's ``request`` event, the live stats, the
recorder and :data:`~locust_llm.client.events.llm_events`.
"""

from __future__ import annotations

import itertools
import logging
import math
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
from gevent.event import Event
from gevent.lock import Semaphore
from locust.runners import MasterRunner, WorkerRunner

from locust_llm.client.cpu_demand import CpuDemandMeter
from locust_llm.client.discovery import discover_model
from locust_llm.client.events import llm_events
from locust_llm.client.gate import StageGate
from locust_llm.client.messages import MSG_PERMIT_ASK, PermitAsk
from locust_llm.client.recorder import Recorder
from locust_llm.client.redact import MIN_SECRET_LEN, RedactingFilter, Redactor, redactor_for
from locust_llm.client.stream import MESSAGE_LIMIT
from locust_llm.errors import InputError, RequestFailed
from locust_llm.live import llmstats
from locust_llm.metrics import CLIENT_SIDE_KINDS, RequestRecord, StreamTiming
from locust_llm.options import config, lengths
from locust_llm.options.readers import split_hosts
from locust_llm.options.settings import UserSettings
from locust_llm.rundir.claim import RunDirClaim
from locust_llm.rundir.layout import RunInfo, Stage
from locust_llm.workloads.arrivals import arrival_process
from locust_llm.workloads.datasets import load_dataset

logger = logging.getLogger("locust_llm")

_BACKOFF_NOTE_EVERY_S = 10.0


class GeventWaiter:
    """The gate's :class:`~locust_llm.client.gate.Waiter` for greenlets: a fresh event per
    notify, so every waiter of the old one wakes and later waits are not woken early."""

    def __init__(self) -> None:
        self._event = Event()

    def wait(self, timeout_s: float) -> None:
        self._event.wait(timeout=timeout_s)

    def notify_all(self) -> None:
        event, self._event = self._event, Event()
        event.set()


class Runtime:
    """Everything locust-llm keeps for one Locust Environment in one process."""

    def __init__(self, environment: Any) -> None:
        self.environment = environment
        runner = environment.runner
        self.is_worker = isinstance(runner, WorkerRunner)
        self.is_master = isinstance(runner, MasterRunner)
        # Locust's run_single_user: no runner, no test_stop (a worker or master whose runner is
        # still being built is neither: see await_runner)
        self.is_debug = runner is None and not distributed_process(environment)
        self.worker_id = runner.client_id if self.is_worker else "local"
        self.stats = llmstats.LiveStats()
        self.recorder = Recorder(is_worker=self.is_worker)
        self.gate = StageGate(waiter=GeventWaiter(), ask_permits=self._ask_permits)
        self.stages: list[Stage] = []
        self.run_dir: Path | None = None
        self.run_dir_claim: RunDirClaim | None = None  # the run dir's lock, held for the run
        self.run_info: RunInfo | None = None
        self.drained: set[str] = set()
        self.last_progress_sent = (0, 0, 0, 0)
        self.run_ended = False
        self.written_records = -1  # records in the run dir as last written
        self.flusher: Any = None
        self.history_greenlet: Any = None
        self.persist_greenlet: Any = None
        self.run_dir_lock = Semaphore()  # one writer of the run dir at a time (greenlets)
        #: master: workers lost during the run -> their requests in flight (kept for the whole
        #: run: Locust forgets a missing worker after about a minute)
        self.lost_workers: dict[str, int] = {}
        self.stop_requested = False  # a SIGTERM/SIGINT came: stopping gracefully
        self.cancel_requested = False  # a second one: in-flight requests cancelled (recorded)
        self.draining = False  # master: a drain of the workers is under way
        self.quitting_seen = False  # Locust's shutdown began (its SIGTERM handler, Ctrl+C)
        self.parent_death_watch: Any = None  # gevent's watcher of parent_death.PARENT_DIED
        #: how the run is ending (locust_llm.rundir.states): the signal that stopped it, the
        #: failure that ended it, and the stage plan (set by the stage shape; None: no plan)
        self.interrupted_by = ""
        self.failure = ""
        self.plan: list[Any] | None = None
        self.plan_done = False
        #: the capacity search's run.json entry as of now (set by the stage shape; None: no
        #: search)
        self.capacity_info: Callable[[], dict[str, Any]] | None = None
        #: master: permits granted per (worker, stage), kept for the whole run (the gate's own
        #: count is the current stage's), to reconcile a lost worker's permits with its records
        self.granted_by_worker_stage: Counter[tuple[str, int]] = Counter()
        self._backoff_said_s = -math.inf
        self.telemetry: Any = None
        self.cpu_demand = CpuDemandMeter()  # this process's (a worker sends it with its stats)
        #: the debug path (run_single_user): request id -> its answer's text, for its line
        self.debug_answers: dict[str, str] = {}
        self.debug_listener: Any = None  # the llm_events listener that prints them
        self.worker_cpu_demand: dict[str, float] = {}  # master: each worker's latest
        self._user_index = itertools.count()
        self._settings: dict[type, UserSettings] = {}
        self._datasets: dict[tuple[str, str], Any] = {}
        self._models: dict[str, str] = {}
        self.options = config.ClientOptions()
        self.headers: dict[str, str] = {}
        self._short_secret_said = False
        self.configure()

    # ---- configuration (workers receive the options with the first spawn) ---------------------
    @property
    def parsed_options(self) -> Any:
        """Locust's own namespace (only for code that reads it by flag name, e.g. telemetry)."""
        return self.environment.parsed_options

    def configure(self) -> None:
        """(Re)read the options; InputError for a bad one."""
        self.options = config.from_namespace(self.environment.parsed_options)
        self.headers = self.options.request_headers()
        self.redact = redactor_for(self.options, self.hosts)
        install_log_redaction(self.redact)
        if self.redact.too_short and not self._short_secret_said:
            self._short_secret_said = True
            logger.warning(
                "locust-llm: %d secret value(s) (API key, header or URL credentials) shorter "
                "than %d characters: masked on the command line and in URLs, not in text a "
                "server sends back",
                len(self.redact.too_short),
                MIN_SECRET_LEN,
            )
        self._settings.clear()
        # open-loop arrivals: each worker its own seeded stream (identical streams would align
        # every worker's bursts)
        self.gate.rng = random.Random(f"{self.options.seed}:{self.worker_id}")
        self.gate.arrivals = arrival_process(self.options.burstiness)

    @property
    def current_stage(self) -> int:
        return self.gate.stage

    @property
    def hosts(self) -> list[str]:
        """The servers of this run: --llm-hosts, else --host, else the user classes' hosts."""
        if self.options.hosts:
            return list(self.options.hosts)
        if self.environment.host:
            return list(split_hosts(self.environment.host))
        seen = [getattr(c, "host", None) for c in self.environment.user_classes or ()]
        return list(dict.fromkeys(h for text in seen if text for h in split_hosts(text)))

    def settings_for(self, user_class: type) -> UserSettings:
        """The resolved settings of ``user_class`` (an ``LLMUser``), once per class."""
        settings = self._settings.get(user_class)
        if settings is None:
            resolve = user_class.resolve_settings  # type: ignore[attr-defined]
            settings = self._settings[user_class] = resolve(self.options, self.environment.host)
        return settings

    def next_user_index(self) -> int:
        return next(self._user_index)

    def prompt_seed(self, user_index: int) -> str:
        """The seed of one user's prompts and lengths: unique in the run (the worker's index
        from Locust's master, else its client id, with the user's index in the process), so no
        two users send the same prompts; with ``--llm-share-prompts`` user N of every worker
        shares one stream."""
        if self.options.share_prompts:
            return f"{self.options.seed}:shared:{user_index}"
        process = "local"
        if self.is_worker:
            index = getattr(self.environment.runner, "worker_index", -1)
            process = f"worker{index}" if index >= 0 else self.worker_id
        return f"{self.options.seed}:{process}:{user_index}"

    def backing_off(self, delay_s: float, failures: int) -> None:
        """A user waits ``delay_s`` after its ``failures``-th connection error in a row: counted
        (run.json ``backoffs``), and said once per outage of this process."""
        self.recorder.backoffs += 1
        self.recorder.backoff_s += delay_s
        now = time.monotonic()
        if failures == 1 and now - self._backoff_said_s > _BACKOFF_NOTE_EVERY_S:
            self._backoff_said_s = now
            logger.warning(
                "locust-llm: cannot connect to the server; users back off (up to %g s, "
                "jittered) until it answers",
                self.options.backoff_max_s,
            )

    def count_reconnect(self) -> None:
        """A kept connection was found closed and the request resent on a fresh one."""
        if not self.recorder.reconnects:
            logger.warning(
                "locust-llm: the server closed a kept-alive connection without "
                "'Connection: close'; reconnecting and resending (counted in run.json)"
            )
        self.recorder.reconnects += 1

    # ---- what users draw from ------------------------------------------------------------------
    def dataset_for(self, settings: UserSettings) -> Any:
        key = (settings.dataset, settings.input_len)
        source = self._datasets.get(key)
        if source is None:
            source = self._datasets[key] = load_dataset(
                settings.dataset,
                input_len=settings.input_len or None,
                seed=self.options.seed,
                tokenizer_path=self.options.tokenizer or None,
                chat_template=self.options.chat_template or None,
            )
        return source

    def output_cap(self, settings: UserSettings, prompt: Any, rng: random.Random) -> int:
        """An explicit output length wins, then the data set's hint, then 256."""
        if not settings.max_tokens and prompt.max_tokens:
            return int(prompt.max_tokens)
        return int(lengths.max_tokens(settings.max_tokens).sample(rng))

    def model_for(self, settings: UserSettings) -> str:
        """The class's model, else --llm-model, else the first id its server lists."""
        if settings.model:
            return settings.model
        if not settings.hosts:
            raise InputError("no --host given: locust-llm needs the server's base URL")
        host = settings.hosts[0]
        if host not in self._models:
            self._models[host] = self.discover_model(host)
        return self._models[host]

    def discover_model(self, host: str) -> str:
        """The first model id ``host`` lists at /v1/models ('' if it lists none)."""
        return discover_model(host, self.options)

    def models_in_use(self) -> list[str]:
        """Model ids resolved so far (for run.json)."""
        return sorted({m for m in self._models.values() if m})

    # ---- per request ----------------------------------------------------------------------
    def request_started(self) -> None:
        self.recorder.request_started()

    def request_done(self, user: Any, record: RequestRecord, timing: StreamTiming) -> None:
        """One finished request: Locust's table, live stats, the recorder, llm_events."""
        # a killed request is not counted (as Locust does); a client bug is not the server's
        # failure (the user reports it through Locust's user_error: the exceptions tab)
        if record.error_message:  # a server may echo a key or header back: masked, then cut
            record.error_message = self.redact.clip(record.error_message, MESSAGE_LIMIT)
        if record.error_kind not in CLIENT_SIDE_KINDS:
            self._fire_locust_request(user, record)
        self.stats.add(record, timing.itl_values, timing.itl_weights)
        self.recorder.add(record)
        llm_events.request_done.fire(record=record)

    def _fire_locust_request(self, user: Any, record: RequestRecord) -> None:
        e2e_ms = record.e2e_s * 1000.0 if record.e2e_s == record.e2e_s else 0.0
        self.environment.events.request.fire(
            request_type="POST",
            name=record.endpoint,
            response_time=e2e_ms,
            response_length=record.output_tokens,
            exception=None if record.ok else RequestFailed(record.error_kind, record.error_message),
            context=user.context(),
            start_time=record.start_wall_s,
        )

    def _ask_permits(self, stage: int) -> None:
        """Worker: ask the master for as many permits as this worker has users waiting for one
        (so a permit held is, but for a moment, a request sent: a lost worker's permits without
        a record count its requests without one)."""
        runner = self.environment.runner
        if not self.is_worker or runner is None:
            return
        want = max(self.gate.waiting, 1)
        runner.send_message(
            MSG_PERMIT_ASK, PermitAsk(worker=self.worker_id, stage=stage, n=want).to_dict()
        )


_log_filter = RedactingFilter(Redactor())


def install_log_redaction(redactor: Redactor) -> None:
    """Every log line of this process passes through ``redactor`` (the latest options'): the
    filter sits on the root logger's handlers, where every propagated record goes."""
    _log_filter.redactor = redactor
    for handler in logging.getLogger().handlers:
        if _log_filter not in handler.filters:
            handler.addFilter(_log_filter)


_runtimes: dict[int, Runtime] = {}


def distributed_process(environment: Any) -> bool:
    """This process was started as a Locust worker or master (its runner may not exist yet)."""
    opts = getattr(environment, "parsed_options", None)
    return bool(getattr(opts, "worker", False) or getattr(opts, "master", False))


_RUNNER_WAIT_S = 60.0
_initialised: set[int] = set()  # environments whose init event locust-llm has handled


def mark_initialised(environment: Any) -> None:
    _initialised.add(id(environment))


def await_runner(environment: Any) -> None:
    """Wait until ``environment`` has its runner and init has run (a worker only).

    Locust's worker runner answers its master while its constructor still waits for the
    connection, before ``Environment.runner`` is set and ``init`` fires: a worker that joins a
    running test gets its first spawn there, and ``test_start`` fires with no runner. Its users
    are spawned after ``test_start`` returns, so waiting here (the constructor then returns and
    ``init`` runs) gives everything its real runner."""
    deadline = time.monotonic() + _RUNNER_WAIT_S
    while environment.runner is None or id(environment) not in _initialised:
        if time.monotonic() > deadline:
            raise RuntimeError(f"locust-llm: no Locust runner after {_RUNNER_WAIT_S:g} s")
        gevent.sleep(0.01)


def runtime(environment: Any) -> Runtime:
    """The Runtime of ``environment`` (created on first use)."""
    rt = _runtimes.get(id(environment))
    if rt is None or rt.environment is not environment:
        rt = _runtimes[id(environment)] = Runtime(environment)
    return rt


def all_runtimes() -> list[Runtime]:
    return list(_runtimes.values())
