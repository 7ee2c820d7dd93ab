"""Checks of one ``--llm-*`` option value each, run before any request is sent (pure).

Each check takes the flag and the option's typed value and refuses a value the load test cannot
run with (a time of 0, a length distribution that does not parse, a negative count) as one
``InputError`` naming the flag and what it expects. The option spec
(:mod:`locust_llm.options.table`) names each option's check; ``config.check_options`` runs them
all, then the checks that span several options.
"""

from __future__ import annotations

import math
import os
from typing import Any
from urllib.parse import urlsplit

from locust_llm.errors import InputError
from locust_llm.options import lengths
from locust_llm.workloads.distributions import parse_distribution


def positive_seconds(flag: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"{flag} {value:g}: expected a number of seconds > 0")


class AtLeast:
    """A check that a number is finite and at least ``low`` (``hint`` ends the message)."""

    def __init__(self, low: float, hint: str = "") -> None:
        self.low, self.hint = low, hint

    def __call__(self, flag: str, value: float) -> None:
        if not (math.isfinite(value) and value >= self.low):
            raise InputError(f"{flag} {value:g}: expected >= {self.low:g}{self.hint}")


def pem_file(flag: str, value: str) -> None:
    if value and not os.path.isfile(value):
        raise InputError(f"{flag} {value}: no such file (a PEM of CA certs)")


def length(flag: str, value: str) -> None:
    """A token length: N or a distribution ("" = not given)."""
    if value:
        parse_distribution(value, what=flag)


def output_cap(flag: str, value: Any) -> None:
    """An output cap: N or a distribution ("" = not given)."""
    if value:
        lengths.max_tokens(str(value), what=flag)


def roofline_model(flag: str, value: str) -> None:
    """A model for the report's floors ("" = none): a preset, a config.json / .gguf path or a
    cached Hugging Face id; an unknown name lists the close preset names."""
    if not value:
        return
    from locust_llm.roofline.floors import get_model

    try:
        get_model(value)
    except InputError as exc:
        raise InputError(f"{flag}: {exc}") from None


def http_url(flag: str, url: str) -> None:
    """A server URL: ``http://`` or ``https://`` with a host part (and a valid port, if any).

    A URL without a scheme (``127.0.0.1:8000``, ``localhost:8000/v1``) is refused with the URL
    to write instead: whether a server speaks http or https is not guessed (docs/client.md,
    "Base URLs")."""
    bare = url.strip()
    if not bare:
        raise InputError(f"{flag} {url!r}: empty; expected a URL such as http://127.0.0.1:8000")
    if "://" not in bare:
        raise InputError(
            f"{flag} {url!r}: no scheme; write http://{bare} (or https://{bare} for TLS)"
        )
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018  (raises ValueError on a port out of range or not a number)
    except ValueError as exc:
        raise InputError(f"{flag} {url!r}: not a URL ({exc})") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise InputError(
            f"{flag} {url!r}: expected an http:// or https:// URL (got "
            f"{parts.scheme + '://' if parts.scheme else 'no scheme'})"
        )
    if not parts.hostname:
        raise InputError(f"{flag} {url!r}: no host in the URL (e.g. http://127.0.0.1:8000)")


def http_urls(flag: str, urls: tuple[str, ...]) -> None:
    """Each of a list of server URLs (:func:`http_url`)."""
    for url in urls:
        http_url(flag, url)
