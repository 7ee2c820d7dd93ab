"""``locust-llm options``: list every ``--llm-*`` option, since Locust's ``--help`` cannot.

Locust prints ``--help`` before it imports the locustfile, and importing ``locust_llm.client.user``
from the locustfile is what registers the ``--llm-*`` options on Locust's parser. This command
prints them (plain text, or the Markdown of ``docs/options.md``), or Locust's complete help with
them included: the parser Locust itself builds, after our listener is registered.
"""

from __future__ import annotations

import argparse

from locust_llm.client import options


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the ``options`` subcommand's flags."""
    form = parser.add_mutually_exclusive_group()
    form.add_argument(
        "--markdown",
        action="store_true",
        help="print the reference page docs/options.md (Markdown tables)",
    )
    form.add_argument(
        "--locust",
        action="store_true",
        help="print Locust's whole --help, the --llm-* options included",
    )


def locust_help() -> str:
    """Locust's ``--help`` text as ``locust -f <a locust-llm locustfile> --help`` should print."""
    from locust import argument_parser

    import locust_llm.client.user  # noqa: F401  (registers the --llm-* options on Locust's parser event)

    parser = argument_parser.get_parser()
    parser.prog = "locust"
    return parser.format_help()


def run(args: argparse.Namespace) -> int:
    """Print the options in the form asked; exit code 0."""
    if args.locust:
        text = locust_help()
    elif args.markdown:
        text = options.render_markdown()
    else:
        text = options.render_text()
    print(text, end="")
    return 0
