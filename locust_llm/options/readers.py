"""Readers: a raw ``--llm-*`` value (from Locust's parser, an env var or a config file) to its
typed :class:`~locust_llm.options.config.ClientOptions` field value (pure).

Each reader takes the flag (for its error) and the raw value; a value that cannot be read is
one :class:`~locust_llm.errors.InputError` naming the flag. The option spec
(:mod:`locust_llm.options.table`) names each option's reader.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from locust_llm.errors import InputError


def text(_flag: str, raw: Any) -> str:
    return str(raw or "")


def switch(_flag: str, raw: Any) -> bool:
    return bool(raw)


def inverted_switch(_flag: str, raw: Any) -> bool:
    """A ``--llm-no-X`` switch read as "X is on"."""
    return not raw


def number(flag: str, raw: Any) -> float:
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise InputError(f"{flag} {raw!r}: expected a number") from None


def whole(flag: str, raw: Any) -> int:
    try:
        return int(raw or 0)
    except (TypeError, ValueError):
        raise InputError(f"{flag} {raw!r}: expected a whole number") from None


def strings(_flag: str, raw: Any) -> tuple[str, ...]:
    return tuple(str(item) for item in raw or ())


#: the API version segment an OpenAI SDK ``base_url`` ends with; the adapters' paths hold it
API_VERSION_SEGMENT = "/v1"


def base_url(url: str) -> str:
    """A server URL as users write it -> the base URL requests are made under: spaces and
    trailing slashes dropped, and a final ``/v1`` path segment too (the OpenAI SDK's
    ``base_url`` habit: ``http://h:8000/v1/`` and ``http://h:8000`` are the same server, whose
    chat endpoint is ``/v1/chat/completions``). Any other base path stays
    (``http://gw/team-a`` -> ``/team-a/v1/chat/completions``). A URL without a scheme or host
    is left for :func:`locust_llm.options.validate.http_url` to refuse, its path unchanged."""
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if (
        parts.scheme
        and parts.netloc
        and not parts.query
        and not parts.fragment
        and parts.path.endswith(API_VERSION_SEGMENT)
    ):
        url = url[: -len(API_VERSION_SEGMENT)].rstrip("/")
    return url


def split_hosts(text: str) -> tuple[str, ...]:
    """``"http://a:1/v1/, http://b:2"`` -> base URLs (:func:`base_url`): the one place a
    server URL given by --host, --llm-hosts, a user class's ``host`` or the web UI's form is
    read."""
    return tuple(base_url(h) for h in text.split(",") if h.strip())


def hosts(_flag: str, raw: Any) -> tuple[str, ...]:
    return split_hosts(str(raw or ""))


def parse_headers(values: list[str]) -> tuple[tuple[str, str], ...]:
    """``--llm-header 'Name: value'`` (repeatable) -> (name, value) pairs."""
    out = []
    for number, header in enumerate(values, 1):
        name, sep, value = header.partition(":")
        if not sep or not name.strip():  # its text is not shown: it may be a secret
            raise InputError(
                f"--llm-header (the {_ordinal(number)} one, {len(header)} characters, not "
                "shown): expected 'Name: value'"
            )
        out.append((name.strip(), value.strip()))
    return tuple(out)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def headers(_flag: str, raw: Any) -> tuple[tuple[str, str], ...]:
    return parse_headers(list(raw or ()))


def parse_extra_body(text: str | None) -> dict[str, Any]:
    """``--llm-extra-body`` JSON -> a dict merged into every request body."""
    if not text:
        return {}
    try:
        extra = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"--llm-extra-body is not JSON: {exc}") from None
    if not isinstance(extra, dict):
        raise InputError("--llm-extra-body must be a JSON object")
    return extra


def extra_body(_flag: str, raw: Any) -> dict[str, Any]:
    return parse_extra_body(raw or None)


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
               "g": 1 << 30, "gib": 1 << 30}  # fmt: skip


def parse_byte_size(text: str, what: str) -> int:
    """A byte count: ``1048576``, ``512KiB``, ``1MiB``, ``2GiB`` (K, M, G are binary too); at
    least 1 byte. One InputError naming ``what`` otherwise."""
    raw = str(text).strip()
    digits = raw.rstrip("BbIiKkMmGg ")
    unit = raw[len(digits) :].strip().lower()
    try:
        count = int(digits)
    except ValueError:
        count = -1
    if count < 1 or unit not in _SIZE_UNITS:
        raise InputError(
            f"{what} {text!r}: expected a byte count >= 1 such as 1048576, 512KiB, 1MiB or 2GiB"
        )
    return count * _SIZE_UNITS[unit]


def byte_size(flag: str, raw: Any) -> int:
    return parse_byte_size(raw, flag)
