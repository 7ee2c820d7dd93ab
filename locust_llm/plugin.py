"""Wires locust-llm into Locust through its events, and holds each process's run-time state.

``install()`` runs once, when ``locust_llm.user`` is imported by a locustfile: it adds the
``--llm-*`` options and listens to ``init``, ``test_start``, ``test_stop``, ``report_to_master``,
``worker_report`` and ``quitting``. Per Locust ``Environment`` there is one :class:`Runtime`:
options, dataset, model id, live stats, recorder, open-loop schedule, current stage.

Ending a distributed run without losing records: Locust's master, when it quits on its own
(``-t`` or the end of a shape), sends workers ``quit`` and waits only 0.5 s. So when the master's
test stops while workers still run users, it first sends every worker ``llm_stop``; each worker
stops its users (they finish or are cancelled within ``--stop-timeout``), flushes its last
records and answers ``llm_drained``; the master waits for all answers (bounded), then writes the
run dir. A web-UI stop sends Locust's own ``stop``, whose worker-side flush arrives before the
worker's ``client_stopped``, so the master has every record when its ``test_stop`` fires.
"""

from __future__ import annotations

import gc
import itertools
import json
import logging
import math
import os
import random
import socket
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import gevent
from gevent.event import Event
from locust import events
from locust.event import EventHook
from locust.runners import MasterRunner, WorkerRunner

from locust_llm import __version__, llmstats, options
from locust_llm.batch_limit import run_info_extra
from locust_llm.errors import InputError
from locust_llm.metrics import RECORD_FIELDS, RequestRecord, StreamTiming
from locust_llm.recorder import MSG_RECORDS, Recorder, ensure_writable
from locust_llm.rundir import RunInfo, Stage

logger = logging.getLogger("locust_llm")

MSG_STOP = "llm_stop"
MSG_DRAINED = "llm_drained"
MSG_STAGE = "llm_stage"
MSG_PERMIT_ASK = "llm_permit_ask"  # worker -> master: {"worker", "stage", "n"}
MSG_PERMIT_GRANT = "llm_permit_grant"  # master -> worker: {"stage", "n"}
DRAIN_GRACE_S = 15.0
DEFAULT_MAX_TOKENS = 256
_ENDPOINT = RECORD_FIELDS.index("endpoint")

_installed = False


class Runtime:
    """Everything locust-llm keeps for one Locust Environment in one process."""

    def __init__(self, environment: Any) -> None:
        self.environment = environment
        self.options = environment.parsed_options or options.defaults()
        runner = environment.runner
        self.is_worker = isinstance(runner, WorkerRunner)
        self.is_master = isinstance(runner, MasterRunner)
        self.worker_id = runner.client_id if self.is_worker else "local"
        self.stats = llmstats.LiveStats()
        self.recorder = Recorder(is_worker=self.is_worker)
        self.stages: list[Stage] = []
        self.current_stage = -1
        # --llm-stage-requests: requests this process may still start in the stage (None: any).
        # A worker asks the master for more when it runs out; the master holds the stage's rest.
        self.stage_quota: int | None = None
        self.stage_remaining: int | None = None  # master: permits not yet granted in the stage
        self.stage_open_loop = False  # the current stage sends on a schedule (--llm-rate)
        self._permit_asked = False
        self._stage_exhausted = False
        self.changed = Event()  # set (and replaced) whenever stage, permits or rate change
        self.rate = 0.0  # open loop: this process's share of the current rate (req/s)
        self._next_arrival = math.nan
        self._user_index = itertools.count()
        self._host_cycle: Any = None
        self.hosts: list[str] = []
        self.run_dir: Path | None = None
        self.run_info: RunInfo | None = None
        self.drained: set[str] = set()
        self.last_progress_sent = (0, 0)
        self.run_ended = False
        self.written_records = -1  # records in the run dir as last written
        self.flusher: Any = None
        self.history_greenlet: Any = None
        self.telemetry: Any = None
        self._dataset: Any = None
        self._model: str | None = None
        self._max_tokens: Any = None
        self.headers: dict[str, str] = {}
        self.extra_body: dict[str, Any] = {}
        self.first_token_hook: Any = None
        self.configure()

    # ---- configuration (on first use; workers receive options with the first spawn) ------------
    def configure(self) -> None:
        opts = self.options
        self.burstiness = float(opts.llm_burstiness)
        # open-loop arrivals: each worker its own seeded stream (identical streams would align
        # every worker's bursts)
        self._arrival_rng = random.Random(f"{opts.llm_seed}:{self.worker_id}")
        host = (self.environment.host or "").rstrip("/")
        self.hosts = [h.strip().rstrip("/") for h in opts.llm_hosts.split(",") if h.strip()] or (
            [host] if host else []
        )
        self._host_cycle = itertools.cycle(self.hosts) if self.hosts else None
        api_key = opts.llm_api_key or os.environ.get("OPENAI_API_KEY", "")
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        for header in opts.llm_header or []:
            name, sep, value = header.partition(":")
            if not sep or not name.strip():
                raise InputError(f"--llm-header {header!r}: expected 'Name: value'")
            self.headers[name.strip()] = value.strip()
        if opts.llm_extra_body:
            try:
                extra = json.loads(opts.llm_extra_body)
            except json.JSONDecodeError as exc:
                raise InputError(f"--llm-extra-body is not JSON: {exc}") from None
            if not isinstance(extra, dict):
                raise InputError("--llm-extra-body must be a JSON object")
            self.extra_body = extra
        hook = getattr(self.environment.events, "llm_first_token", None)
        self.first_token_hook = (
            (lambda record, ttft_s: hook.fire(record=record, ttft_s=ttft_s))
            if hook is not None and hook._handlers
            else None
        )

    @property
    def dataset(self) -> Any:
        if self._dataset is None:
            from locust_llm.datasets import load_dataset

            opts = self.options
            self._dataset = load_dataset(
                opts.llm_dataset,
                input_len=opts.llm_input_len or None,
                seed=opts.llm_seed,
                tokenizer_path=opts.llm_tokenizer or None,
                chat_template=opts.llm_chat_template or None,
            )
        return self._dataset

    @property
    def max_tokens(self) -> Any:
        """The output-length distribution: --llm-max-tokens, else 256 (see :meth:`output_cap`)."""
        if self._max_tokens is None:
            from locust_llm.distributions import parse_distribution

            self._max_tokens = parse_distribution(
                str(self.options.llm_max_tokens or DEFAULT_MAX_TOKENS), what="--llm-max-tokens"
            )
        return self._max_tokens

    def output_cap(self, prompt: Any, rng: Any) -> int:
        """An explicit --llm-max-tokens wins, then the dataset's hint, then 256."""
        if not self.options.llm_max_tokens and prompt.max_tokens:
            return int(prompt.max_tokens)
        return int(self.max_tokens.sample(rng))

    @property
    def model(self) -> str:
        if self._model is None:
            self._model = self.options.llm_model or self.discover_model()
        return self._model

    def discover_model(self) -> str:
        """The first model id the server lists at /v1/models ('' if it lists none)."""
        from geventhttpclient import HTTPClient

        if not self.hosts:
            raise InputError("no --host given: locust-llm needs the server's base URL")
        client = HTTPClient.from_url(self.hosts[0], connection_timeout=5, network_timeout=10)
        try:
            base_path = self.hosts[0].split("://", 1)[-1].partition("/")[2]
            path = ("/" + base_path.rstrip("/") if base_path else "") + "/v1/models"
            resp = client.get(
                path, headers={k: v for k, v in self.headers.items() if k != "Accept"}
            )
            body = resp.read()
            if resp.status_code >= 400:
                raise InputError(
                    f"GET {self.hosts[0]}{path}: HTTP {resp.status_code}; pass --llm-model"
                )
            data = json.loads(body).get("data") or []
            return str(data[0]["id"]) if data else ""
        except (OSError, ValueError, KeyError, IndexError) as exc:
            raise InputError(
                f"cannot list models at {self.hosts[0]}/v1/models ({exc}); pass --llm-model"
            ) from None
        finally:
            client.close()

    # ---- per request ----------------------------------------------------------------------
    def next_user_index(self) -> int:
        return next(self._user_index)

    def next_host(self) -> str:
        if self._host_cycle is None:
            raise InputError("no --host given: locust-llm needs the server's base URL")
        return next(self._host_cycle)

    def request_started(self) -> None:
        self.recorder.request_started()

    def request_done(self, record: RequestRecord, timing: StreamTiming) -> None:
        """One finished request: Locust's table, live stats, the recorder, user hooks."""
        e2e_ms = record.e2e_s * 1000.0 if record.e2e_s == record.e2e_s else 0.0
        if record.error_kind != "cancelled":  # as Locust itself: a killed request is not counted
            self._fire_locust_request(record, e2e_ms)
        self.stats.add(record, timing.itl_values, timing.itl_weights)
        self.recorder.add(record)
        hook = getattr(self.environment.events, "llm_request_done", None)
        if hook is not None and hook._handlers:
            hook.fire(record=record)

    def _fire_locust_request(self, record: RequestRecord, e2e_ms: float) -> None:
        self.environment.events.request.fire(
            request_type="POST",
            name=record.endpoint,
            response_time=e2e_ms,
            response_length=record.output_tokens,
            exception=None
            if record.ok
            else LLMRequestError(record.error_kind, record.error_message),
            context={},
        )

    def acquire_permit(self, user: Any) -> bool:
        """Wait until this process may start a request in the current stage; False: stop.

        With ``--llm-stage-requests`` each stage allows exactly its number of requests. In one
        process the quota is local; a worker asks the master for permits (as many as it has
        users) whenever it runs out, so the stage's requests go to whichever workers have users
        free, and no more than the stage's number start in all. Waiting users sleep on an event
        (no polling) and give up as soon as Locust asks them to stop.
        """
        while self.stage_quota is not None and self.stage_quota <= 0:
            if _stopping(user):
                return False
            if self.is_worker and not self._permit_asked and not self._stage_exhausted:
                self._permit_asked = True
                want = max(self.environment.runner.user_count, 1)
                self.environment.runner.send_message(
                    MSG_PERMIT_ASK,
                    {"worker": self.worker_id, "stage": self.current_stage, "n": want},
                )
            self.changed.wait(timeout=0.25)
        if _stopping(user):
            return False
        if self.stage_quota is not None:
            self.stage_quota -= 1
        return True

    def release_permit(self, stage: int) -> None:
        """Give back a permit taken in ``stage`` for a request that was not sent after all."""
        if stage == self.current_stage and self.stage_quota is not None:
            self.stage_quota += 1
            self._notify()

    def _notify(self) -> None:
        """Wake every user waiting for permits or a rate; the next wait uses a fresh event."""
        event, self.changed = self.changed, Event()
        event.set()

    def enter_stage(
        self, stage: int, quota: int | None, rate: float, start_wall_s: float, *,
        open_loop: bool = False,
    ) -> None:  # fmt: skip
        self.current_stage = stage
        self.stage_open_loop = open_loop
        self.stage_quota = quota
        self._permit_asked = False
        self._stage_exhausted = False
        self.set_rate(rate, start_wall_s)
        self._notify()

    def receive_permits(self, stage: int, n: int) -> None:
        """Worker: the master's answer to a permit request."""
        if stage != self.current_stage or self.stage_quota is None:
            return
        self.stage_quota += n
        self._permit_asked = False
        self._stage_exhausted = n == 0  # nothing left: wait for the next stage
        self._notify()

    def grant_permits(self, stage: int, n: int) -> int:
        """Master: hand out up to ``n`` of the stage's remaining permits."""
        if stage != self.current_stage or self.stage_remaining is None:
            return 0
        granted = max(min(n, self.stage_remaining), 0)
        self.stage_remaining -= granted
        return granted

    # ---- open loop ----------------------------------------------------------------------------
    def set_rate(self, rate_per_s: float, start_wall_s: float) -> None:
        self.rate = rate_per_s
        self._next_arrival = start_wall_s

    def claim_arrival(self, user: Any) -> float | None:
        """Open loop: the next scheduled send time (wall clock); None in a closed-loop stage.

        Between open-loop stages (rate 0) users wait here until a rate arrives; a user asked to
        stop gets NaN (send nothing).
        """
        while self.stage_open_loop and self.rate <= 0:
            if _stopping(user):
                return math.nan
            self.changed.wait(timeout=0.25)
        if not self.stage_open_loop:
            return None
        when = self._next_arrival if not math.isnan(self._next_arrival) else time.time()
        shape = self.burstiness
        rate = self.rate
        gap = self._arrival_rng.gammavariate(shape, 1.0 / (shape * rate)) if shape > 0 else 1 / rate
        self._next_arrival = when + gap
        return when

    def wait_until(self, when: float, stage: int, user: Any) -> bool:
        """Sleep until ``when`` for a slot of ``stage``; False if the stage changed or the user
        must stop meanwhile (the slot is then dropped, not carried into another stage)."""
        while True:
            if self.current_stage != stage or _stopping(user):
                return False
            delay = when - time.time()
            if delay <= 0:
                return True
            self.changed.wait(timeout=min(delay, 0.25))


def _stopping(user: Any) -> bool:
    """True once Locust has asked ``user`` to stop (graceful stop) or the runner is stopping."""
    return getattr(user, "_state", None) == "stopping"


class LLMRequestError(Exception):
    """The exception Locust's table shows for a failed LLM request: ``kind: message``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


_runtimes: dict[int, Runtime] = {}


def runtime(environment: Any) -> Runtime:
    """The Runtime of ``environment`` (created on first use)."""
    rt = _runtimes.get(id(environment))
    if rt is None or rt.environment is not environment:
        rt = _runtimes[id(environment)] = Runtime(environment)
    return rt


# ---- run dir -------------------------------------------------------------------------------------
def default_run_dir() -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path("reports") / stamp


_SECRET_FLAGS = ("--llm-api-key",)
_HEADER_FLAGS = ("--llm-header",)


def _command_line_without_secrets(argv: list[str]) -> list[str]:
    """``argv`` with the API key and every extra header's value replaced by ``***``."""
    out: list[str] = []
    mask_next: str | None = None
    for arg in argv:
        if mask_next is not None:
            out.append(_masked(mask_next, arg))
            mask_next = None
            continue
        flag, eq, value = arg.partition("=")
        if flag in _SECRET_FLAGS or flag in _HEADER_FLAGS:
            if eq:
                out.append(f"{flag}={_masked(flag, value)}")
            else:
                out.append(arg)
                mask_next = flag
        elif "bearer " in arg.lower() or arg.lower().startswith("authorization:"):
            out.append("***")
        else:
            out.append(arg)
    return out


def _masked(flag: str, value: str) -> str:
    if flag in _HEADER_FLAGS and ":" in value:
        return value.split(":", 1)[0] + ": ***"  # keep the header's name, not its value
    return "***"


def _versions() -> dict[str, str]:
    import locust

    return {
        "locust-llm": __version__,
        "locust": locust.__version__,
        "python": sys.version.split()[0],
    }


def new_run_info(rt: Runtime) -> RunInfo:
    opts = rt.options
    assert rt.run_dir is not None
    return RunInfo(
        run_id=rt.run_dir.name,
        command=_command_line_without_secrets(list(sys.argv)),
        versions=_versions(),
        host=rt.hosts[0] if rt.hosts else "",
        hosts=list(rt.hosts),
        model=opts.llm_model,
        start_wall_s=time.time(),
        mode="open" if opts.llm_rate else "closed",
        roofline={
            k: v
            for k, v in (("model", opts.llm_roofline_model), ("gpu", opts.llm_roofline_gpu))
            if v
        },
        server_instances=opts.llm_server_instances or max(len(rt.hosts), 1),
        extra={
            "machine": socket.gethostname(),
            **run_info_extra(opts.llm_server_max_num_seqs, rt.hosts[0] if rt.hosts else ""),
        },
    )


def write_run_dir(rt: Runtime) -> None:
    """Write requests.parquet + run.json (+ telemetry, llm_stats.csv) for the current run."""
    if rt.run_dir is None or rt.run_info is None or rt.is_worker:
        return
    info = rt.run_info
    info.end_wall_s = time.time() if math.isnan(info.end_wall_s) else info.end_wall_s
    info.stages = list(rt.stages)
    if rt._model:
        info.model = rt._model
    endpoints = {row[_ENDPOINT] for row in rt.recorder.records}
    if endpoints:
        info.endpoint = ",".join(sorted(endpoints))
    runner = rt.environment.runner
    if rt.is_master:
        info.workers = sorted(set(info.workers) | set(rt.recorder.worker_progress))
        for worker in info.workers:
            client = runner.clients.get(worker) if hasattr(runner, "clients") else None
            if client is not None and client.state == "missing":
                info.lost_workers[worker] = rt.recorder.lost_in_flight(worker)
    scraper_warnings = rt.telemetry.warnings if rt.telemetry is not None else []
    info.warnings = sorted(set(info.warnings) | set(_cpu_warnings(runner)) | set(scraper_warnings))
    rt.recorder.write(rt.run_dir, info)
    rt.written_records = len(rt.recorder.records)
    if rt.telemetry is not None:
        rt.telemetry.write(rt.run_dir)
    llmstats.write_csv(rt.stats, rt.run_dir / "llm_stats.csv")
    llmstats.write_history_csv(rt.stats, rt.run_dir / "llm_stats_history.csv")
    prefix = getattr(rt.options, "csv_prefix", None)
    if prefix:
        llmstats.write_csv(rt.stats, Path(f"{prefix}_llm_stats.csv"))
        llmstats.write_history_csv(rt.stats, Path(f"{prefix}_llm_stats_history.csv"))


def _cpu_warnings(runner: Any) -> list[str]:
    out = []
    if getattr(runner, "cpu_warning_emitted", False):
        out.append("the load generator's CPU went above 90%: timings may be inflated")
    if getattr(runner, "worker_cpu_warning_emitted", False):
        out.append("a worker's CPU went above 90%: timings may be inflated")
    return out


# ---- event listeners ---------------------------------------------------------------------------
def _on_parser(parser: Any, **_kw: Any) -> None:
    options.add_arguments(parser)
    # everything that listens binds loopback unless told otherwise (containers pass 0.0.0.0)
    parser.set_defaults(master_bind_host="127.0.0.1", web_host="127.0.0.1")


def _on_init(environment: Any, **_kw: Any) -> None:
    runner = environment.runner
    if runner is None:
        return
    rt = runtime(environment)
    if isinstance(runner, WorkerRunner):
        runner.register_message(
            MSG_STOP, lambda environment, msg, **kw: _worker_stop(rt), concurrent=True
        )
        runner.register_message(
            MSG_STAGE, lambda environment, msg, **kw: _worker_stage(rt, msg.data)
        )
        runner.register_message(
            MSG_PERMIT_GRANT,
            lambda environment, msg, **kw: rt.receive_permits(
                int(msg.data["stage"]), int(msg.data["n"])
            ),
        )
        return
    if environment.web_ui is not None:
        from locust_llm import webtab

        webtab.install(environment, rt)
    if isinstance(runner, MasterRunner):
        runner.register_message(
            MSG_RECORDS, lambda environment, msg, **kw: rt.recorder.receive_batch(msg.data)
        )
        runner.register_message(
            MSG_DRAINED, lambda environment, msg, **kw: rt.drained.add(str(msg.data))
        )
        runner.register_message(MSG_PERMIT_ASK, lambda environment, msg, **kw: _grant(rt, msg.data))
    opts = rt.options
    if environment.shape_class is None and (opts.llm_concurrency or opts.llm_rate or opts.llm_soak):
        logger.error(
            "locust-llm: --llm-concurrency/--llm-rate/--llm-soak need a locustfile with a stage "
            "shape (locustfiles/sweep.py); %s has none",
            getattr(opts, "locustfile", "this locustfile"),
        )
        sys.exit(2)
    run_dir = Path(rt.options.llm_run_dir) if rt.options.llm_run_dir else default_run_dir()
    try:
        ensure_writable(run_dir)
    except OSError as exc:
        logger.error("locust-llm: run dir %s is not writable (%s); no load was sent", run_dir, exc)
        sys.exit(2)
    rt.run_dir = run_dir
    if not environment.stop_timeout:
        logger.warning(
            "locust-llm: --stop-timeout is 0, so requests still streaming when the test stops "
            "are cancelled (recorded as 'cancelled'); set it above your longest stream"
        )


def begin_run(rt: Runtime) -> None:
    """Master / single process: start a run (idempotent until the run ends).

    Called by the stage shape before its first tick (which comes before Locust's test_start)
    and by test_start; a test started again from the web UI gets a new run dir.
    """
    if rt.is_worker:
        return
    if rt.run_info is not None and rt.run_ended:
        assert rt.run_dir is not None
        rt.run_dir = rt.run_dir.with_name(f"{rt.run_dir.name}-{int(time.time())}")
        rt.recorder.records.clear()
        rt.stages = []
        rt.run_info = None
    if rt.run_info is None:
        rt.run_info = new_run_info(rt)
    rt.run_ended = False


def _on_test_start(environment: Any, **_kw: Any) -> None:
    rt = runtime(environment)
    rt.options = environment.parsed_options or rt.options
    rt.configure()
    try:
        _ = rt.model  # discovered once, before any user sends
    except InputError as exc:
        logger.error("locust-llm: %s", exc)
        environment.process_exit_code = 2
        gevent.spawn(environment.runner.quit)
        return
    rt.stats.reset()
    if rt.is_worker:
        rt.recorder.pending.clear()
        if rt.flusher is None or rt.flusher.dead:
            rt.flusher = gevent.spawn(_flush_loop, rt)
    else:
        begin_run(rt)
        if rt.history_greenlet is None or rt.history_greenlet.dead:
            rt.history_greenlet = gevent.spawn(_history_loop, rt)
        _start_telemetry(rt)
    gc.collect()
    gc.freeze()  # start-up objects out of the collector's way (fewer, shorter GC pauses)


def _start_telemetry(rt: Runtime) -> None:
    """Master / single process: scrape GPU exporters, the server's /metrics and worker CPU."""
    from locust_llm.telemetry import TelemetryScraper, locust_worker_cpu, targets_from_options

    if rt.telemetry is not None:
        rt.telemetry.stop()
    runner = rt.environment.runner
    targets = targets_from_options(rt.options, rt.hosts[0] if rt.hosts else None)
    rt.telemetry = TelemetryScraper(
        targets, rt.options.llm_scrape_interval, cpu_probe=lambda: locust_worker_cpu(runner)
    ).start()


def _flush_loop(rt: Runtime) -> None:
    while True:
        gevent.sleep(rt.options.llm_record_batch_s)
        _flush_records(rt)


def _flush_records(rt: Runtime) -> None:
    runner = rt.environment.runner
    progress = (rt.recorder.sent_total, rt.recorder.recorded_total)
    if rt.recorder.pending or progress != rt.last_progress_sent:
        runner.send_message(MSG_RECORDS, rt.recorder.take_batch(rt.worker_id))
        rt.last_progress_sent = progress


def _history_loop(rt: Runtime) -> None:
    while True:
        gevent.sleep(1.0)
        if rt.stats.entries and not rt.run_ended:
            rt.stats.snapshot_history()


def _worker_stop(rt: Runtime) -> None:
    runner = rt.environment.runner
    runner.stop()  # stops users (graceful within --stop-timeout); test_stop flushes
    _flush_records(rt)
    runner.send_message(MSG_DRAINED, rt.worker_id)


def _grant(rt: Runtime, data: dict[str, Any]) -> None:
    """Master: answer a worker's permit request."""
    stage = int(data["stage"])
    granted = rt.grant_permits(stage, int(data["n"]))
    rt.environment.runner.send_message(
        MSG_PERMIT_GRANT, {"stage": stage, "n": granted}, client_id=str(data["worker"])
    )


def _worker_stage(rt: Runtime, data: dict[str, Any]) -> None:
    quota = data.get("quota")
    workers = max(int(data.get("workers") or 1), 1)
    rt.enter_stage(
        int(data.get("stage", -1)),
        None if quota is None else int(quota),
        float(data.get("rate") or 0.0) / workers,  # each worker its share of the rate
        float(data.get("start") or time.time()),
        open_loop=bool(data.get("open_loop")),
    )


def _on_test_stop(environment: Any, **_kw: Any) -> None:
    rt = runtime(environment)
    if rt.is_worker:
        _flush_records(rt)
        send_stats = getattr(environment.runner, "_send_stats", None)
        if send_stats is not None:  # the last stats delta, before client_stopped
            send_stats()
        return
    if rt.is_master:
        _drain_workers(rt)
    if rt.telemetry is not None:
        rt.telemetry.stop()
    if rt.run_info is not None:
        rt.run_info.end_wall_s = time.time()
    for stage in rt.stages:
        if math.isnan(stage.end_wall_s):
            stage.end_wall_s = rt.run_info.end_wall_s if rt.run_info else time.time()
    rt.stats.snapshot_history()
    rt.run_ended = True
    write_run_dir(rt)


def _drain_workers(rt: Runtime) -> None:
    """Master: make every worker stop, flush and confirm before the run dir is written."""
    runner = rt.environment.runner
    running = [c.id for c in runner.clients.all if c.state in ("running", "spawning", "ready")]
    if not running:
        return
    rt.drained.clear()
    from locust.rpc import Message

    for client_id in running:
        runner.server.send_to_client(Message(MSG_STOP, None, client_id))
    deadline = time.monotonic() + (rt.environment.stop_timeout or 0) + DRAIN_GRACE_S
    while time.monotonic() < deadline:
        alive = {c.id for c in runner.clients.all if c.state != "missing"}
        if alive <= rt.drained:
            return
        gevent.sleep(0.05)
    logger.warning(
        "locust-llm: workers %s did not confirm their last records in time",
        sorted(set(running) - rt.drained),
    )


def _on_report_to_master(client_id: str, data: dict[str, Any], **_kw: Any) -> None:
    env = _env_of_worker(client_id)
    if env is not None:
        data["llm_stats"] = runtime(env).stats.take_delta()


def _on_worker_report(client_id: str, data: dict[str, Any], **_kw: Any) -> None:
    delta = data.get("llm_stats")
    env = _master_env()
    if delta and env is not None:
        runtime(env).stats.merge_delta(delta)


def _env_of_worker(client_id: str) -> Any:
    for rt in _runtimes.values():
        if rt.is_worker and rt.worker_id == client_id:
            return rt.environment
    return None


def _master_env() -> Any:
    for rt in _runtimes.values():
        if rt.is_master:
            return rt.environment
    return None


def _on_quitting(environment: Any, **_kw: Any) -> None:
    rt = _runtimes.get(id(environment))
    if rt is None or rt.is_worker:
        return
    if not (rt.run_ended and rt.written_records == len(rt.recorder.records)):
        write_run_dir(rt)  # records that arrived after the test stopped (or no stop at all)
    if rt.stats.entries and getattr(rt.options, "headless", False):
        print(llmstats.format_table(rt.stats), flush=True)


def install() -> None:
    """Register the listeners and event hooks on Locust's global events (once)."""
    global _installed
    if _installed:
        return
    _installed = True
    # Locust's Events declares only its own hooks; custom ones are added as attributes, which
    # its stubs don't model (readers use getattr(environment.events, ...)).
    # fired with record, ttft_s (only when listened to)
    events.llm_first_token = EventHook()  # type: ignore[attr-defined]
    # fired with record after each request
    events.llm_request_done = EventHook()  # type: ignore[attr-defined]
    events.init_command_line_parser.add_listener(_on_parser)
    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)
    events.test_stop.add_listener(_on_test_stop)
    events.report_to_master.add_listener(_on_report_to_master)
    events.worker_report.add_listener(_on_worker_report)
    events.quitting.add_listener(_on_quitting)


install()
