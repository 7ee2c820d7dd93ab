"""The ``locust-llm`` command: one subcommand per job, each defined in the module that owns it.

Every subcommand module exposes ``configure_parser(parser)`` (adds its flags) and
``run(args) -> int`` (the exit code). This file only wires them together, so a subcommand's
imports (pandas for ``report``, the simulator for ``sim``, locust for ``run``/``demo``) are paid
only when that subcommand runs. Arguments after a lone ``--`` go to Locust unchanged (``run``
only). A refused command line never shows a secret option's value, nor the value of an option
it does not know. A command or option it does not know is refused with the closest names it
does know (``unknown option --concurency; did you mean --concurrency?``) under the usage of the
subcommand it was given to. Exit codes: 0 ok, 2 bad input, 3 alerts fired (``report``).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Sequence

from locust_llm import __version__
from locust_llm.client.redact import refusal_redacted, shown_unknown
from locust_llm.errors import InputError

#: subcommand -> (module that implements it, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "locust_llm.launch.sweep",
        "run a stepped sweep against the built-in simulated server",
    ),
    "run": ("locust_llm.launch.sweep", "run a stepped sweep against any OpenAI-compatible server"),
    "report": ("locust_llm.report.cli", "turn a run dir into tables, a verdict and alerts"),
    "roofline": ("locust_llm.roofline.cli", "theoretical latency/throughput floors"),
    "sim": ("locust_llm.sim.cli", "start the simulated OpenAI-compatible server"),
    "virtual": ("locust_llm.sim.virtual", "run a sweep against the simulator in virtual time"),
    "gpu-exporter": ("locust_llm.gpu.cli", "serve GPU and host metrics for Prometheus"),
    "options": ("locust_llm.launch.options_cli", "list every --llm-* option a locustfile accepts"),
}

#: Subcommands that hand the arguments after a lone ``--`` to Locust unchanged.
PASSTHROUGH: tuple[str, ...] = ("run",)

#: each subcommand's parser, as the latest :func:`build_parser` made it
SUBPARSERS: dict[str, argparse.ArgumentParser] = {}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser; with ``only`` just that subcommand's module is imported."""
    parser = argparse.ArgumentParser(
        prog="locust-llm",
        description="Load-test OpenAI-compatible LLM servers on Locust, find the bottleneck: "
        "run a sweep (demo against the built-in simulator, or run against your server), read "
        "its report, compute the roofline floors, serve a simulated server or GPU metrics.",
    )
    parser.add_argument("--version", action="version", version=f"locust-llm {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sp = SUBPARSERS[name] = sub.add_parser(name, help=help_text, description=help_text)
        if only is None or only == name:
            module = importlib.import_module(module_name)
            configure = getattr(module, f"configure_{name.replace('-', '_')}_parser", None)
            (configure or module.configure_parser)(sp)
            sp.set_defaults(_module=module_name, _command=name)
    return parser


def _closest(name: str, known: Sequence[str]) -> str:
    """``"; did you mean X?"`` for the known name closest to ``name`` (difflib), else ``""``."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.7)
    return f"; did you mean {close[0]}?" if close else ""


def _unknown_option(command: str, sub: argparse.ArgumentParser, argv: Sequence[str]) -> str:
    """The first ``--option`` of ``argv`` that subcommand ``command``'s parser ``sub`` does
    not know (not even as an abbreviation), with the closest name it knows; ``""`` when it
    knows them all. Checked before parsing, so a typo is named before a missing required
    flag."""
    known = [o for a in sub._actions for o in a.option_strings if o.startswith("--")]
    for arg in argv:
        if not arg.startswith("--") or arg == "--":
            continue
        name = arg.partition("=")[0]
        if name in known or any(k.startswith(name) for k in known):
            continue  # known, or an abbreviation argparse resolves (or calls ambiguous)
        hint = _closest(name, known)
        if not hint:
            passed = "; Locust's own options go after a lone --" if command in PASSTHROUGH else ""
            hint = f" (locust-llm {command} --help lists them{passed})"
        return f"unknown option {name}{hint}"
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``locust-llm`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, passthrough = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    )
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(only=command if command in SUBCOMMANDS else None)
    with refusal_redacted(argv):
        if command is not None and command not in SUBCOMMANDS:
            names = list(SUBCOMMANDS)
            hint = _closest(command, names) or f" (one of {', '.join(names)})"
            parser.error(f"unknown command {command!r}{hint}")
        if command is not None:
            sub = SUBPARSERS[command]
            problem = _unknown_option(command, sub, argv[argv.index(command) + 1 :])
            if problem:
                sub.error(problem)
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            parser.error(f"unrecognized arguments: {shown_unknown(unknown)}")
    if not getattr(args, "_module", None):
        parser.print_help()
        return 2
    if passthrough and args._command not in PASSTHROUGH:
        parser.error(
            f"arguments after -- ({' '.join(passthrough)}) are for: {', '.join(PASSTHROUGH)}"
        )
    args.passthrough = passthrough
    module = importlib.import_module(args._module)
    runner = getattr(module, f"run_{args._command.replace('-', '_')}", None) or module.run
    try:
        return int(runner(args) or 0)
    except InputError as exc:
        print(f"locust-llm {args._command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
