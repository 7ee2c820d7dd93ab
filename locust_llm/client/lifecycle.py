"""locust-llm's listeners on Locust's events: options, start, stages, drain, run-dir writing.

:func:`install` runs once, when ``locust_llm.client.user`` is imported by a locustfile: it adds the
``--llm-*`` options and listens to ``init``, ``test_start``, ``test_stopping``, ``test_stop``,
``report_to_master``, ``worker_report`` and ``quitting``; the master and workers also register
the messages of :mod:`locust_llm.client.messages`; with a web UI, the LLM tab
(:mod:`locust_llm.webui.routes`) and the check of the start form's LLM fields
(:mod:`locust_llm.client.webform`). This module imports neither the user classes nor the shapes:
the user module passes its base class to :func:`install` (the classes whose settings are checked
and resolved at start), and a shape that checks options before the load says so
(:class:`ChecksOptions`).

Ending a distributed run without losing records: Locust's master, when it quits on its own
(``-t`` or the end of a shape), sends workers ``quit`` and waits only 0.5 s. So when the master's
test stops while workers still run users, it first sends every worker ``llm_stop``; each worker
stops its users (they finish or are cancelled within ``--stop-timeout``), flushes its last
records and answers ``llm_drained``; the master waits for all answers (bounded), then writes the
run dir. A web-UI stop (or a sweep's end with the web UI) drains the same way first, from the
master's ``test_stopping``, before Locust sends its own ``stop``.

Why not Locust's own ``stop`` alone (pinned: locust 2.47, ``runners.py``): a worker handles
``stop`` inside its one message loop: it stops its users there (up to ``--stop-timeout``), sends
``client_stopped`` (the master forgets it and ignores its heartbeats), then *sleeps*
``--stop-timeout`` more before it says ``client_ready``. The loop reads nothing meanwhile, not
even the master's heartbeats, and a worker that has read none for 60 s
(``MASTER_HEARTBEAT_TIMEOUT``) quits. With locust-llm's 120 s stop timeout every worker was gone
after a web-UI Stop, and Start said no worker was connected. So the drain runs beside the loop
(``llm_stop`` is handled concurrently: heartbeats go on however long streams take), and a worker
whose users have stopped sets its copy of the stop timeout to 0 (the master sends it again with
the next spawn): nothing is left to wait for, so it is ready again at once.

Locust's single-user debug path (``run_single_user``, a locustfile run as a script) has no
runner and never fires ``test_stop``: it gets ``--llm-debug-requests`` permits and no run dir.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import gevent
from locust import events
from locust.rpc import Message
from locust.runners import MasterRunner, WorkerRunner

from locust_llm.client import webform, webui_state
from locust_llm.client.apis.base import get_api
from locust_llm.client.debug_lines import debug_line, shown_text
from locust_llm.client.events import llm_events
from locust_llm.client.messages import (
    MSG_CANCEL,
    MSG_DRAINED,
    MSG_PERMIT_ASK,
    MSG_PERMIT_GRANT,
    MSG_RECORDS,
    MSG_STAGE,
    MSG_STOP,
    PermitAsk,
    PermitGrant,
    RecordBatch,
    StageMessage,
)
from locust_llm.client.parent_death import PARENT_DIED, worker_wait_s
from locust_llm.client.recorder import ensure_writable
from locust_llm.client.redact import masked_url
from locust_llm.client.runinfo import new_run_info
from locust_llm.client.runtime import (
    Runtime,
    all_runtimes,
    await_runner,
    distributed_process,
    mark_initialised,
    runtime,
)
from locust_llm.errors import InputError, RequestFailed
from locust_llm.live import llmstats
from locust_llm.metrics import RequestRecord
from locust_llm.options import lengths, validate
from locust_llm.options import table as options
from locust_llm.options.config import ClientOptions
from locust_llm.rundir.claim import lock_run_dir, new_run_dir
from locust_llm.rundir.layout import (
    RunInfo,
    claim_run_dir,
    report_command,
    warning_text,
    write_run_info,
    write_run_json,
)
from locust_llm.rundir.states import FINISHED, cut_stage_words, exit_code, final_state
from locust_llm.telemetry.scraper import TelemetryScraper, locust_worker_cpu, targets_from_options
from locust_llm.webui import routes as webtab

logger = logging.getLogger("locust_llm")

DRAIN_GRACE_S = 15.0
QUIT_GRACE_S = 5.0  # after a signal's stop and quit, Locust's main has this long to exit
#: an orphaned worker whose master sent no heartbeat for this long (Locust sends one a second)
#: takes the master for dead with ``run``
MASTER_SILENT_S = 10.0
PERSIST_INTERVAL_S = 1.0  # records reach the disk (fsync'd) at least this often
_installed = False
#: the LLM user base classes (``install``'s argument): their subclasses are checked at start
_user_bases: tuple[type, ...] = ()
#: the locustfile has a stage shape: its stage options are fields of the web UI's start form
_form_stages = False


@runtime_checkable
class ChecksOptions(Protocol):
    """A stage shape that checks the options it reads before any load is sent
    (:class:`~locust_llm.client.shapes.StagesShape`: the stage plan parses)."""

    def check_options(self, options: ClientOptions) -> None: ...


def llm_user_classes(environment: Any) -> list[type]:
    """The locustfile's user classes that are LLM users (subclasses of an installed base)."""
    return [
        c
        for c in environment.user_classes or ()
        if isinstance(c, type) and issubclass(c, _user_bases)
    ]


# ---- stages (called by the stage shape) ----------------------------------------------------------
def broadcast_stage(rt: Runtime, message: StageMessage, workers: list[str]) -> None:
    """Start a stage everywhere: here (one process) or on every worker (master).

    The master keeps the stage's permits (``message.quota`` requests; workers start at 0 and
    ask), and tells each worker the stage, the rate the ``workers`` share and the start.
    """
    if not rt.is_master:
        rt.gate.enter_stage(
            message.stage,
            quota=message.quota,
            rate_per_s=message.rate,
            start_wall_s=message.start,
            open_loop=message.open_loop,
        )
        return
    rt.gate.hold(message.stage, message.quota)
    runner = rt.environment.runner
    quota = None if message.quota is None else 0
    for worker in workers:
        data = StageMessage(
            stage=message.stage,
            quota=quota,
            rate=message.rate,
            workers=max(len(workers), 1),
            start=message.start,
            open_loop=message.open_loop,
        ).to_dict()
        runner.send_message(MSG_STAGE, data, client_id=worker)


def _worker_stage(rt: Runtime, data: dict[str, Any]) -> None:
    msg = StageMessage.from_dict(data)
    rt.gate.enter_stage(
        msg.stage,
        quota=msg.quota,
        rate_per_s=msg.rate_share,  # each worker its share of the rate
        start_wall_s=msg.start or time.time(),
        open_loop=msg.open_loop,
    )


def _grant(rt: Runtime, data: dict[str, Any]) -> None:
    """Master: answer a worker's permit request."""
    ask = PermitAsk.from_dict(data)
    lost = ask.worker in rt.lost_workers  # a worker given up for lost gets no more permits
    granted = 0 if lost else rt.gate.grant(ask.stage, ask.n)
    rt.granted_by_worker_stage[(ask.worker, ask.stage)] += granted
    rt.environment.runner.send_message(
        MSG_PERMIT_GRANT, PermitGrant(stage=ask.stage, n=granted).to_dict(), client_id=ask.worker
    )


def _receive_grant(rt: Runtime, data: dict[str, Any]) -> None:
    grant = PermitGrant.from_dict(data)
    rt.gate.receive_permits(grant.stage, grant.n)


# ---- run dir -------------------------------------------------------------------------------------
def begin_run(rt: Runtime) -> None:
    """Master / single process: start a run (idempotent until the run ends).

    Called by the stage shape before its first tick (which comes before Locust's test_start)
    and by test_start; a test started again from the web UI gets a new run dir.
    """
    if rt.is_worker or rt.run_dir is None:
        return
    if rt.run_info is not None and rt.run_ended:
        with rt.run_dir_lock:
            rt.recorder.remove_journal()  # the finished run's records are in its parquet
        rt.run_dir = new_run_dir(rt.run_dir.parent, f"{rt.run_dir.name}-")
        if rt.run_dir_claim is not None:
            rt.run_dir_claim.release()
        rt.run_dir_claim = lock_run_dir(rt.run_dir)
        rt.recorder.clear()
        rt.lost_workers.clear()
        rt.granted_by_worker_stage.clear()
        rt.stages = []
        rt.run_info = None
        rt.failure = rt.interrupted_by = ""
    if rt.run_info is None:
        rt.run_info = new_run_info(rt.options, rt.run_dir, rt.hosts, sys.argv)
        rt.run_info.state = "running"
        rt.recorder.open_journal(rt.run_dir)
        write_run_info(rt.run_dir, rt.run_info)
    rt.run_ended = False
    if rt.persist_greenlet is None or rt.persist_greenlet.dead:
        rt.persist_greenlet = gevent.spawn(_persist_loop, rt)


def _persist_loop(rt: Runtime) -> None:
    """Master / single process: each second, records to the journal and run.json refreshed,
    so a crash leaves a run dir that ``report`` reads (as partial)."""
    while True:
        gevent.sleep(PERSIST_INTERVAL_S)
        if rt.run_dir is None or rt.run_info is None or rt.run_ended:
            continue
        if rt.is_master:
            _note_lost_workers(rt)
        _sample_stage_users(rt)
        try:
            with rt.run_dir_lock:  # finalising waits for this write (and the reverse)
                rt.recorder.flush(run=_in_thread)
                _in_thread(write_run_json, rt.run_dir, fill_run_info(rt).to_json())
        except OSError as exc:  # a full or vanished disk: the load stops, the run fails
            fail_run(rt, f"cannot write the run dir {rt.run_dir} ({exc})")


def fail_run(rt: Runtime, why: str) -> None:
    """The run cannot go on (the run dir unwritable, no worker left): say so in one line, stop
    the load (the stage shape ends at its next tick), and let the run end ``failed``."""
    if rt.failure:
        return
    rt.failure = why
    logger.error("locust-llm: the run failed: %s; stopping the load", why)
    rt.stop_requested = True
    runner = rt.environment.runner
    if getattr(runner, "shape_greenlet", None) is None and runner is not None:
        gevent.spawn(_stop_gracefully, rt)


def _sample_stage_users(rt: Runtime) -> None:
    """The current stage's fewest running users, once Locust has spawned them (run.json)."""
    runner = rt.environment.runner
    if not rt.stages or getattr(runner, "state", "") != "running":
        return
    stage = rt.stages[-1]
    if not math.isnan(stage.end_wall_s):
        return
    users = int(runner.user_count)
    stage.users_min = users if stage.users_min is None else min(stage.users_min, users)


def _in_thread(function: Any, *args: Any) -> Any:
    """Run blocking file work (write + fsync) in gevent's thread pool; greenlets go on."""
    return gevent.get_hub().threadpool.apply(function, args)


def fill_run_info(rt: Runtime) -> RunInfo:
    """run.json's contents as of now: stages, models, endpoints, workers (lost ones too)."""
    assert rt.run_info is not None
    info = rt.run_info
    info.stages = list(rt.stages)
    models = sorted(m for m in rt.recorder.values_of("model") if m) or rt.models_in_use()
    if models:
        info.model = ",".join(models)
    endpoints = rt.recorder.values_of("endpoint")
    if endpoints:
        info.endpoint = ",".join(sorted(endpoints))
    if rt.is_master:
        info.workers = sorted(set(info.workers) | set(rt.recorder.worker_progress))
        info.lost_workers.update(rt.lost_workers)
    if rt.capacity_info is not None:
        info.extra["capacity"] = rt.capacity_info()
    if rt.recorder.reconnects_total:
        info.extra["reconnects"] = rt.recorder.reconnects_total
    if rt.recorder.backoffs_total:
        info.extra["backoffs"] = rt.recorder.backoffs_total
    arrivals = rt.recorder.arrivals_total(rt.gate.schedule.counts)
    for stage in info.stages:  # open loop: every arrival drawn, sent or unsent with its reason
        counts = arrivals.get(stage.index)
        if counts is not None:
            stage.arrivals_drawn, stage.arrivals_unsent = counts.drawn, dict(counts.unsent)
    runner = rt.environment.runner
    if rt.telemetry is not None and rt.telemetry.engines:  # the actions' words: diagnosis/engines
        info.extra["server_engine"] = ",".join(sorted(set(rt.telemetry.engines.values())))
    scraper_warnings = rt.telemetry.warnings if rt.telemetry is not None else []
    info.warnings = sorted(set(info.warnings) | set(_cpu_warnings(runner)) | set(scraper_warnings))
    return info


def settle_state(rt: Runtime, info: RunInfo) -> None:
    """run.json's final ``state``, its reason and the planned stages
    (:mod:`locust_llm.rundir.states`); the process's exit code to match."""
    plan = rt.plan or []
    info.stages_planned = [p.name for p in plan]
    info.state = final_state(
        failure=rt.failure,
        interrupted_by=rt.interrupted_by,
        plan_done=rt.plan_done if plan else None,
    )
    if info.state == FINISHED:
        info.state_reason = ""
    else:
        reason = rt.failure or (
            f"stopped by {rt.interrupted_by}" if rt.interrupted_by else "the test stopped early"
        )
        if plan and rt.stages and not rt.plan_done:
            stage = rt.stages[-1]
            step = plan[stage.index]
            end = stage.end_wall_s if not math.isnan(stage.end_wall_s) else time.time()
            reason += " during " + cut_stage_words(
                stage.index, len(plan), step.name, ended=rt.recorder.ended_in(stage.index),
                target=step.requests, elapsed_s=end - stage.start_wall_s,
                duration_s=step.duration_s,
            )  # fmt: skip
        info.state_reason = reason
    code = exit_code(info.state)
    if code:
        rt.environment.process_exit_code = code


def write_run_dir(rt: Runtime) -> None:
    """Write requests.parquet + run.json (+ telemetry, llm_stats.csv) for the current run.

    A run dir that cannot be written (a full disk) ends the run ``failed``: one log line, the
    journal keeps every batch it has, and run.json says so if it still can be written."""
    if rt.run_dir is None or rt.run_info is None or rt.is_worker:
        return
    if rt.is_master:
        _note_lost_workers(rt)
    info = fill_run_info(rt)
    info.end_wall_s = time.time() if math.isnan(info.end_wall_s) else info.end_wall_s
    settle_state(rt, info)
    try:
        with rt.run_dir_lock:
            rt.recorder.finalise(rt.run_dir, info)
    except OSError as exc:
        _fail_finalise(rt, info, exc)
        return
    rt.written_records = rt.recorder.count
    if rt.telemetry is not None:
        rt.telemetry.write(rt.run_dir)
    llmstats.write_csv(rt.stats, rt.run_dir / "llm_stats.csv")
    llmstats.write_history_csv(rt.stats, rt.run_dir / "llm_stats_history.csv")
    prefix = rt.options.csv_prefix
    if prefix:
        llmstats.write_csv(rt.stats, Path(f"{prefix}_llm_stats.csv"))
        llmstats.write_history_csv(rt.stats, Path(f"{prefix}_llm_stats_history.csv"))


def _fail_finalise(rt: Runtime, info: RunInfo, exc: OSError) -> None:
    """The run dir could not be finalised: the run is failed, the journal stays as it is."""
    assert rt.run_dir is not None
    if not rt.failure:
        rt.failure = f"cannot write the run dir {rt.run_dir} ({exc})"
        logger.error("locust-llm: the run failed: %s", rt.failure)
        settle_state(rt, info)
    try:
        write_run_json(rt.run_dir, info.to_json())
    except OSError:
        logger.error(
            "locust-llm: run.json still says 'running'; the journal %s keeps every batch "
            "written before the failure",
            rt.run_dir / "requests.arrows",
        )


def unrecorded_permits(rt: Runtime, worker: str, stage: int | None = None) -> int:
    """Master: permits granted to ``worker`` (in ``stage``, or in every stage) with no record
    from it: for a lost worker, its requests sent and never recorded (it asks only for the
    permits its waiting users take at once)."""
    got = rt.recorder.received_by_worker_stage
    return sum(
        max(n - got[(w, s)], 0)
        for (w, s), n in rt.granted_by_worker_stage.items()
        if w == worker and (stage is None or s == stage)
    )


def lost_unrecorded(rt: Runtime, stage: int) -> int:
    """Master: the lost workers' permits of ``stage`` with no record. A request-count stage
    counts them as ended, so it neither waits for a dead worker nor overshoots when a paused
    one comes back and its records arrive."""
    return sum(unrecorded_permits(rt, w, stage) for w in rt.lost_workers)


def _note_lost_workers(rt: Runtime) -> list[str]:
    """Master: workers Locust marks missing now are lost for the rest of the run: recorded with
    their requests that have no record (their permits with none; in a duration stage, those in
    flight at their last batch), no more permits, and their users re-dispatched. A run left
    with no worker before its plan is done fails."""
    runner = rt.environment.runner
    clients = getattr(runner, "clients", None)
    if clients is None:
        return []
    newly = [c.id for c in clients.all if c.state == "missing" and c.id not in rt.lost_workers]
    for worker in newly:
        rt.lost_workers[worker] = _lost_count(rt, worker)
        rt.recorder.forget_worker_waits(worker)
        logger.warning(
            "locust-llm: worker %s lost with %d requests sent and not recorded (stage %d's "
            "count takes them as ended)",
            worker,
            rt.lost_workers[worker],
            rt.gate.stage,
        )
        llm_events.worker_lost.fire(environment=rt.environment, worker=worker, runtime=rt)
    for worker in rt.lost_workers:  # a paused worker that came back: its late records count
        rt.lost_workers[worker] = _lost_count(rt, worker)
    if newly:
        live = [c.id for c in clients.all if c.state != "missing"]
        if not live and not (rt.plan_done and rt.plan):
            fail_run(rt, f"no worker left (lost: {', '.join(sorted(rt.lost_workers))})")
            return newly
        _push_permits(rt)
        if getattr(runner, "state", "") == "running" and runner.worker_count > 0:
            gevent.spawn(runner.start, runner.target_user_count, runner.spawn_rate)
    return newly


def _lost_count(rt: Runtime, worker: str) -> int:
    """A lost worker's requests with no record: its permits with none, or (duration stages
    have no permits) those in flight as of its last batch, whichever is more."""
    return max(unrecorded_permits(rt, worker), rt.recorder.lost_in_flight(worker))


def _push_permits(rt: Runtime) -> None:
    """Master: hand the stage's remaining permits to the live workers (one share each)."""
    runner = rt.environment.runner
    live = [c.id for c in runner.clients.all if c.state in ("running", "spawning")]
    remaining = rt.gate.remaining or 0
    for i, worker in enumerate(live):
        share = remaining // len(live) + (1 if i < remaining % len(live) else 0)
        n = rt.gate.grant(rt.gate.stage, share)
        if n:
            grant = PermitGrant(stage=rt.gate.stage, n=n).to_dict()
            runner.send_message(MSG_PERMIT_GRANT, grant, client_id=worker)


def _cpu_warnings(runner: Any) -> list[str]:
    out = []
    if getattr(runner, "cpu_warning_emitted", False):
        out.append(warning_text("cpu_high_local"))
    if getattr(runner, "worker_cpu_warning_emitted", False):
        out.append(warning_text("cpu_high_worker"))
    return out


# ---- event listeners ---------------------------------------------------------------------------
def _on_parser(parser: Any, **_kw: Any) -> None:
    # Locust builds a parser again for each start form it shows (after init: _form_stages set)
    options.add_arguments(parser, web_ui_stages=_form_stages)
    # everything that listens binds loopback unless told otherwise (containers pass 0.0.0.0);
    # streams in flight at the stop may finish (Locust's own default cancels them at once)
    parser.set_defaults(
        master_bind_host="127.0.0.1",
        web_host="127.0.0.1",
        stop_timeout=options.STOP_TIMEOUT_DEFAULT_S,
    )
    for action in parser._actions:
        if action.dest == "stop_timeout":
            action.help = (
                "Seconds users may take to finish the request they are streaming when the test "
                f"stops (locust-llm's default {options.STOP_TIMEOUT_DEFAULT_S:g}, the default "
                "--llm-read-timeout; 0 cancels them, recorded as 'cancelled'). When running "
                "distributed, this only needs to be specified on the master."
            )


def _on_init(environment: Any, **_kw: Any) -> None:
    global _form_stages
    runner = environment.runner
    if runner is None:  # run_single_user: configured at test_start
        return
    try:
        rt = runtime(environment)  # reads and checks every --llm-* option
        if not isinstance(runner, WorkerRunner):
            check_before_load(rt)
    except InputError as exc:
        logger.error("locust-llm: %s; no load was sent", exc)
        sys.exit(2)
    if isinstance(runner, WorkerRunner):
        runner.register_message(
            MSG_STOP, lambda environment, msg, **kw: _worker_stop(rt), concurrent=True
        )
        runner.register_message(
            MSG_STAGE, lambda environment, msg, **kw: _worker_stage(rt, msg.data)
        )
        runner.register_message(
            MSG_PERMIT_GRANT, lambda environment, msg, **kw: _receive_grant(rt, msg.data)
        )
        runner.register_message(
            MSG_CANCEL, lambda environment, msg, **kw: _cancel_in_flight(rt), concurrent=True
        )
        _install_signal_handlers(rt)
        _install_parent_death(rt)
        mark_initialised(environment)
        return
    if environment.web_ui is not None:
        _form_stages = isinstance(environment.shape_class, ChecksOptions)
        webtab.install(environment, rt)
        webform.install(environment, lambda: _check_form(rt))
        webui_state.install(environment)
    if isinstance(runner, MasterRunner):
        runner.register_message(
            MSG_RECORDS,
            lambda environment, msg, **kw: rt.recorder.receive_batch(
                RecordBatch.from_dict(msg.data)
            ),
        )
        runner.register_message(
            MSG_DRAINED, lambda environment, msg, **kw: rt.drained.add(str(msg.data))
        )
        runner.register_message(MSG_PERMIT_ASK, lambda environment, msg, **kw: _grant(rt, msg.data))
    opts = rt.options
    if environment.shape_class is None and (opts.concurrency or opts.rate or opts.soak):
        logger.error(
            "locust-llm: --llm-concurrency/--llm-rate/--llm-soak need a locustfile with a stage "
            "shape (locustfiles/sweep.py); %s has none",
            opts.locustfile or "this locustfile",
        )
        sys.exit(2)
    try:  # made and locked before any file in it is opened: a second run on it is refused
        run_dir = Path(opts.run_dir) if opts.run_dir else new_run_dir(Path("reports"), "")
        rt.run_dir_claim = lock_run_dir(run_dir)
        claim_run_dir(run_dir, overwrite=opts.overwrite)
        ensure_writable(run_dir)
    except OSError as exc:
        logger.error("locust-llm: run dir %s is not writable (%s); no load was sent", run_dir, exc)
        sys.exit(2)
    except InputError as exc:
        logger.error("locust-llm: %s; no load was sent", exc)
        sys.exit(2)
    rt.run_dir = run_dir
    _install_signal_handlers(rt)
    _install_parent_death(rt)
    # Locust's quitting listeners fire last-registered first, and the runner's own (registered
    # before this) stops the test and writes the run dir: this one, registered now, fires
    # before it and notes that the run is being cut short
    environment.events.quitting.add_listener(lambda **_kw: _note_quitting(rt))
    if not environment.stop_timeout:
        logger.warning(
            "locust-llm: --stop-timeout is 0, so requests still streaming when the test stops "
            "are cancelled (recorded as 'cancelled'); set it above your longest stream"
        )
    mark_initialised(environment)


def check_before_load(rt: Runtime) -> None:
    """Master / single process, at start: the shape's options (a stage shape: its plan parses)
    and every LLM user class's settings (its server URLs http/https), API, output lengths and
    data set (a dry pass: the
    whole file read, one prompt drawn) are usable; the first problem is an InputError. Workers
    run the same data set checks at test_start, with the options the master sends them."""
    shape = rt.environment.shape_class
    if isinstance(shape, ChecksOptions):
        shape.check_options(rt.options)
    for user_class in llm_user_classes(rt.environment):
        settings = rt.settings_for(user_class)
        for url in settings.hosts:  # another scheme would be sent as HTTP
            validate.http_url(f"{user_class.__name__}'s host (--host)", url)
        get_api(settings.api)
        if settings.max_tokens:
            lengths.max_tokens(settings.max_tokens, what=f"{user_class.__name__}.max_tokens")
        rt.dataset_for(settings).next_request(random.Random(0))


def _check_form(rt: Runtime) -> None:
    """A test submitted from the web UI: its options reread and checked as at start."""
    rt.configure()
    check_before_load(rt)


def _on_test_start(environment: Any, **_kw: Any) -> None:
    if environment.runner is None and distributed_process(environment):
        await_runner(environment)  # a worker's first spawn can come before its runner is set
    rt = runtime(environment)
    try:
        rt.configure()
        _resolve_user_classes(rt)  # models discovered once, before any user sends
    except InputError as exc:
        logger.error("locust-llm: %s", exc)
        environment.process_exit_code = 2
        rt.gate.stop()  # a user spawned before the quit sends nothing (StopUser)
        if environment.runner is not None:
            gevent.spawn(environment.runner.quit)
            return
        raise SystemExit(2) from None
    rt.gate.start()
    rt.stats.reset()
    if rt.is_debug:
        rt.gate.enter_stage(-1, quota=rt.options.debug_requests, final=True)
        _print_debug_lines(rt)
        return
    if rt.is_worker:
        rt.recorder.pending.clear()
        if rt.flusher is None or rt.flusher.dead:
            rt.flusher = gevent.spawn(_flush_loop, rt)
    else:
        rt.drained.clear()  # a new test: every worker drains again at its stop
        begin_run(rt)
        if rt.history_greenlet is None or rt.history_greenlet.dead:
            rt.history_greenlet = gevent.spawn(_history_loop, rt)
        _start_telemetry(rt)
    gc.collect()
    gc.freeze()  # start-up objects out of the collector's way (fewer, shorter GC pauses)


def _print_debug_lines(rt: Runtime) -> None:
    """The debug path: each request's figures and text on stdout, after Locust's own line
    (a listener on ``llm_events.request_done``, added once)."""
    if rt.debug_listener is not None:
        return

    def show(record: RequestRecord, **_kw: Any) -> None:
        text, cut = shown_text(rt.redact(rt.debug_answers.pop(record.request_id, "")))
        print(debug_line(record, text, cut=cut), flush=True)

    rt.debug_listener = show
    llm_events.request_done.add_listener(show)


def _resolve_user_classes(rt: Runtime) -> None:
    """Each LLM user class's settings, model (discovered) and, where users run, data set."""
    for user_class in llm_user_classes(rt.environment):
        settings = rt.settings_for(user_class)
        if not settings.hosts:
            raise InputError(
                f"{user_class.__name__}: no host (--host, --llm-hosts or the class's host)"
            )
        for url in settings.hosts:  # the web UI's form sets --host after check_before_load
            validate.http_url(f"{user_class.__name__}'s host (--host)", url)
        try:
            rt.model_for(settings)
        except RequestFailed as exc:  # unreachable: each request tries again, as a record
            logger.debug("locust-llm: %s", exc)
        get_api(settings.api)  # an unknown API name fails here, listing the known ones
        if not rt.is_master:
            rt.dataset_for(settings)


def _start_telemetry(rt: Runtime) -> None:
    """Master / single process: scrape GPU exporters, the server's /metrics and worker CPU."""
    if rt.telemetry is not None:
        rt.telemetry.stop()
    runner = rt.environment.runner
    hosts = rt.hosts
    targets = targets_from_options(rt.parsed_options, hosts[0] if hosts else None)
    rt.telemetry = TelemetryScraper(
        targets,
        rt.options.scrape_interval_s,
        cpu_probe=lambda: locust_worker_cpu(runner),
        demand_probe=lambda: _cpu_demand(rt),
        shown_source=rt.redact,
    ).start()


def _cpu_demand(rt: Runtime) -> dict[str, float]:
    """Each worker's latest CPU demand (master), or this process's own (one process)."""
    if rt.is_master:
        return dict(rt.worker_cpu_demand)
    return {"local": rt.cpu_demand.sample()}


def _flush_loop(rt: Runtime) -> None:
    while True:
        gevent.sleep(rt.options.record_batch_s)
        _flush_records(rt)


def _flush_records(rt: Runtime) -> None:
    runner = rt.environment.runner
    schedule = rt.gate.schedule  # open-loop arrivals drawn and unsent, per stage
    progress = (
        rt.recorder.sent_total,
        rt.recorder.recorded_total,
        rt.recorder.backing_off,
        schedule.tally(),
    )
    if rt.recorder.pending or progress != rt.last_progress_sent:
        batch = rt.recorder.take_batch(rt.worker_id, schedule.counts)
        runner.send_message(MSG_RECORDS, batch.to_dict())
        rt.last_progress_sent = progress


def _history_loop(rt: Runtime) -> None:
    while True:
        gevent.sleep(1.0)
        if rt.stats.entries and not rt.run_ended:
            rt.stats.snapshot_history()


def _worker_stop(rt: Runtime) -> None:
    runner = rt.environment.runner
    runner.stop()  # stops users (graceful within --stop-timeout); test_stop flushes
    # the users are stopped (or never started: Locust's stop returns at once on a stopped
    # runner and test_stop does not fire); either way Locust's own 'stop', next, must not
    # sleep the spawn's stop timeout deaf to the master
    rt.environment.stop_timeout = 0
    _flush_records(rt)
    runner.send_message(MSG_DRAINED, rt.worker_id)


def _on_test_stopping(environment: Any, **_kw: Any) -> None:
    """Master: the test is stopping (the web UI's Stop, a sweep's end, a quit): drain the
    workers now, beside their message loops, before Locust sends its own ``stop``.

    A running stage shape is ended first, as Locust's stop does right after this event, so no
    stage starts while the workers drain."""
    rt = runtime(environment)
    if not rt.is_master:
        return
    runner = environment.runner
    shape = getattr(runner, "shape_greenlet", None)
    if shape is not None and shape is not gevent.getcurrent():
        shape.kill(block=True)
        runner.shape_greenlet = runner.shape_last_tick = None
    rt.gate.stop()
    if _drain_workers(rt) and not rt.run_ended:
        # every worker's last records are in: the run dir is written now, while Locust still
        # says "running", so its "stopping" lasts only until the workers answer its 'stop'.
        # Locust's web UI polls the state only while a test runs: a poll that read "stopping"
        # (during a write on a busy host) was its last, and the page said STOPPING for good.
        _finalise_run(rt)


def _on_test_stop(environment: Any, **_kw: Any) -> None:
    rt = runtime(environment)
    rt.gate.stop()
    if rt.is_worker:
        _flush_records(rt)
        send_stats = getattr(environment.runner, "_send_stats", None)
        if send_stats is not None:  # the last stats delta, before client_stopped
            send_stats()
        # every user has stopped: nothing for Locust's worker to wait for after 'stop' (it
        # sleeps the stop timeout, deaf to the master, before it is ready again); the next
        # spawn brings the master's stop timeout back
        environment.stop_timeout = 0
        return
    if rt.is_master and rt.run_ended and rt.run_info is not None:
        return  # finalised at test_stopping, every worker drained
    if rt.is_master:
        _drain_workers(rt)
    _finalise_run(rt)


def _finalise_run(rt: Runtime) -> None:
    """Master / single process: every record is in; end the stages and write the run dir."""
    environment = rt.environment
    if rt.telemetry is not None:
        rt.telemetry.stop()
        # every request has ended: the servers' counters are scraped once more, after the last
        # (the timers' latest scrape could precede it by an interval, and the last stage's
        # server counts, to the first scrape after its end, then missed its last requests)
        rt.telemetry.scrape_once(probe=False)
    if rt.run_info is not None:
        rt.run_info.end_wall_s = time.time()
    for stage in rt.stages:
        if math.isnan(stage.end_wall_s):
            stage.end_wall_s = rt.run_info.end_wall_s if rt.run_info else time.time()
    rt.stats.snapshot_history()
    rt.run_ended = True
    write_run_dir(rt)
    opts = environment.parsed_options
    last = getattr(opts, "headless", False) or getattr(opts, "autoquit", -1) >= 0
    if environment.host and last:
        # no test follows: Locust's HTML report, written next, shows --host without credentials
        environment.host = masked_url(environment.host)


def _drain_workers(rt: Runtime) -> bool:
    """Master: make every worker stop, flush and confirm before the run dir is written (one
    drain at a time: a second caller waits for the one under way). True when every worker
    still connected has confirmed."""
    runner = rt.environment.runner
    if rt.draining:
        while rt.draining:
            gevent.sleep(0.05)
    else:
        running = [
            c.id
            for c in runner.clients.all
            if c.state in ("running", "spawning", "ready") and c.id not in rt.drained
        ]  # a worker drained already in this test (test_stopping, then test_stop) is not asked
        if running:
            rt.draining = True
            try:
                _drain(rt, runner, running)
            finally:
                rt.draining = False
    return {c.id for c in runner.clients.all if c.state != "missing"} <= rt.drained


def _drain(rt: Runtime, runner: Any, running: list[str]) -> None:
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


def _stop_gracefully(rt: Runtime) -> None:
    """Stop the load, drain in-flight streams (up to --stop-timeout) and finalise the run dir;
    test_stop does the draining and writing."""
    runner = rt.environment.runner
    if runner is None or getattr(runner, "state", "") in ("stopped", "stopping", "quitting"):
        return
    logger.info("locust-llm: stopping the test (in-flight requests drain, then the run dir)")
    if rt.is_master:
        # our own stop first: a worker handles it beside its message loop (Locust's 'stop'
        # blocks that loop while users drain), so a second signal's cancel still reaches it
        rt.gate.stop()
        _drain_workers(rt)
    runner.stop()


def _install_signal_handlers(rt: Runtime) -> None:
    """SIGTERM or SIGINT (Ctrl-C) stops the test gracefully, then quits, from the moment the
    run dir exists; a second one cancels the requests still in flight (each recorded
    ``cancelled``).

    Installed at init and again at test_start: Locust's main puts its own SIGTERM handler in
    place in between (it quits at once: the workers get ``quit`` before their last records), and
    a Python-level handler set after it is the one the process keeps. SIGINT is ours too:
    Python's default raises KeyboardInterrupt in whichever greenlet runs when it lands, and a
    user greenlet killed that way between claiming its next request (a trace line, a permit)
    and recording it left that request without a record (a fresh-clone CI run lost trace line
    32 of 60 so).
    """

    def handle(signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if rt.stop_requested and rt.interrupted_by:
            if not rt.cancel_requested:  # a second signal: cancel what is in flight
                rt.cancel_requested = True
                logger.info("locust-llm: got %s again: cancelling the requests in flight", name)
                gevent.spawn(_cancel_in_flight, rt)
            return
        rt.stop_requested = True
        rt.interrupted_by = rt.interrupted_by or name
        logger.info("locust-llm: got %s: stopping the test", name)
        gevent.spawn(_stop_then_quit, rt)

    if threading.current_thread() is threading.main_thread():  # signal.signal's own rule
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, handle)


def _install_parent_death(rt: Runtime) -> None:
    """``locust-llm run`` died (:data:`PARENT_DIED`, once however often the kernel sends it):
    the master or single process stops as after one SIGTERM; a worker waits for its master's
    stop and quit, and exits by itself only if none came (``parent_death``'s docstring)."""
    seen: list[bool] = []

    def parent_died() -> None:
        if seen:
            return
        seen.append(True)
        if not rt.is_worker:
            if not rt.run_ended:
                rt.interrupted_by = rt.interrupted_by or "the death of locust-llm run (its parent)"
            logger.info("locust-llm: locust-llm run died: stopping as after a SIGTERM")
            os.kill(os.getpid(), signal.SIGTERM)
            return
        wait_s = worker_wait_s(rt.environment.stop_timeout or 0, DRAIN_GRACE_S, QUIT_GRACE_S)
        logger.info("locust-llm: locust-llm run died: its master stops it (%g s at most)", wait_s)
        gevent.spawn(_await_master_quit, rt, time.monotonic() + wait_s)

    # gevent's own watcher: Locust's main leaves this signal alone, and it wakes the hub at once
    rt.parent_death_watch = gevent.signal_handler(PARENT_DIED, parent_died)


def _await_master_quit(rt: Runtime, deadline: float) -> None:
    """An orphaned worker waits for its master's quit until ``deadline`` (monotonic), or until
    the master is silent (no heartbeat for MASTER_SILENT_S: it died with ``run``); then nobody
    can take its records any more (a worker writes no file), so it exits without Locust's
    teardown."""
    while time.monotonic() < deadline:
        gevent.sleep(1.0)
        heard = getattr(rt.environment.runner, "last_heartbeat_timestamp", None) or 0.0
        if time.time() - heard > MASTER_SILENT_S:
            break
    logger.info("locust-llm: no master quit this worker after locust-llm run died; exiting")
    logging.shutdown()
    os._exit(1)


def _cancel_in_flight(rt: Runtime) -> None:
    """Cancel every request in flight now, each recorded as ``cancelled`` (the user's read
    loop catches the kill); a master passes it on to its workers, which then flush."""
    runner = rt.environment.runner
    if runner is None:
        return
    if rt.is_master:
        for client in runner.clients.all:
            if client.state != "missing":
                runner.server.send_to_client(Message(MSG_CANCEL, None, client.id))
        return
    rt.gate.stop()
    runner.user_greenlets.kill(block=True, timeout=5)
    if rt.is_worker:
        _flush_records(rt)


def _stop_then_quit(rt: Runtime) -> None:
    """Stop (drain, finalise the run dir), then quit: Locust's main loop then exits.

    With a stage shape running, the shape itself ends at its next tick (``stop_requested``),
    exactly as after its last stage: Locust's headless main waits for the shape, which drains
    the workers and writes the run dir before anything quits."""
    runner = rt.environment.runner
    shape_greenlet = getattr(runner, "shape_greenlet", None)
    if not rt.is_worker and shape_greenlet is not None and not shape_greenlet.dead:
        return
    try:
        if rt.is_worker:
            runner.stop()
            _flush_records(rt)
        else:
            _stop_gracefully(rt)
            if not (rt.run_ended and rt.written_records == rt.recorder.count):
                write_run_dir(rt)
    finally:
        runner.quit()
        # Locust's main may still be in a loop of its own (a master waiting for its workers):
        # once the run dir is safe, end it there
        gevent.spawn_later(QUIT_GRACE_S, _end_main_greenlet)


def _end_main_greenlet() -> None:
    """Still here QUIT_GRACE_S after the stop and quit: Locust's main is stuck in a loop of its
    own that no greenlet can end (a master's wait for workers). The run dir is final (or no
    run began), so exit without Locust's own teardown."""
    logger.info("locust-llm: stopped by a signal; exiting")
    logging.shutdown()
    sys.stdout.flush()
    codes = [rt.environment.process_exit_code for rt in all_runtimes() if not rt.is_worker]
    os._exit(next((c for c in codes if c), 0))


def _on_report_to_master(client_id: str, data: dict[str, Any], **_kw: Any) -> None:
    for rt in all_runtimes():
        if rt.is_worker and rt.worker_id == client_id:
            data["llm_stats"] = rt.stats.take_delta()
            data["llm_cpu_demand"] = rt.cpu_demand.sample()  # since the last report
            return


def _on_worker_report(client_id: str, data: dict[str, Any], **_kw: Any) -> None:
    delta = data.get("llm_stats")
    demand = data.get("llm_cpu_demand")
    for rt in all_runtimes():
        if rt.is_master:
            if isinstance(demand, float | int):
                rt.worker_cpu_demand[str(client_id)] = float(demand)
            if delta:
                rt.stats.merge_delta(delta)
            return


def _note_quitting(rt: Runtime) -> None:
    """Locust is shutting down (its SIGTERM handler, Ctrl+C, a web UI quit) while the run
    still goes: the run is interrupted, and stopped gracefully here (workers drain, the run dir
    is written) before the runner's own listener quits the workers. Locust's SIGTERM handler
    runs this again on a second SIGTERM: the requests in flight are then cancelled (recorded)
    and this waits until the first call has written the run dir."""
    if rt.run_ended or rt.run_info is None:
        return
    if rt.quitting_seen:  # a second SIGTERM / Ctrl+C while the first still drains
        if not rt.cancel_requested:
            rt.cancel_requested = True
            logger.info("locust-llm: stopped again: cancelling the requests in flight")
            _cancel_in_flight(rt)
        deadline = time.monotonic() + (rt.environment.stop_timeout or 0) + DRAIN_GRACE_S
        while not rt.run_ended and time.monotonic() < deadline:  # the first writes the run dir
            gevent.sleep(0.05)
        return
    rt.quitting_seen = True
    rt.interrupted_by = rt.interrupted_by or "a stop signal (SIGTERM or Ctrl+C: Locust shut down)"
    _stop_gracefully(rt)  # now, before the runner's own listener sends its workers 'quit'


def _on_quitting(environment: Any, **_kw: Any) -> None:
    rt = next((r for r in all_runtimes() if r.environment is environment), None)
    if rt is None or rt.is_worker:
        return
    _note_quitting(rt)
    if not rt.run_ended and rt.environment.runner is not None:
        _stop_gracefully(rt)  # Locust's own SIGTERM handler quits without stopping the test
    if not (rt.run_ended and rt.written_records == rt.recorder.count):
        write_run_dir(rt)  # records that arrived after the test stopped (or no stop at all)
    with rt.run_dir_lock:
        rt.recorder.remove_journal()
    unreachable = llmstats.unreachable_line(rt.stats, [masked_url(h) for h in rt.hosts])
    if unreachable:
        logger.error("locust-llm: %s", unreachable)
    if rt.stats.entries and rt.options.headless:
        print(llmstats.format_table(rt.stats), flush=True)


def _on_quit(**_kw: Any) -> None:
    """Locust's last word (after its own tables): where the run dir is and the command line
    that reports on it, once the master or single process wrote its run.json."""
    for rt in all_runtimes():
        command = report_command(rt.run_dir) if rt.run_dir and not rt.is_worker else ""
        if command:
            print(f"locust-llm: run dir {rt.run_dir}; its report: {command}", flush=True)


def install(user_base: type) -> None:
    """Register the listeners on Locust's global events (once); ``user_base``'s subclasses are
    the LLM user classes checked and resolved at start (``client.user`` passes ``LLMUser``)."""
    global _installed, _user_bases
    if user_base not in _user_bases:
        _user_bases = (*_user_bases, user_base)
    if _installed:
        return
    _installed = True
    events.init_command_line_parser.add_listener(_on_parser)
    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)
    events.test_stopping.add_listener(_on_test_stopping)
    events.test_stop.add_listener(_on_test_stop)
    events.report_to_master.add_listener(_on_report_to_master)
    events.worker_report.add_listener(_on_worker_report)
    events.quitting.add_listener(_on_quitting)
    events.quit.add_listener(_on_quit)
