"""The one redactor: every secret value the options hold, replaced by ``***`` wherever it shows.

Secrets are known by value, not by how they were spelled on the command line: the API key
(``--llm-api-key``, however abbreviated, or ``$OPENAI_API_KEY``) and every ``--llm-header``
value. :class:`Redactor` is applied to each record's error message before it reaches the
recorder, Locust's request event (its stats and failures CSV, HTML report, stdout) or the live
stats, to run.json's command line, and (:class:`RedactingFilter`) to every log line. A refused
command line (:func:`refusal_redacted`) never echoes a secret option's value, nor the value of an
option it does not know. Pure.
"""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, redirect_stderr
from typing import TYPE_CHECKING

from locust_llm.options.table import OPTIONS

if TYPE_CHECKING:
    from locust_llm.options.config import ClientOptions

MASK = "***"
_MIN_SECRET_LEN = 3  # shorter values ("1", "on") would mask ordinary text everywhere


class Redactor:
    """Replaces each known secret value in a string by :data:`MASK`."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # longest first, so a secret that contains another is masked whole
        unique = {s for s in secrets if s and len(s) >= _MIN_SECRET_LEN}
        self.secrets: tuple[str, ...] = tuple(sorted(unique, key=len, reverse=True))

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def __bool__(self) -> bool:
        return bool(self.secrets)


def secrets_of(options: ClientOptions) -> list[str]:
    """The secret values of ``options``: the API key and every extra header's value."""
    return [options.bearer_key, *(value for _name, value in options.headers)]


def redactor_for(options: ClientOptions) -> Redactor:
    return Redactor(secrets_of(options))


class RedactingFilter(logging.Filter):
    """A logging filter that redacts each record's formatted message (and drops its args)."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        if self.redactor:
            message = record.getMessage()
            redacted = self.redactor(message)
            if redacted != message:
                record.msg, record.args = redacted, None
        return True


def secret_flags() -> tuple[str, ...]:
    """Every flag that takes a secret: the secret ``--llm-*`` options and the ``run`` flags
    standing for them (``--api-key``)."""
    flags = [option.flag for option in OPTIONS if option.secret]
    flags += [f"--{option.run_flag}" for option in OPTIONS if option.secret and option.run_flag]
    return tuple(flags)


def argument_secrets(argv: Sequence[str]) -> list[str]:
    """The values a command line gives secret flags, however abbreviated (``--llm-api-k K``,
    ``--api-key=K``)."""
    flags = secret_flags()
    out: list[str] = []
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if len(name) > 2 and name.startswith("--") and any(f.startswith(name) for f in flags):
            if eq:
                out.append(value)
            elif i + 1 < len(argv):
                out.append(argv[i + 1])
    return out


def shown_unknown(arguments: Sequence[str]) -> str:
    """Arguments a parser does not know, as a refusal shows them: the flags, each value that
    follows one (``--x V`` or ``--x=V``) replaced by :data:`MASK`."""
    shown: list[str] = []
    after_flag = False
    for arg in arguments:
        if arg.startswith("-"):
            name, eq, _value = arg.partition("=")
            shown.append(f"{name}={MASK}" if eq else arg)
            after_flag = not eq
        else:
            shown.append(MASK if after_flag else arg)
            after_flag = False
    return " ".join(shown)


@contextmanager
def refusal_redacted(argv: Sequence[str]) -> Iterator[None]:
    """Within: what goes to stderr (argparse's refusals) reaches it with the secret values of
    ``argv`` masked, also when the parser exits."""
    redact = Redactor(argument_secrets(argv))
    buffer = io.StringIO()
    try:
        with redirect_stderr(buffer):
            yield
    finally:
        sys.stderr.write(redact(buffer.getvalue()))
