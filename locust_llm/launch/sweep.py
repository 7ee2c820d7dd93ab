"""``locust-llm demo`` and ``locust-llm run``: a whole stepped sweep, from start to verdict.

``run`` drives Locust against any OpenAI-compatible server: one master and one worker per core
(Locust processes on 127.0.0.1), the stages of ``--concurrency`` / ``--stage-requests``, the
master scraping the server's ``/metrics`` (and GPU exporters), then the report's console
summary (per stage QPS, tokens/s, TTFT / TPOT / E2E percentiles, errors, then the verdict) and
where the HTML is. ``demo`` first starts the simulated server (mistral-7b on an RTX 4090 unless
told otherwise, KV cache sized so the knee falls inside the sweep) on a free port, then does the
same against it. Both say what they are about to run, then show one progress line per stage
(:mod:`locust_llm.live.progress`, from the master's ``/llm/stats``: the master runs with
``--autostart`` and its web UI on 127.0.0.1 instead of ``--headless``); Locust's own log goes
to ``locust.log`` in the run dir."""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any

from locust_llm.capacity import flags as capacity_flags
from locust_llm.client.parent_death import PARENT_DIED
from locust_llm.client.redact import Redactor, masked_url
from locust_llm.errors import InputError
from locust_llm.launch.early_checks import (
    check_concurrency,
    check_timeouts,
    check_url,
    worker_open_files,
)
from locust_llm.launch.orphans import die_with_parent
from locust_llm.launch.run_options import (
    SWEEP_FLAG_FOR,
    add_plugin_options,
    add_standing_flag,
    host_args,
    launch_redactor,
    plugin_option_args,
    secret_env,
)
from locust_llm.live.progress import ProgressLine, follow
from locust_llm.options.readers import base_url, split_hosts
from locust_llm.options.table import SWEEP_FLAGS, by_name, env_var
from locust_llm.options.validate import roofline_model
from locust_llm.report.diagnosis.thresholds import DEFAULT_THRESHOLDS
from locust_llm.rundir.claim import RunDirClaim, lock_run_dir, new_run_dir
from locust_llm.rundir.layout import claim_run_dir, report_command
from locust_llm.rundir.states import (
    EXIT_CODES,
    FAILED,
    RUNNING,
    banner,
    exit_code,
    stages_not_run,
)
from locust_llm.workloads.stages import StagePlan, parse_stages

LOCUSTFILE = Path(__file__).resolve().parents[1] / "client" / "sweep_locustfile.py"

#: The demo's default target: the simulated server with a KV cache of 1000 blocks of 16 tokens
#: (16,000 tokens: about 50 requests of 256 + 64 tokens fit at once, so the knee falls between
#: concurrency 50 and 100 and past it preemption thrashes).
DEMO_SIM_ARGS = [
    "--model",
    "mistral-7b",
    "--gpu",
    "rtx4090",
    "--num-gpu-blocks-override",
    "1000",
    "--max-num-seqs",
    "256",
    "--step-overhead-ms",
    "2",
    "--seed",
    "1",
]


RUN_EPILOG = """
Every --llm-* option of the Locust plugin is accepted here: the flags above that stand for one
answer to its --llm-* spelling too (--max-tokens or --llm-max-tokens, --out or --llm-run-dir),
and the plugin options listed above are handed to the Locust master and workers as given, e.g.
--llm-tokenizer DIR --llm-seed 7 --llm-header 'X-Team: a' --llm-server-max-num-seqs 64
(`locust-llm options` lists them all with their variables; docs/options.md).
The API key reaches Locust by environment, never on a command line. Anything after a lone --
goes to the Locust master unchanged (e.g. -- --csv out/stats).

Environment: LOCUST_LLM_<NAME> sets --llm-<name> (dashes as underscores, e.g.
LOCUST_LLM_TOKENIZER=/models/m, LOCUST_LLM_EXTRA_BODY='{"top_k": 1}') in the master and every
worker, which inherit this environment. The flags above that stand for an --llm-* option
(--concurrency, --max-tokens, --dataset, --model, ...) take their default from that option's
variable (LOCUST_LLM_CONCURRENCY, LOCUST_LLM_MAX_TOKENS, ...). A flag on the command line wins
over its variable.

Exit codes (run.json's "state"; docs/reliability.md, "Run states"): 0 the run finished; 3 it
finished and an alert or SLO failed; 2 bad input, nothing sent; 4 interrupted (a signal,
--timeout: the stage cut and the stages not run are named); 5 failed (no worker left, the run
dir unwritable, the master died). A second Ctrl+C cancels the requests in flight (each recorded
as cancelled); the master and workers stop with `run` even if it is killed (Linux).
"""


TRUE = ("1", "true", "yes", "on")

#: the ``--llm-roofline-*`` options of a device by hand and the server's tensor parallelism,
#: checked by ``run`` before it starts anything (:func:`device_llm_args`)
DEVICE_OPTIONS = ("roofline-bandwidth", "roofline-flops", "roofline-memory", "roofline-tp")


def _add_sweep_arguments(parser: argparse.ArgumentParser, *, demo: bool) -> None:
    env = not demo  # `run` honours LOCUST_LLM_*; the demo is a fixed showcase
    sweep = [
        ("concurrency", "1,10,50,100,200",
         "concurrency of each stage (default: the seed's 1,10,50,100,200)"),
        ("stage-requests", "10,20,100,200,400",
         "requests per stage (default: the seed's 10,20,100,200,400)"),
        ("stage-duration", "", "seconds per stage instead of request counts"),
        ("max-tokens", "64" if demo else "256", "output tokens per request (N or a distribution)"),
        ("input-len", "256" if demo else "", "prompt tokens (random dataset)"),
        ("dataset", "random", "random, openqa or a file"),
    ]  # fmt: skip
    for name, default, help_text in sweep:
        add_standing_flag(parser, name, default=default, help_text=help_text, use_env=env)
    add_standing_flag(
        parser,
        "rate",
        default="",
        use_env=False,
        help_text="open loop instead: request rates per stage (req/s), e.g. 1,2,4,8 (needs "
        "--stage-duration)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="Locust worker processes (default: one per core this process may use"
        + (", less the simulator's)" if demo else ")"),
    )
    add_standing_flag(
        parser,
        "run-dir",
        default="",
        use_env=False,
        help_text="run dir (default reports/<demo|run>-<UTC time>, -2, -3 ... when taken); "
        "locked while the run lives: a second run on it is refused",
    )
    add_standing_flag(
        parser,
        "overwrite",
        default=False,
        use_env=False,
        action="store_true",
        help_text="reuse an --out dir that holds an earlier, ended run",
    )
    parser.add_argument("--slo", default="", help="objectives, e.g. ttft=1,tpot=0.1 (seconds)")
    add_standing_flag(
        parser,
        "gpu-metrics",
        default=[],
        use_env=False,
        action="append",
        help_text="GPU exporter URL to scrape (repeatable)",
    )
    parser.add_argument(
        "--stop-timeout",
        type=float,
        default=60.0,
        help="seconds streams may take to finish at the end (default 60; >= 0, handed to "
        "Locust in whole seconds, at least 1)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="give up on the whole run after this many seconds (> 0)",
    )
    parser.add_argument("--quiet", action="store_true", help="print only the result")
    add_standing_flag(
        parser,
        "ignore-eos",
        action=argparse.BooleanOptionalAction,
        use_env=False,
        default=demo or (env and os.environ.get(env_var("ignore-eos"), "").lower() in TRUE),
        help_text="ask for exactly --max-tokens tokens (vLLM/SGLang's ignore_eos; the OpenAI API "
        "itself rejects it; default: on for the demo, off for run)",
    )


DEMO_EPILOG = """
The flags above that stand for an --llm-* option answer to its --llm-* spelling too
(--max-tokens or --llm-max-tokens, --out or --llm-run-dir). The demo takes no other --llm-*
option: `locust-llm run --host URL` hands every one to Locust (`locust-llm run --help` lists
them, `locust-llm options` with their variables).
"""


def configure_demo_parser(parser: argparse.ArgumentParser) -> None:
    """Flags of ``locust-llm demo``."""
    parser.epilog = DEMO_EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--model", default="mistral-7b", help="simulated model preset")
    parser.add_argument("--gpu", default="rtx4090", help="simulated GPU preset")
    parser.add_argument(
        "--sim-arg",
        action="append",
        default=[],
        help="extra flag for the simulator, e.g. --sim-arg=--oom (repeatable)",
    )
    _add_sweep_arguments(parser, demo=True)


def configure_run_parser(parser: argparse.ArgumentParser) -> None:
    """Flags of ``locust-llm run``: its own, then every other ``--llm-*`` option as it is."""
    parser.epilog = RUN_EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--host", required=True, help="base URL of the OpenAI-compatible server")
    for name in ("model", "server-metrics", "roofline-model", "roofline-gpu"):
        add_standing_flag(parser, name, default="", use_env=True)
    # a device by hand (instead of --roofline-gpu) and --tp: recorded in run.json's roofline
    # entry, so a later report uses the same device
    for name in DEVICE_OPTIONS:
        add_standing_flag(parser, name, default="", use_env=True)
    add_standing_flag(parser, "api-key", default="", use_env=False)
    _add_sweep_arguments(parser, demo=False)
    capacity_flags.add_flags(parser)
    add_plugin_options(parser)


def device_llm_args(args: argparse.Namespace) -> list[str]:
    """The device flags as ``--llm-roofline-*`` options, checked first (one line naming the
    flag, exit 2, before any process starts)."""
    from locust_llm.roofline.devices import RUN_FLAGS, DeviceArgs, check_tp, measured_cpu

    device = DeviceArgs(args.roofline_gpu, args.bandwidth, args.flops, args.memory)
    device.check(RUN_FLAGS)
    device = measured_cpu(device)  # cpu: this host's figures now, recorded in run.json
    tp = str(args.tp).strip()
    if tp and not tp.isdigit():
        raise InputError(f"--tp {tp!r}: expected a whole number >= 1")
    check_tp(int(tp) if tp else None, flags=RUN_FLAGS)
    values = {"bandwidth": device.bandwidth, "flops": device.flops, "memory": device.memory}
    out: list[str] = []
    for name in DEVICE_OPTIONS:
        dest = SWEEP_FLAG_FOR[name]
        value = str(values.get(dest, getattr(args, dest))).strip()
        if value:
            out += [f"--llm-{name}", value]
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def claim_out(out: str, prefix: str, *, overwrite: bool) -> RunDirClaim:
    """The run dir of ``run`` / ``demo``, made and locked before any file in it is opened:
    ``--out`` (refused while another run holds it, or when it holds an earlier run unless
    ``--overwrite``), else a fresh ``reports/<prefix><UTC time>[-N]`` no other run has."""
    run_dir = Path(out) if out else new_run_dir(Path("reports"), prefix, flag="--out")
    claim = lock_run_dir(run_dir, flag="--out")
    try:
        claim_run_dir(run_dir, overwrite=overwrite)
    except BaseException:
        claim.release()
        raise
    return claim


@contextmanager
def simulator(args: list[str], log_path: Path) -> Iterator[str]:
    """Start ``locust-llm sim`` on a free port; yield its URL; stop it."""
    cmd = [
        sys.executable,
        "-m",
        "locust_llm.cli",
        "sim",
        "--port",
        "0",
        "--bind",
        "127.0.0.1",
        *args,
    ]
    log = log_path.open("w")
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        start_new_session=True,
        preexec_fn=die_with_parent(signal.SIGTERM),
    )
    try:
        assert proc.stdout is not None
        url = _first_line(proc.stdout, timeout_s=60.0)
        if not url.startswith("http"):
            proc.wait(timeout=10)
            raise InputError(f"the simulator did not start (see {log_path}): {url!r}")
        threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
        yield url
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        log.close()


def _first_line(stream: object, timeout_s: float) -> str:
    """The first line a child prints, or '' if it prints none within ``timeout_s``."""
    import selectors

    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)  # type: ignore[arg-type]
        if not sel.select(timeout_s):
            return ""
    return stream.readline().strip()  # type: ignore[attr-defined]


def _drain(stream: object) -> None:
    with suppress(ValueError, OSError):
        stream.read()  # type: ignore[attr-defined]


#: Seconds the master stays up after the run ends (Locust's ``--autoquit``): two polls of
#: ``/llm/stats`` see the run ended, with every record in.
AUTOQUIT_S = 2

_STAGE = re.compile(r"locust-llm: stage (\d+)/(\d+) (.*)$")
_FAILED = re.compile(r"locust-llm: the run failed: (.*?)(; stopping the load)?$")

#: the master's "the run failed: ..." lines of the latest sweep (``run`` says the first one when
#: run.json could not be written)
FAILURES: list[str] = []
#: the signals ``run`` caught and forwarded during the latest sweep
CAUGHT: list[int] = []


def run_sweep(
    *,
    host: str,
    run_dir: Path,
    llm_args: list[str],
    workers: int,
    stop_timeout: float,
    timeout_s: float,
    quiet: bool,
    env: dict[str, str] | None = None,
    plan: Sequence[StagePlan] = (),
    redact: Redactor | None = None,
    claim: RunDirClaim | None = None,
) -> int:
    """Run the sweep locustfile with one master and ``workers`` workers, started at once
    (``--autostart``: no browser needed; the master's web UI on 127.0.0.1 serves the live
    figures the progress line polls) and quitting when the last stage ends. What the Locust
    processes print reaches locust.log and stderr masked by ``redact``. ``claim``: the run
    dir's lock, which the master inherits (it holds the dir while it lives)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    FAILURES.clear()
    log = (run_dir / "locust.log").open("w")
    port, web_port = _free_port(), _free_port()
    given_host, host_env = host_args(host)
    common = ["-f", str(LOCUSTFILE), *given_host]
    procs: list[subprocess.Popen[str]] = []
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {}), **host_env}
    redact = redact or Redactor()
    log_lock = threading.Lock()
    copiers: list[threading.Thread] = []
    locust = [sys.executable, "-m", "locust"]
    stack = ExitStack()
    master_cmd = [
        *locust,
        *common,
        "--autostart",
        "--autoquit",  # the web UI stays up a moment once the run ends, so the progress line
        str(AUTOQUIT_S),  # reads the last stage's settled figures
        "--web-host",
        "127.0.0.1",
        "--web-port",
        str(web_port),
        "--only-summary",
        "--stop-timeout",
        f"{max(1, round(stop_timeout))}s",
        "--llm-run-dir",
        str(run_dir),
        *llm_args,
    ]
    if workers > 0:
        master_cmd += [
            "--master",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            str(port),
            "--expect-workers",
            str(workers),
            "--expect-workers-max-wait",
            "60",
        ]
    try:
        master = subprocess.Popen(
            master_cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**full_env, **(claim.child_env() if claim else {})},
            pass_fds=(claim.fd,) if claim else (),
            start_new_session=True,
            # `run` SIGKILLed: the master stops as after a SIGTERM (drains, finalises the run
            # dir, quits); client.parent_death says why a signal of its own
            preexec_fn=die_with_parent(PARENT_DIED),
        )
        procs.append(master)
        stack.enter_context(_forwarding_signals(master))
        for _ in range(workers):
            worker = subprocess.Popen(
                [
                    *locust,
                    *common,
                    "--worker",
                    "--master-host",
                    "127.0.0.1",
                    "--master-port",
                    str(port),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=full_env,
                start_new_session=True,
                preexec_fn=die_with_parent(PARENT_DIED),  # its master stops it
            )
            procs.append(worker)
            copier = threading.Thread(
                target=_copy_masked, args=(worker, log, log_lock, redact), daemon=True
            )
            copier.start()
            copiers.append(copier)
        progress = None
        if not quiet:
            live = sys.stdout.isatty()
            progress = ProgressLine(sys.stdout, live=live, plan=plan)
        return _follow(
            master,
            log,
            redact=redact,
            log_lock=log_lock,
            progress=progress,
            web_url=f"http://127.0.0.1:{web_port}",
            deadline=time.monotonic() + timeout_s,
            failures=FAILURES,
        )
    finally:
        stack.close()
        for proc in procs:
            if proc.poll() is None:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for copier in copiers:  # a worker's last lines are in the log before it closes
            copier.join(timeout=10)
        with log_lock:
            log.close()


def _copy_masked(
    proc: subprocess.Popen[str], log: Any, lock: threading.Lock, redact: Redactor
) -> None:
    """A worker's output, line by line, masked into locust.log (read to its end whatever
    happens to the log: a worker blocked on a full pipe would stall)."""
    assert proc.stdout is not None
    log_ok = True
    for line in proc.stdout:
        if not log_ok:
            continue
        try:
            with lock:
                log.write(redact(line))
                log.flush()
        except (OSError, ValueError):  # a full disk, or the log closed at the end
            log_ok = False


@contextmanager
def _forwarding_signals(master: subprocess.Popen[str]) -> Iterator[None]:
    """While the Locust processes run: SIGTERM or SIGINT to ``run``/``demo`` becomes a SIGTERM
    to the master, which stops the load, drains, writes the run dir and quits (its workers
    with it); the report is then built as usual. A second signal becomes a second SIGTERM:
    the requests still in flight are cancelled now, each recorded as ``cancelled``, and the
    run dir is written. A third stops waiting at once (the caller's cleanup still stops every
    child)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = CAUGHT
    caught.clear()

    def forward(signum: int, _frame: object) -> None:
        caught.append(signum)
        if len(caught) > 2:
            raise KeyboardInterrupt
        name = signal.Signals(signum).name
        said = (
            "stopping the load test (in-flight requests drain, then the run dir is written; "
            "again to cancel them)"
            if len(caught) == 1
            else "again: cancelling the requests in flight (recorded as cancelled)"
        )
        print(f"locust-llm: got {name}: {said}", file=sys.stderr, flush=True)
        with suppress(ProcessLookupError):
            os.killpg(master.pid, signal.SIGTERM)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _follow(
    master: subprocess.Popen[str],
    log: object,
    *,
    progress: ProgressLine | None,
    web_url: str,
    deadline: float,
    redact: Redactor | None = None,
    log_lock: threading.Lock | None = None,
    failures: list[str] | None = None,
) -> int:
    """Copy the master's output to the log; show progress (stage starts, and the live line
    from the master's ``/llm/stats``); pass errors on; enforce the deadline."""
    assert master.stdout is not None
    started = time.monotonic()

    def time_up() -> None:
        print(
            "locust-llm: --timeout reached: stopping the load test (the run dir keeps every "
            "record so far)",
            file=sys.stderr,
            flush=True,
        )
        with suppress(ProcessLookupError):
            os.killpg(master.pid, signal.SIGTERM)

    timer = threading.Timer(max(deadline - time.monotonic(), 1.0), time_up)
    timer.daemon = True
    timer.start()
    stop = threading.Event()
    poller = follow(web_url, progress, stop) if progress is not None else None
    log_ok = True
    try:
        for raw in master.stdout:
            line = redact(raw) if redact is not None else raw
            if log_ok:
                try:
                    with log_lock or nullcontext():
                        log.write(line)  # type: ignore[attr-defined]
                        log.flush()  # type: ignore[attr-defined]  # readable while the run goes on
                except OSError as exc:  # a full disk: keep following the master
                    log_ok = False
                    print(f"locust-llm: cannot write locust.log ({exc})", file=sys.stderr)
            if _FAILED.search(line) and failures is not None:
                failures.append(_FAILED.search(line).group(1))  # type: ignore[union-attr]
            m = _STAGE.search(line)
            if m and progress is not None and not progress.live:  # after the last stage's end
                progress.stage_header(
                    int(m.group(1)) - 1,
                    f"  [{time.monotonic() - started:5.0f} s] stage {m.group(1)}/{m.group(2)}: "
                    f"{m.group(3)}",
                )
            elif "ERROR" in line or "CRITICAL" in line:
                if progress is not None and progress.live:
                    progress.message("  " + line.rstrip())
                else:
                    print("  " + line.rstrip(), file=sys.stderr, flush=True)
        return master.wait()
    finally:
        timer.cancel()
        stop.set()
        if poller is not None:
            poller.join(timeout=10)


def sweep_plan(args: argparse.Namespace) -> tuple[StagePlan, ...]:
    """The stages ``run`` / ``demo`` ask the Locust master for (:func:`_sweep_llm_args`: the
    rate over the concurrency, the duration over the request counts, then ``--llm-soak``)."""
    _check_open_loop(args)
    return parse_stages(
        concurrency="" if args.rate else args.concurrency,
        rate=args.rate,
        requests="" if args.stage_duration else args.stage_requests,
        duration=args.stage_duration,
        soak=getattr(args, "llm_soak", "") or "",
        flags=SWEEP_FLAGS,
    )


def _check_open_loop(args: argparse.Namespace) -> None:
    if args.rate and not args.stage_duration:
        raise InputError("--rate: open-loop stages need --stage-duration (seconds per stage)")


def capacity_search_plan(args: argparse.Namespace) -> tuple[StagePlan, ...]:
    """``run --find-capacity``: the flags checked before any process starts (InputError), and
    the largest stage the search may ask for (what the open-file check sizes)."""
    if args.rate:
        raise InputError("--find-capacity plans its own loads: leave out --rate")
    settings, rule, _ = capacity_flags.from_args(
        args, args.slo, flat_gain=DEFAULT_THRESHOLDS.flat_gain
    )
    if not settings.closed:
        raise InputError(
            "--find-capacity rate runs on virtual time (locust-llm virtual --find-capacity rate);"
            " against a server, search users"
        )
    return (StagePlan(concurrency=int(settings.max_load), duration_s=rule.max_duration_s),)


def _capacity_llm_args(args: argparse.Namespace) -> list[str]:
    return [
        "--llm-find-capacity", args.find_capacity,
        "--llm-capacity-slo", args.slo,
        "--llm-capacity-search", capacity_flags.to_spec(args),
    ]  # fmt: skip


def _sweep_llm_args(args: argparse.Namespace) -> list[str]:
    _check_open_loop(args)
    load = ["--llm-rate", args.rate] if args.rate else ["--llm-concurrency", args.concurrency]
    if getattr(args, "find_capacity", ""):
        load = _capacity_llm_args(args)
    out = [
        *load,
        "--llm-max-tokens",
        str(args.max_tokens),
        "--llm-dataset",
        args.dataset,
    ]
    if args.ignore_eos:
        out.append("--llm-ignore-eos")
    if getattr(args, "overwrite", False):
        out.append("--llm-overwrite")
    if getattr(args, "find_capacity", ""):
        pass  # each stage ends when steady (or at its caps), as the search decides
    elif args.stage_duration:
        out += ["--llm-stage-duration", args.stage_duration]
    else:
        out += ["--llm-stage-requests", args.stage_requests]
    if args.input_len:
        out += ["--llm-input-len", str(args.input_len)]
    for url in args.gpu_metrics:
        out += ["--llm-gpu-metrics", url]
    return out


def _report(run_dir: Path, slo: str, *, model: str = "", gpu: str = "") -> int:
    from locust_llm.report import cli as report_cli

    argv = [str(run_dir), "--out", str(run_dir)]
    if slo:
        argv += ["--slo", slo]
    if model:
        argv += ["--model", model]
    if gpu:
        argv += ["--gpu", gpu]
    parser = argparse.ArgumentParser(prog="locust-llm report")
    report_cli.configure_parser(parser)
    return int(report_cli.run(parser.parse_args(argv)) or 0)


def _finish(code: int, run_dir: Path, slo: str, model: str = "", gpu: str = "") -> int:
    """The report and the exit code of a sweep whose master exited with ``code``: the run
    dir's state decides (:mod:`locust_llm.rundir.states`); a run that is not finished says so
    in one banner line (its state, why, the stages not run) after its report."""
    state, line = run_outcome(run_dir)
    if state in ("", RUNNING) and code == 2:  # refused before any load (a line said why)
        print(
            f"locust-llm: the load test ended with exit code {code}; see {run_dir}/locust.log",
            file=sys.stderr,
        )
        return code
    if state in ("", RUNNING) and code not in (0, 1):  # the master could not finish the run dir
        why = FAILURES[0] if FAILURES else f"the Locust master exited with code {code}"
        print(
            f"locust-llm: RUN FAILED: {why}; the run dir {run_dir} was not finalised (its "
            "journal keeps the records written so far)",
            file=sys.stderr,
        )
        return EXIT_CODES[FAILED]
    print()
    try:
        report_code = _report(run_dir, slo, model=model, gpu=gpu)
    except (InputError, OSError) as exc:
        print(f"locust-llm: no report: {exc}", file=sys.stderr)
        report_code = EXIT_CODES[FAILED]
    print(f"\nRun dir: {run_dir}")
    again = report_command(run_dir)
    if again:  # the report again, e.g. with other --slo / --alert thresholds
        print(f"Report it again: {again}")
    if line:
        got = ", ".join(dict.fromkeys(signal.Signals(s).name for s in CAUGHT))
        said = f" (locust-llm got {got})" if got else ""
        print(f"\nlocust-llm: {line}{said}", file=sys.stderr, flush=True)
    return exit_code(state) or report_code


def run_outcome(run_dir: Path) -> tuple[str, str]:
    """The run dir's state and, unless finished, its banner line ('' when run.json is
    unreadable)."""
    from locust_llm.rundir.layout import read_run_info

    try:
        info = read_run_info(run_dir)
    except InputError:
        return "", ""
    not_run = stages_not_run(info.stages_planned, len(info.stages))
    return info.state, banner(info.state, info.state_reason, not_run)


#: cores the demo's simulator takes (one asyncio process)
DEMO_SIM_CORES = 1


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity (``taskset``, a cgroup's cpuset), else
    every core of the host."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity call on this system
        return os.cpu_count() or 1


def choose_workers(cores: int, *, server_cores: int = 0) -> tuple[int, str]:
    """Locust workers per host: one per core of ``cores`` (those this process may use), less
    ``server_cores`` for a server on the same host; at least one. Returns the count and why."""
    workers = max(1, cores - server_cores)
    why = f"one per core of the {cores} this process may use"
    if server_cores:
        why += f", {server_cores} left to the simulator"
        if cores <= server_cores:
            why += ": fewer cores than that, so 1"
    return workers, why


def resolve_workers(args: argparse.Namespace, *, server_cores: int = 0) -> str:
    """Fill in ``args.workers`` when it was not given; the words for the announcement."""
    if args.workers is not None:
        return f"{args.workers} worker(s)"
    args.workers, why = choose_workers(usable_cores(), server_cores=server_cores)
    return f"{args.workers} worker(s) ({why})"


def sweep_description(args: argparse.Namespace) -> str:
    """The sweep in words: its loads and how long each stage lasts."""
    if getattr(args, "find_capacity", ""):
        return f"capacity search ({args.find_capacity}) under --slo {args.slo}"
    per_stage = (
        f"{args.stage_duration} s per stage"
        if args.stage_duration
        else f"{args.stage_requests} requests per stage"
    )
    if args.rate:
        return f"rate {args.rate} req/s, {per_stage}"
    return f"concurrency {args.concurrency}, {per_stage}"


def announce_run(args: argparse.Namespace, run_dir: Path, workers: str) -> str:
    """What ``run`` is about to do, before it starts (host, model, sweep, workers, run dir)."""
    model = f"model {args.model}" if args.model else "model: the first of /v1/models"
    return (
        f"locust-llm run: {masked_url(base_url(args.host))}; {model}; "
        f"sweep {sweep_description(args)}; {workers}; run dir {run_dir}"
    )


def run_demo(args: argparse.Namespace) -> int:
    """``locust-llm demo``."""
    plan = sweep_plan(args)  # bad stage flags stop here, before the simulator starts
    check_timeouts(args.timeout, args.stop_timeout)
    workers = resolve_workers(args, server_cores=DEMO_SIM_CORES)
    check_concurrency(plan, workers=args.workers, servers=1, open_files=worker_open_files())
    claim = claim_out(args.out, "demo-", overwrite=args.overwrite)
    try:
        return _demo_in(args, plan, claim, workers)
    finally:
        claim.release()


def _demo_in(
    args: argparse.Namespace, plan: Sequence[StagePlan], claim: RunDirClaim, workers: str
) -> int:
    run_dir = claim.path
    sim_args = [*DEMO_SIM_ARGS, *args.sim_arg]
    sim_args[sim_args.index("--model") + 1] = args.model
    sim_args[sim_args.index("--gpu") + 1] = args.gpu
    if not args.quiet:
        print(
            f"locust-llm demo: simulated {args.model} on {args.gpu}; sweep "
            f"{sweep_description(args)}; {workers}; run dir {run_dir}",
            flush=True,
        )
    with simulator(sim_args, run_dir / "sim.log") as url:
        if not args.quiet:
            print(f"  simulator at {url}", flush=True)
        llm_args = [
            *_sweep_llm_args(args),
            "--llm-server-metrics",
            f"{url}/metrics",
            "--llm-roofline-model",
            args.model,
            "--llm-roofline-gpu",
            args.gpu,
        ]
        code = run_sweep(
            host=url,
            run_dir=run_dir,
            llm_args=llm_args,
            workers=args.workers,
            stop_timeout=args.stop_timeout,
            timeout_s=args.timeout,
            quiet=args.quiet,
            plan=plan,
            claim=claim,
        )
    finished = _finish(code, run_dir, args.slo, args.model, args.gpu)
    # the demo shows alerts but is not a gate: exit 3 (alerts fired) is for `run` and `report`
    return 0 if finished == 3 else finished


def run_llm_args(args: argparse.Namespace) -> list[str]:
    """The Locust master's arguments for ``run``: sweep flags, plugin options, then after ``--``."""
    llm_args = _sweep_llm_args(args)
    for flag, value in (
        ("--llm-model", args.model),
        ("--llm-server-metrics", args.server_metrics),
        ("--llm-roofline-model", args.roofline_model),
        ("--llm-roofline-gpu", args.roofline_gpu),
    ):
        if value:
            llm_args += [flag, value]
    llm_args += device_llm_args(args)
    return [*llm_args, *plugin_option_args(args), *getattr(args, "passthrough", [])]


def run_run(args: argparse.Namespace) -> int:
    """``locust-llm run``: every flag is checked, then the run dir made and locked, before any
    process starts (so before any request)."""
    # bad stage (or search) flags stop here, before any process starts
    plan = capacity_search_plan(args) if args.find_capacity else sweep_plan(args)
    check_url("--host", args.host)
    check_timeouts(args.timeout, args.stop_timeout)
    roofline_model("--roofline-model", args.roofline_model)
    llm_args = run_llm_args(args)
    env = secret_env(args) or None
    workers = resolve_workers(args)
    servers = split_hosts(getattr(args, by_name("hosts").dest, "") or "")
    for url in servers:
        check_url("--llm-hosts", url)
    check_concurrency(
        plan, workers=args.workers, servers=len(servers) or 1, open_files=worker_open_files()
    )
    claim = claim_out(args.out, "run-", overwrite=args.overwrite)
    try:
        return _run_in(args, plan, claim, llm_args, env, workers)
    finally:
        claim.release()


def _run_in(
    args: argparse.Namespace,
    plan: Sequence[StagePlan],
    claim: RunDirClaim,
    llm_args: list[str],
    env: dict[str, str] | None,
    workers: str,
) -> int:
    run_dir = claim.path
    if not args.quiet:
        print(announce_run(args, run_dir, workers), flush=True)
    code = run_sweep(
        host=base_url(args.host),
        run_dir=run_dir,
        llm_args=llm_args,
        workers=args.workers,
        stop_timeout=args.stop_timeout,
        timeout_s=args.timeout,
        quiet=args.quiet,
        env=env,
        plan=() if args.find_capacity else plan,  # the search plans its stages as it goes
        redact=launch_redactor(args),
        claim=claim,
    )
    return _finish(code, run_dir, args.slo)  # the model and device: run.json's roofline entry
