"""``locust-llm run``/``demo`` and the ``--llm-*`` options, derived from the one option spec.

An option whose spec entry names a ``run_flag`` is set through that flag of ``run``/``demo``
(``--max-tokens`` for ``--llm-max-tokens``, ``--out`` for ``--llm-run-dir``), which answers to
the ``--llm-*`` spelling too, and (``run``) takes its default from the option's
``LOCUST_LLM_*`` variable. Every other ``--llm-*`` option is accepted by ``run`` as it is and
handed to the Locust master unchanged (:func:`plugin_option_args`). A secret option (the API
key) goes to Locust by environment (:func:`secret_env`), never on a command line; so does a
``--host`` that holds credentials (:func:`host_args`). :func:`launch_redactor` masks what the
Locust processes print before ``run`` writes it to locust.log or stderr.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from locust_llm.client.redact import Redactor, header_secrets, url_secrets
from locust_llm.options.config import ClientOptions
from locust_llm.options.table import OPTIONS, Option, by_name

#: ``--llm-*`` options that ``run``/``demo`` set through flags of their own (flag without
#: --llm- -> the run/demo flag's dest); every other ``--llm-*`` option is accepted as it is.
SWEEP_FLAG_FOR: dict[str, str] = {
    option.name: option.run_flag.replace("-", "_") for option in OPTIONS if option.run_flag
}


def add_standing_flag(
    parser: argparse.ArgumentParser | Any,
    name: str,
    *,
    default: Any,
    use_env: bool,
    help_text: str | None = None,
    **kwargs: Any,
) -> None:
    """Add ``--<run_flag>`` (also spelled ``--llm-<name>``) standing for option ``--llm-<name>``:
    help from the spec unless given; with ``use_env`` its default is the option's environment
    variable when that is set."""
    option = by_name(name)
    if use_env:
        default = os.environ.get(option.env_var, default)
    parser.add_argument(
        f"--{option.run_flag}",
        option.flag,
        dest=SWEEP_FLAG_FOR[name],
        default=default,
        help=option.argparse_help if help_text is None else help_text,
        **kwargs,
    )


#: the title of ``run --help``'s group of the options it hands to Locust as they are
PLUGIN_GROUP = "Locust plugin options (handed to the Locust master and workers as given)"


def plugin_help(option: Option) -> str:
    """An option's help as ``run --help`` lists it: the spec's, with its default where the
    help does not already say one (a switch is off unless given)."""
    shown = option.shown_default
    if not option.takes_value or shown == "-" or "default" in option.help:
        return option.argparse_help
    return f"{option.argparse_help} (default {str(shown).replace('%', '%%')})"


def add_plugin_options(parser: argparse.ArgumentParser) -> None:
    """Every ``--llm-*`` option without a ``run`` flag of its own, unset unless given; each
    listed by ``run --help`` with its help and default from the spec (Locust's own ``--help``
    prints before a locustfile loads, so it cannot list them)."""
    group = parser.add_argument_group(PLUGIN_GROUP)
    for option in OPTIONS:
        if option.run_flag:
            continue
        kwargs = {k: v for k, v in option.argparse_kwargs().items() if k == "action"}
        group.add_argument(
            option.flag, help=plugin_help(option), default=argparse.SUPPRESS, **kwargs
        )


def plugin_option_args(args: argparse.Namespace) -> list[str]:
    """The ``--llm-*`` options given to ``run`` directly, as Locust command-line arguments."""
    out: list[str] = []
    for option in OPTIONS:
        if not option.run_flag and hasattr(args, option.dest):
            out += option.to_args(getattr(args, option.dest))
    return out


def secret_env(args: argparse.Namespace) -> dict[str, str]:
    """The secret options ``run`` has a flag for (the API key), as the ``LOCUST_LLM_*``
    variables of the Locust processes: a command line is visible to every user of the host.
    (``--llm-header`` values go on the command line, masked in run.json.)"""
    env: dict[str, str] = {}
    for option in OPTIONS:
        if option.secret and option.run_flag:
            value = getattr(args, SWEEP_FLAG_FOR[option.name], None)
            if value:
                env[option.env_var] = str(value)
    return env


def host_args(host: str) -> tuple[list[str], dict[str, str]]:
    """How a Locust process gets ``--host``: on its command line, or (a URL with credentials,
    which any user of the host could read there) by ``$LOCUST_HOST``."""
    if url_secrets(host):
        return [], {"LOCUST_HOST": host}
    return ["--host", host], {}


def launch_redactor(args: argparse.Namespace) -> Redactor:
    """The secrets ``run``/``demo`` hand the Locust processes (the API key from its flag or
    the environment, each header value and its token, the URL options' credentials), for
    masking what those processes print."""
    values: list[str] = [ClientOptions().bearer_key]  # $OPENAI_API_KEY
    for option in OPTIONS:
        if not option.secret:
            continue
        values.append(os.environ.get(option.env_var, ""))
        dest = SWEEP_FLAG_FOR.get(option.name, option.dest)
        given = getattr(args, dest, None)
        for value in given if isinstance(given, list) else [given]:
            if value:
                values += [str(value), *header_secrets(str(value).partition(":")[2])]
    for name in ("host", "llm_hosts", "server_metrics", "llm_server_metrics"):
        for url in str(getattr(args, name, "") or "").split(","):
            values += url_secrets(url)
    return Redactor(values)
