"""The one redactor: every secret value the options hold, replaced by ``***`` wherever it shows.

Secrets are known by value, not by how they were spelled on the command line: the API key
(``--llm-api-key``, however abbreviated, or ``$OPENAI_API_KEY``) and every ``--llm-header``
value. :class:`Redactor` is applied to each record's error message before it reaches the
recorder, Locust's request event (its stats and failures CSV, HTML report, stdout) or the live
stats, to run.json's command line, and (:class:`RedactingFilter`) to every log line. Pure.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable

from locust_llm.client.config import ClientOptions

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
    api_key = options.api_key or os.environ.get("OPENAI_API_KEY", "")
    return [api_key, *(value for _name, value in options.headers)]


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
