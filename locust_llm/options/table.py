"""The ``--llm-*`` options, each declared once here (:data:`OPTIONS`), added to Locust's parser.

Each entry (:class:`~locust_llm.options.spec.Option`) is the one declaration its uses
derive from: the Locust flag with its ``LOCUST_LLM_*`` environment variable and config-file key
(Locust's parser is configargparse, so ``llm-model = x`` in ``locust.conf`` works), the
reference ``docs/options.md`` (``locust-llm options``), the typed
:class:`~locust_llm.options.config.ClientOptions` field and its check, and the flag of
``locust-llm run``/``demo`` that stands for it. Added to Locust's parser by
``locust_llm.client.lifecycle``; :func:`add_arguments` is public so the ``options`` command and
tests can build the same parser.
"""

from __future__ import annotations

import argparse
from typing import Any

import configargparse

from locust_llm.options import readers, validate
from locust_llm.options.spec import Option, env_var
from locust_llm.workloads.stages import StageFlags

__all__ = [
    "OPTIONS",
    "READ_TIMEOUT_DEFAULT_S",
    "STOP_TIMEOUT_DEFAULT_S",
    "Option",
    "add_arguments",
    "by_name",
    "defaults",
    "env_var",
    "web_ui_options",
]

#: seconds without a byte before a stream counts as timed out (``--llm-read-timeout``)
READ_TIMEOUT_DEFAULT_S = 120.0

#: Locust's ``--stop-timeout`` default under locust-llm (Locust's own is 0: cancel at once): a
#: stream still running at the stop either ends within this or stalls past the read timeout
STOP_TIMEOUT_DEFAULT_S = READ_TIMEOUT_DEFAULT_S

_RUN = "requests and the run"
_STAGES = "stages"
_TELEMETRY = "telemetry"
_ROOFLINE = "roofline context for the report"
_SECONDS = validate.positive_seconds
_NOT_NEGATIVE = validate.AtLeast(0)

#: every ``--llm-*`` option, in the reference's order (sections in this order too)
OPTIONS: tuple[Option, ...] = (
    Option(
        name="model",
        default="",
        help="model id to request (default: the first id from /v1/models)",
        section=_RUN,
        run_flag="model",
        class_attribute=True,
        web_ui=True,
    ),
    Option(
        name="api-key",
        default="",
        help="API key sent as a Bearer token (default: $OPENAI_API_KEY); never recorded",
        section=_RUN,
        secret=True,
        run_flag="api-key",
    ),
    Option(
        name="insecure",
        default=False,
        help="do not verify the server's TLS certificate (https only)",
        section=_RUN,
        kind="switch",
    ),
    Option(
        name="ca-bundle",
        default="",
        help="PEM file of the CA certificates that sign the server's TLS certificate (a private "
        "CA); default: the system's trust store",
        section=_RUN,
        check=validate.pem_file,
    ),
    Option(
        name="max-tokens",
        default="",
        help="output tokens asked per request: N or a distribution such as "
        "uniform:128,512 / normal:256,32 (default: the dataset's hint, else 256)",
        section=_RUN,
        check=validate.output_cap,
        run_flag="max-tokens",
        class_attribute=True,
        web_ui=True,
    ),
    Option(
        name="max-tokens-field",
        default="max_tokens",
        help="request field carrying the output cap: max_tokens "
        "(understood by most servers) or max_completion_tokens",
        section=_RUN,
    ),
    Option(
        name="input-len",
        default="",
        help="prompt length for the random dataset: N or a distribution",
        section=_RUN,
        check=validate.length,
        run_flag="input-len",
        class_attribute=True,
        web_ui=True,
    ),
    Option(
        name="dataset",
        default="random",
        help="prompt source: random, openqa, or a JSONL / ShareGPT file",
        section=_RUN,
        run_flag="dataset",
        class_attribute=True,
        web_ui=True,
    ),
    Option(
        name="tokenizer",
        default="",
        help="path to a local Hugging Face tokenizer: exact prompt lengths",
        section=_RUN,
    ),
    Option(
        name="chat-template",
        default="",
        help="chat template for counting prompt tokens as a chat server does: a .jinja file or a "
        "tokenizer_config.json (default: the one beside --llm-tokenizer; 'none': text only)",
        section=_RUN,
    ),
    Option(
        name="temperature",
        default=0.0,
        help="sampling temperature",
        section=_RUN,
        kind="float",
        check=_NOT_NEGATIVE,
    ),
    Option(
        name="ignore-eos",
        default=False,
        help="ask the server to ignore EOS so outputs reach max tokens",
        section=_RUN,
        kind="switch",
        run_flag="ignore-eos",
    ),
    Option(
        name="no-stream",
        default=False,
        help="non-streaming requests (no TTFT/TPOT/ITL: E2E only)",
        section=_RUN,
        kind="switch",
    ),
    Option(
        name="max-event-bytes",
        default="1MiB",
        help="the longest SSE line or event (the lines up to a blank line) a streamed answer may "
        "hold; a longer one ends the request as bad_payload and drops its connection, so memory "
        "stays bounded whatever a server sends (bytes, or KiB/MiB/GiB; see docs/reliability.md)",
        section=_RUN,
        field="max_event_bytes",
        read=readers.byte_size,
    ),
    Option(
        name="max-body-bytes",
        default="64MiB",
        help="the largest non-streamed answer body (--llm-no-stream, embeddings) read; a larger "
        "one ends the request as bad_payload and drops its connection (bytes, or KiB/MiB/GiB)",
        section=_RUN,
        field="max_body_bytes",
        read=readers.byte_size,
    ),
    Option(
        name="extra-body",
        default="",
        help="JSON object merged into every request body",
        section=_RUN,
        read=readers.extra_body,
    ),
    Option(
        name="header",
        default=None,
        help="extra HTTP header 'Name: value' (repeatable)",
        section=_RUN,
        kind="list",
        field="headers",
        read=readers.headers,
        secret=True,
    ),
    Option(
        name="connect-timeout",
        default=10.0,
        help="seconds to connect",
        section=_RUN,
        kind="float",
        field="connect_timeout_s",
        check=_SECONDS,
        class_attribute=True,
    ),
    Option(
        name="read-timeout",
        default=READ_TIMEOUT_DEFAULT_S,
        help="seconds without a byte before a stream counts as timed out",
        section=_RUN,
        kind="float",
        field="read_timeout_s",
        check=_SECONDS,
        class_attribute=True,
    ),
    Option(
        name="total-timeout",
        default=600.0,
        help="seconds a whole request may take",
        section=_RUN,
        kind="float",
        field="total_timeout_s",
        check=_SECONDS,
        class_attribute=True,
    ),
    Option(
        name="backoff-max",
        default=5.0,
        help="after connection errors in a row a user waits, doubling from 0.1 s up to this many "
        "seconds (jittered), before its next request; 0: no back-off",
        section=_RUN,
        kind="float",
        field="backoff_max_s",
        check=validate.AtLeast(0, " (0: no back-off)"),
    ),
    Option(
        name="run-dir",
        default="",
        help="where run.json / requests.parquet / telemetry.parquet go (default "
        "reports/<UTC timestamp>, -2, -3 ... when taken); locked while the run lives: a second "
        "run on it is refused",
        section=_RUN,
        run_flag="out",
    ),
    Option(
        name="overwrite",
        default=False,
        help="reuse a --llm-run-dir that holds an earlier, ended run: its run files and report "
        "files are removed first (default: such a run dir is refused; a live run's never)",
        section=_RUN,
        kind="switch",
        run_flag="overwrite",
    ),
    Option(
        name="seed",
        default=0,
        help="random seed for prompts and lengths (each user its own stream: seed, worker index "
        "and user index)",
        section=_RUN,
        kind="int",
    ),
    Option(
        name="share-prompts",
        default=False,
        help="every worker's user N sends the same prompts as user N of the other workers (a "
        "prefix-cache workload); default: prompts distinct across users, workers and hosts",
        section=_RUN,
        kind="switch",
    ),
    Option(
        name="no-request-id",
        default=False,
        help="leave out the X-Request-Id header (a UUID4 joined to the records) for servers that "
        "refuse it",
        section=_RUN,
        kind="switch",
        field="request_id_header",
        read=readers.inverted_switch,
    ),
    Option(
        name="hosts",
        default="",
        help="comma-separated base URLs: requests go round robin over these server "
        "instances (default: --host)",
        section=_RUN,
        read=readers.hosts,
        check=validate.http_urls,
    ),
    Option(
        name="server-instances",
        default=0,
        help="server instances behind --host (a load balancer), for the report's throughput gain "
        "per instance (default: the number of --llm-hosts, else 1)",
        section=_RUN,
        kind="int",
        check=_NOT_NEGATIVE,
    ),
    Option(
        name="server-max-num-seqs",
        default=0,
        help="the server's batch limit (vLLM --max-num-seqs), for the report's low-concurrency "
        "rule (default: estimated from the KV cache)",
        section=_RUN,
        kind="int",
        check=_NOT_NEGATIVE,
    ),
    Option(
        name="server-max-num-batched-tokens",
        default=0,
        help="the server's token budget per step (vLLM --max-num-batched-tokens), for the "
        "verdict's token-budget test (vLLM does not expose it over HTTP)",
        section=_RUN,
        kind="int",
        check=_NOT_NEGATIVE,
    ),
    Option(
        name="transport",
        default="auto",
        help="how responses are read: kernel (each token timed by the kernel's receive stamp of "
        "its bytes; Linux, http://), ghc (geventhttpclient, timed when Python reads the line), "
        "auto (kernel where it works, else ghc)",
        section=_RUN,
        choices=("auto", "kernel", "ghc"),
    ),
    Option(
        name="preconnect",
        default=False,
        help="open each user's connection to each server before its first request, so that "
        "request's TTFT and send delay leave the connect out (the kernel transport; "
        "geventhttpclient connects on first use)",
        section=_RUN,
        kind="switch",
    ),
    Option(
        name="debug-requests",
        default=3,
        help="requests a locustfile run as a plain script (Locust's run_single_user) sends "
        "before it stops",
        section=_RUN,
        kind="int",
        check=_NOT_NEGATIVE,
    ),
    Option(
        name="record-batch-s",
        default=1.0,
        help="seconds between record batches a worker sends the master",
        section=_RUN,
        kind="float",
        check=_SECONDS,
    ),
    # stages (shapes.py)
    Option(
        name="concurrency",
        default="",
        help="stepped sweep: concurrency per stage, e.g. 1,10,50,100,200",
        section=_STAGES,
        run_flag="concurrency",
        web_ui=True,
    ),
    Option(
        name="stage-requests",
        default="",
        help="requests completed that end each stage, e.g. 10,20,100,200,400",
        section=_STAGES,
        run_flag="stage-requests",
        web_ui=True,
    ),
    Option(
        name="stage-duration",
        default="",
        help="seconds per stage (one value or one per stage)",
        section=_STAGES,
        run_flag="stage-duration",
        web_ui=True,
    ),
    Option(
        name="warmup",
        default=0.0,
        help="seconds at the start of each stage excluded from the tables",
        section=_STAGES,
        kind="float",
        field="warmup_s",
        check=_NOT_NEGATIVE,
    ),
    Option(
        name="soak",
        default="",
        help="a final soak stage: DURATION[@CONCURRENCY], e.g. 30m@50",
        section=_STAGES,
    ),
    Option(
        name="find-capacity",
        default="",
        help="search the largest load meeting --llm-capacity-slo instead of fixed stages: users "
        "(closed loop); `run --find-capacity` sets it (docs/capacity.md)",
        section=_STAGES,
    ),
    Option(
        name="capacity-slo",
        default="",
        help="the capacity search's objectives, e.g. ttft_p99=2s,errors=1% (run's --slo)",
        section=_STAGES,
    ),
    Option(
        name="capacity-search",
        default="",
        help="the capacity search's settings as KEY=VALUE,... (run's --capacity-* and --stage-* "
        "flags), e.g. start=1,max=512,factor=2,resolution=10%",
        section=_STAGES,
    ),
    Option(
        name="rate",
        default="",
        help="open loop: request rates per stage (req/s), e.g. 1,2,4,8",
        section=_STAGES,
        run_flag="rate",
        web_ui=True,
    ),
    Option(
        name="burstiness",
        default=1.0,
        help="open loop: gamma shape of inter-arrival times (1 = Poisson)",
        section=_STAGES,
        kind="float",
        check=validate.AtLeast(0, " (1 = Poisson)"),  # 0: evenly spaced
    ),
    Option(
        name="max-users",
        default=0,
        help="open loop: users available to send scheduled requests (default 4 x the "
        "highest rate x --llm-max-tokens / 100, at least 32)",
        section=_STAGES,
        kind="int",
        check=_NOT_NEGATIVE,
    ),
    # telemetry (telemetry/)
    Option(
        name="gpu-metrics",
        default=None,
        help="GPU exporter URL(s) to scrape (ours or dcgm-exporter; repeatable)",
        section=_TELEMETRY,
        kind="list",
        run_flag="gpu-metrics",
    ),
    Option(
        name="server-metrics",
        default="",
        help="server /metrics URL (default <host>/metrics if it answers; 'none' to disable)",
        section=_TELEMETRY,
        run_flag="server-metrics",
    ),
    Option(
        name="scrape-interval",
        default=1.0,
        help="seconds between telemetry scrapes",
        section=_TELEMETRY,
        kind="float",
        field="scrape_interval_s",
        check=_SECONDS,
    ),
    # roofline context for the report (the device's checks span options: config.check_options)
    Option(
        name="roofline-model",
        default="",
        help="model preset / config.json for the report's floors",
        section=_ROOFLINE,
        run_flag="roofline-model",
        check=validate.roofline_model,
    ),
    Option(
        name="roofline-gpu",
        default="",
        help="GPU preset for the report's floors, or cpu (the host, measured)",
        section=_ROOFLINE,
        run_flag="roofline-gpu",
    ),
    Option(
        name="roofline-bandwidth",
        default="",
        help="a device without a preset, for the report's floors: its memory bandwidth, e.g. "
        "40GB/s (with --llm-roofline-flops and --llm-roofline-memory, instead of "
        "--llm-roofline-gpu)",
        section=_ROOFLINE,
        run_flag="bandwidth",
    ),
    Option(
        name="roofline-flops",
        default="",
        help="that device's dense peak, e.g. 1.2TFLOPS",
        section=_ROOFLINE,
        run_flag="flops",
    ),
    Option(
        name="roofline-memory",
        default="",
        help="that device's memory capacity, e.g. 64GiB",
        section=_ROOFLINE,
        run_flag="memory",
    ),
    Option(
        name="roofline-tp",
        default=0,
        help="tensor-parallel degree of the server: devices the model is split over (default 1)",
        section=_ROOFLINE,
        kind="int",
        run_flag="tp",
    ),
)

_BY_NAME: dict[str, Option] = {option.name: option for option in OPTIONS}


def by_name(name: str) -> Option:
    """The option ``--llm-<name>``."""
    return _BY_NAME[name]


def add_arguments(parser: Any, *, web_ui_stages: bool = True) -> None:
    """Add every ``--llm-*`` option to ``parser`` (Locust's configargparse parser or argparse):
    with configargparse each also reads its environment variable and config-file key.

    The options marked ``web_ui`` are marked for Locust's web-UI start form the way Locust's own
    ``add_argument(..., include_in_web_ui=True)`` marks an action (its argument groups do not
    take that keyword); the stage options only with ``web_ui_stages`` (a locustfile with a
    stage shape: nothing else reads them)."""
    group = parser.add_argument_group("locust-llm", "LLM load-test options (locust-llm)")
    with_env = isinstance(parser, configargparse.ArgumentParser)  # it takes env_var=
    for option in OPTIONS:
        kwargs = option.argparse_kwargs()
        if with_env:
            kwargs["env_var"] = option.env_var
        action = group.add_argument(option.flag, help=option.argparse_help, **kwargs)
        if option in web_ui_options(stages=web_ui_stages):
            action.include_in_web_ui = True
            action.is_secret = option.secret
            action.is_required = action.is_multiple = False


def web_ui_options(*, stages: bool = True) -> tuple[Option, ...]:
    """The options in the web UI's start form (the stage options only with ``stages``)."""
    return tuple(o for o in OPTIONS if o.web_ui and (stages or o.section != _STAGES))


def defaults() -> argparse.Namespace:
    """A namespace holding every option's default (for users run outside Locust's CLI)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    return parser.parse_args([])


def stage_flags(*, sweep: bool = False) -> StageFlags:
    """The flags a stage plan's errors name: the plugin's ``--llm-*`` options, or (``sweep``)
    the flags of ``run``, ``demo`` and ``virtual`` that stand for them."""

    def flag(name: str) -> str:
        option = by_name(name)
        return f"--{option.run_flag}" if sweep and option.run_flag else option.flag

    names = ("concurrency", "rate", "stage-requests", "stage-duration", "soak")
    return StageFlags(*(flag(name) for name in names))


#: ``locust-llm run`` / ``demo`` / ``virtual``'s stage flags (the soak only as the plugin's)
SWEEP_FLAGS = stage_flags(sweep=True)
