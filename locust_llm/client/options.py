"""The ``--llm-*`` command-line options, added to Locust's parser through its event.

Every option also reads a ``LOCUST_LLM_*`` environment variable and a Locust config-file key
(Locust's parser is configargparse, so ``llm-model = x`` in ``locust.conf`` works). Added to
Locust's parser by ``locust_llm.client.lifecycle``; :func:`add_arguments` is public so the
``demo``/``run`` commands and tests can build the same parser. The client reads them once, as a
``locust_llm.client.config.ClientOptions``.
"""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import dataclass
from itertools import groupby
from typing import Any


def env_var(name: str) -> str:
    """The environment variable of option ``--llm-<name>`` (``LOCUST_LLM_<NAME>``)."""
    return "LOCUST_LLM_" + name.upper().replace("-", "_")


#: seconds without a byte before a stream counts as timed out (``--llm-read-timeout``)
READ_TIMEOUT_DEFAULT_S = 120.0

#: Locust's ``--stop-timeout`` default under locust-llm (Locust's own is 0: cancel at once): a
#: stream still running at the stop either ends within this or stalls past the read timeout
STOP_TIMEOUT_DEFAULT_S = READ_TIMEOUT_DEFAULT_S

#: (flag without --llm-, default, help, extra kwargs)
OPTIONS: list[tuple[str, Any, str, dict[str, Any]]] = [
    ("model", "", "model id to request (default: the first id from /v1/models)", {}),
    (
        "api-key",
        "",
        "API key sent as a Bearer token (default: $OPENAI_API_KEY); never recorded",
        {},
    ),
    (
        "insecure",
        False,
        "do not verify the server's TLS certificate (https only)",
        {"action": "store_true"},
    ),
    (
        "ca-bundle",
        "",
        "PEM file of the CA certificates that sign the server's TLS certificate (a private "
        "CA); default: the system's trust store",
        {},
    ),
    (
        "max-tokens",
        "",
        "output tokens asked per request: N or a distribution such as "
        "uniform:128,512 / normal:256,32 (default: the dataset's hint, else 256)",
        {},
    ),
    (
        "max-tokens-field",
        "max_tokens",
        "request field carrying the output cap: max_tokens "
        "(understood by most servers) or max_completion_tokens",
        {},
    ),
    ("input-len", "", "prompt length for the random dataset: N or a distribution", {}),
    ("dataset", "random", "prompt source: random, openqa, or a JSONL / ShareGPT file", {}),
    ("tokenizer", "", "path to a local Hugging Face tokenizer: exact prompt lengths", {}),
    (
        "chat-template",
        "",
        "chat template for counting prompt tokens as a chat server does: a .jinja file or a "
        "tokenizer_config.json (default: the one beside --llm-tokenizer; 'none': text only)",
        {},
    ),
    ("temperature", 0.0, "sampling temperature", {"type": float}),
    (
        "ignore-eos",
        False,
        "ask the server to ignore EOS so outputs reach max tokens",
        {"action": "store_true"},
    ),
    (
        "no-stream",
        False,
        "non-streaming requests (no TTFT/TPOT/ITL: E2E only)",
        {"action": "store_true"},
    ),
    ("extra-body", "", "JSON object merged into every request body", {}),
    ("header", None, "extra HTTP header 'Name: value' (repeatable)", {"action": "append"}),
    ("connect-timeout", 10.0, "seconds to connect", {"type": float}),
    (
        "read-timeout",
        READ_TIMEOUT_DEFAULT_S,
        "seconds without a byte before a stream counts as timed out",
        {"type": float},
    ),
    ("total-timeout", 600.0, "seconds a whole request may take", {"type": float}),
    (
        "backoff-max",
        5.0,
        "after connection errors in a row a user waits, doubling from 0.1 s up to this many "
        "seconds (jittered), before its next request; 0: no back-off",
        {"type": float},
    ),
    (
        "run-dir",
        "",
        "where run.json / requests.parquet / telemetry.parquet go "
        "(default reports/<UTC timestamp>)",
        {},
    ),
    (
        "overwrite",
        False,
        "reuse a --llm-run-dir that holds an earlier run: its run files and report files are "
        "removed first (default: such a run dir is refused)",
        {"action": "store_true"},
    ),
    (
        "seed",
        0,
        "random seed for prompts and lengths (each user its own stream: seed, worker index and "
        "user index)",
        {"type": int},
    ),
    (
        "share-prompts",
        False,
        "every worker's user N sends the same prompts as user N of the other workers (a "
        "prefix-cache workload); default: prompts distinct across users, workers and hosts",
        {"action": "store_true"},
    ),
    (
        "no-request-id",
        False,
        "leave out the X-Request-Id header (a UUID4 joined to the records) for servers that "
        "refuse it",
        {"action": "store_true"},
    ),
    (
        "hosts",
        "",
        "comma-separated base URLs: requests go round robin over these server "
        "instances (default: --host)",
        {},
    ),
    (
        "server-instances",
        0,
        "server instances behind --host (a load balancer), for the report's throughput gain per "
        "instance (default: the number of --llm-hosts, else 1)",
        {"type": int},
    ),
    (
        "server-max-num-seqs",
        0,
        "the server's batch limit (vLLM --max-num-seqs), for the report's low-concurrency rule "
        "(default: estimated from the KV cache)",
        {"type": int},
    ),
    (
        "transport",
        "auto",
        "how responses are read: kernel (each token timed by the kernel's receive stamp of its "
        "bytes; Linux, http://), ghc (geventhttpclient, timed when Python reads the line), "
        "auto (kernel where it works, else ghc)",
        {"choices": ["auto", "kernel", "ghc"]},
    ),
    (
        "debug-requests",
        3,
        "requests a locustfile run as a plain script (Locust's run_single_user) sends "
        "before it stops",
        {"type": int},
    ),
    (
        "record-batch-s",
        1.0,
        "seconds between record batches a worker sends the master",
        {"type": float},
    ),
    # stages (shapes.py)
    ("concurrency", "", "stepped sweep: concurrency per stage, e.g. 1,10,50,100,200", {}),
    ("stage-requests", "", "requests completed that end each stage, e.g. 10,20,100,200,400", {}),
    ("stage-duration", "", "seconds per stage (one value or one per stage)", {}),
    ("warmup", 0.0, "seconds at the start of each stage excluded from the tables", {"type": float}),
    ("soak", "", "a final soak stage: DURATION[@CONCURRENCY], e.g. 30m@50", {}),
    ("rate", "", "open loop: request rates per stage (req/s), e.g. 1,2,4,8", {}),
    (
        "burstiness",
        1.0,
        "open loop: gamma shape of inter-arrival times (1 = Poisson)",
        {"type": float},
    ),
    (
        "max-users",
        0,
        "open loop: users available to send scheduled requests (default 4 x the "
        "highest rate x --llm-max-tokens / 100, at least 32)",
        {"type": int},
    ),
    # telemetry (telemetry.py)
    (
        "gpu-metrics",
        None,
        "GPU exporter URL(s) to scrape (ours or dcgm-exporter; repeatable)",
        {"action": "append"},
    ),
    (
        "server-metrics",
        "",
        "server /metrics URL (default <host>/metrics if it answers; 'none' to disable)",
        {},
    ),
    ("scrape-interval", 1.0, "seconds between telemetry scrapes", {"type": float}),
    # roofline context for the report
    ("roofline-model", "", "model preset / config.json for the report's floors", {}),
    ("roofline-gpu", "", "GPU preset for the report's floors, or cpu (the host, measured)", {}),
    (
        "roofline-bandwidth",
        "",
        "a device without a preset, for the report's floors: its memory bandwidth, e.g. 40GB/s "
        "(with --llm-roofline-flops and --llm-roofline-memory, instead of --llm-roofline-gpu)",
        {},
    ),
    ("roofline-flops", "", "that device's dense peak, e.g. 1.2TFLOPS", {}),
    ("roofline-memory", "", "that device's memory capacity, e.g. 64GiB", {}),
    (
        "roofline-tp",
        0,
        "tensor-parallel degree of the server: devices the model is split over (default 1)",
        {"type": int},
    ),
]


def add_arguments(parser: Any) -> None:
    """Add every ``--llm-*`` option to ``parser`` (Locust's configargparse parser or argparse)."""
    group = parser.add_argument_group("locust-llm", "LLM load-test options (locust-llm)")
    for flag, default, help_text, extra in OPTIONS:
        kwargs = dict(extra)
        kwargs.setdefault("default", default)
        if "env_var" in _add_argument_params(parser):
            kwargs["env_var"] = env_var(flag)
        group.add_argument(f"--llm-{flag}", help=help_text, **kwargs)


def _add_argument_params(parser: Any) -> set[str]:
    # Locust's parser is a configargparse parser, which accepts env_var=; plain argparse does not
    try:
        import configargparse
    except ImportError:
        return set()
    return {"env_var"} if isinstance(parser, configargparse.ArgumentParser) else set()


def defaults() -> argparse.Namespace:
    """A namespace holding every option's default (for users run outside Locust's CLI)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    return parser.parse_args([])


#: the first option of each section of the reference (the order of ``OPTIONS`` within)
_SECTIONS: dict[str, str] = {
    "model": "requests and the run",
    "concurrency": "stages",
    "gpu-metrics": "telemetry",
    "roofline-model": "roofline context for the report",
}


@dataclass(frozen=True)
class OptionInfo:
    """One ``--llm-*`` option as the reference lists it (``locust-llm options``)."""

    flag: str
    env_var: str
    config_key: str
    default: Any
    help: str
    takes_value: bool
    repeatable: bool
    section: str


def describe() -> list[OptionInfo]:
    """Every ``--llm-*`` option, in declaration order, with its env var and config-file key."""
    infos: list[OptionInfo] = []
    section = ""
    for flag, default, help_text, extra in OPTIONS:
        section = _SECTIONS.get(flag, section)
        action = extra.get("action")
        infos.append(
            OptionInfo(
                flag=f"--llm-{flag}",
                env_var=env_var(flag),
                config_key=f"llm-{flag}",
                default=default,
                help=help_text,
                takes_value=action != "store_true",
                repeatable=action == "append",
                section=section,
            )
        )
    return infos


def _shown_default(info: OptionInfo) -> str:
    if not info.takes_value:
        return "off"
    if info.default in ("", None):
        return "-"
    return str(info.default)


def _usage(info: OptionInfo) -> str:
    if not info.takes_value:
        return info.flag
    metavar = info.flag.removeprefix("--llm-").upper().replace("-", "_")
    return f"{info.flag} {metavar}" + (" (repeatable)" if info.repeatable else "")


def _by_section() -> list[tuple[str, list[OptionInfo]]]:
    return [(name, list(infos)) for name, infos in groupby(describe(), key=lambda i: i.section)]


def render_text() -> str:
    """The options as plain text, one block per option (what ``locust-llm options`` prints)."""
    lines = [
        "The --llm-* options of every locustfile that imports locust_llm; each also reads",
        "LOCUST_LLM_<NAME> from the environment and llm-<name> = ... from a Locust config file.",
        "Locust's own options: locust-llm options --locust. Reference: docs/options.md.",
    ]
    for section, infos in _by_section():
        lines += ["", f"{section}:"]
        for info in infos:
            lines.append(f"  {_usage(info)}  [default: {_shown_default(info)}]")
            lines += textwrap.wrap(info.help, 96, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines) + "\n"


def render_markdown() -> str:
    """The reference page ``docs/options.md``, generated (``locust-llm options --markdown``)."""
    out = [
        "# The `--llm-*` options",
        "",
        "Generated by `.venv/bin/locust-llm options --markdown > docs/options.md` from",
        "`locust_llm/client/options.py`; `tests/test_options.py` fails when this page is stale.",
        "",
        "Every option also reads an environment variable and a key of a Locust config file",
        "(`locust.conf`, `--config FILE`): `--llm-model x`, `LOCUST_LLM_MODEL=x` and",
        "`llm-model = x` are the same setting; the command line wins over the environment, which",
        "wins over the file. Where a user class sets the matching attribute (`model = ...`), the",
        "attribute wins.",
        "",
        "Locust prints `--help` before it imports the locustfile, which is what registers these",
        "options, so `locust -f locustfiles/chat.py --help` does not list them. Instead:",
        "",
        "```bash",
        ".venv/bin/locust-llm options            # these options, with defaults",
        ".venv/bin/locust-llm options --locust   # Locust's whole --help, these options included",
        "```",
    ]
    for section, infos in _by_section():
        out += ["", f"## {section.capitalize()}", ""]
        out += ["| option | env var / config key | default | what it does |", "|---|---|---|---|"]
        out += [
            f"| `{_usage(i)}` | `{i.env_var}` / `{i.config_key}` | {_shown_default(i)} | "
            + i.help.replace("|", "\\|")
            + " |"
            for i in infos
        ]
    return "\n".join(out) + "\n"
