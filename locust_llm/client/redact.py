"""The one redactor: every form of every secret the options hold, replaced by ``***``.

The secret set (:func:`secrets_of`): the API key (``--llm-api-key``, however abbreviated, or
``$OPENAI_API_KEY``); every ``--llm-header`` value and, when it reads ``Scheme token``
(``Bearer KEY``, ``Basic B64``), the token alone (and a Basic token's decoded ``user:pass`` and
password); the credentials of every URL option (``--host``, ``--llm-hosts``,
``--llm-server-metrics``): ``user:pass`` and the password alone, as given and percent-decoded.
Each secret is masked in every form a server or a serializer may write it in
(:func:`secret_forms`): raw, JSON-escaped (``ensure_ascii`` both ways, ``\\/``, upper-case
``\\uXXXX``), URL-encoded (``quote``, ``quote_plus``, either hex case), HTML-escaped and quoted
as Python writes a ``str`` or ``bytes`` (``repr``, ``ascii``). Besides, any ``scheme://user:pass@``
in any text loses its credentials (``scheme://***@``) whatever their value.

Policy for very short secrets: a secret under :data:`MIN_SECRET_LEN` characters is not masked
by value in free text (masking ``"1"`` or ``"on"`` would garble every message); it is still kept
out by position: its option's value on the command line (run.json, refusals), the userinfo of a
URL, and the error line of a refusal (which masks a command line's secrets of any length).

Cut after masking: text is masked whole and only then cut (:func:`clip`); text that was itself
cut before it could be masked (an error body read up to a limit) is masked with
``truncated=True``, which also masks a tail that begins a secret's form.

:class:`Redactor` is applied to each record's error message before it reaches the recorder,
Locust's request event (its stats and failures tables, CSVs, HTML report, stdout) or the live
stats; to run.json's command line and hosts; and (:class:`RedactingFilter`) to every log line,
tracebacks included. A refused command line (:func:`refusal_redacted`) never echoes a secret
option's value, nor the value of an option it does not know. Pure.
"""

from __future__ import annotations

import base64
import binascii
import html
import io
import json
import logging
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, redirect_stderr, suppress
from typing import TYPE_CHECKING
from urllib.parse import quote, quote_plus, unquote, unquote_plus, urlsplit

from locust_llm.options.table import OPTIONS

if TYPE_CHECKING:
    from locust_llm.options.config import ClientOptions

MASK = "***"
#: secrets shorter than this are not masked by value in free text (module docstring)
MIN_SECRET_LEN = 4
_MASK_PASSES = 4  # masking one form can join text into another; repeat until nothing changes

#: ``scheme://userinfo@``: up to the last ``@`` before the path, query, fragment or a space
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s\"'<>]*@")
_HEX_ESCAPE = re.compile(r"(\\u)([0-9a-fA-F]{4})|(%)([0-9a-fA-F]{2})")
#: a header value ``Scheme token``: an auth scheme word, then the credential
_SCHEME_TOKEN = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_.-]*)\s+(\S.*?)\s*$", re.DOTALL)


def secret_forms(secret: str) -> set[str]:
    """``secret`` as raw text and every escaped spelling of it that text may hold."""
    forms = {secret}
    for ensure_ascii in (True, False):
        escaped = json.dumps(secret, ensure_ascii=ensure_ascii)[1:-1]
        forms |= {escaped, escaped.replace("/", "\\/")}
    for encoded in (quote(secret, safe=""), quote(secret), quote_plus(secret)):
        forms.add(encoded)
    # Python's str and bytes literals, single-quoted and (the ' unescaped) double-quoted
    for quoted in (repr(secret + '"')[1:-2], ascii(secret + '"')[1:-2],
                   repr(secret.encode("utf-8", "surrogatepass") + b'"')[2:-2]):  # fmt: skip
        forms |= {quoted, quoted.replace("\\'", "'")}
    forms.add(html.escape(secret))
    # hex escapes in either case (\u20ac / \u20AC, %2f / %2F)
    for form in list(forms):
        forms.add(_HEX_ESCAPE.sub(lambda m: _hex_case(m, str.upper), form))
        forms.add(_HEX_ESCAPE.sub(lambda m: _hex_case(m, str.lower), form))
    # a secret that is itself escaped also shows decoded
    if "\\" in secret:
        with suppress(ValueError):
            forms.add(json.loads(f'"{secret}"'))
    if "%" in secret or "+" in secret:
        forms |= {unquote(secret), unquote_plus(secret)}
    return {form for form in forms if form}


def _hex_case(match: re.Match[str], case: Callable[[str], str]) -> str:
    prefix, digits = (match.group(1), match.group(2)) if match.group(1) else match.group(3, 4)
    return prefix + case(digits)


def header_secrets(value: str) -> list[str]:
    """A header value and, for ``Scheme token``, the token alone (a Basic token's decoded
    ``user:pass`` and password too)."""
    out = [value, value.strip()]
    match = _SCHEME_TOKEN.match(value)
    if match:
        scheme, token = match.groups()
        out.append(token)
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(token, validate=True).decode("utf-8")
            except (binascii.Error, ValueError):
                decoded = ""
            if decoded:
                out += [decoded, decoded.partition(":")[2]]
    return out


def url_secrets(url: str) -> list[str]:
    """The credentials of ``url`` (``scheme://user:pass@host``): ``user:pass`` and the password,
    as given and percent-decoded; none when it has no userinfo."""
    netloc = urlsplit(url.strip()).netloc
    userinfo, at, _host = netloc.rpartition("@")
    if not at or not userinfo:
        return []
    _user, colon, password = userinfo.partition(":")
    out = [userinfo, unquote(userinfo)]
    if colon and password:
        out += [password, unquote(password)]
    return out


def masked_url(url: str) -> str:
    """``url`` with its credentials replaced: ``http://user:pass@host`` -> ``http://***@host``."""
    return _USERINFO.sub(lambda m: m.group("scheme") + MASK + "@", url)


class Redactor:
    """Replaces every form of each known secret, and any URL's credentials, by :data:`MASK`."""

    def __init__(self, secrets: Iterable[str] = (), *, min_len: int = MIN_SECRET_LEN) -> None:
        given = {s for s in secrets if s}
        #: secrets too short to mask by value (the module docstring's policy)
        self.too_short: tuple[str, ...] = tuple(sorted(s for s in given if len(s) < min_len))
        self.secrets: tuple[str, ...] = tuple(sorted(given - set(self.too_short)))
        forms: set[str] = set()
        for secret in self.secrets:
            forms |= {f for f in secret_forms(secret) if len(f) >= min_len}
        # longest first, so a secret that contains another is masked whole
        self.forms: tuple[str, ...] = tuple(sorted(forms, key=lambda f: (-len(f), f)))

    def __call__(self, text: str, *, truncated: bool = False) -> str:
        """``text`` masked; ``truncated``: it was cut before it could be masked, so a tail that
        begins a secret's form is masked too."""
        if "://" in text:
            text = masked_url(text)
        for _ in range(_MASK_PASSES):
            before = text
            for form in self.forms:
                if form in text:
                    text = text.replace(form, MASK)
            if text == before:
                break
        if truncated:
            text = self._tail_masked(text)
        return text

    def _tail_masked(self, text: str) -> str:
        # a cut may also leave half a character (a U+FFFD or a lone surrogate) after the prefix
        body = text.rstrip("\ufffd" + "".join(map(chr, range(0xDC80, 0xDD00))))
        longest = 0
        for form in self.forms:
            for k in range(min(len(form) - 1, len(body)), longest, -1):
                if body.endswith(form[:k]):
                    longest = k
                    break
        if not longest and body == text:
            return text
        if not longest:
            return body
        return body[: len(body) - longest] + MASK

    def clip(self, text: str, limit: int, *, truncated: bool = False) -> str:
        """``text`` masked, then cut to ``limit`` characters (never inside a mask)."""
        return clip(self(text, truncated=truncated), limit)

    def __bool__(self) -> bool:
        return bool(self.forms)


def clip(masked: str, limit: int) -> str:
    """Already-masked text cut to ``limit`` characters; a mask the cut would split is dropped
    whole."""
    if len(masked) <= limit:
        return masked
    cut = masked[:limit]
    start = masked.rfind(MASK, 0, limit + len(MASK) - 1)
    if start != -1 and start < limit < start + len(MASK):
        cut = masked[:start]
    return cut


def secrets_of(options: ClientOptions, hosts: Iterable[str] = ()) -> list[str]:
    """The secret set of ``options`` (module docstring), with the credentials of ``hosts``
    (Locust's ``--host``)."""
    out = [options.bearer_key]
    for _name, value in options.headers:
        out += header_secrets(value)
    for url in [*hosts, *options.hosts, options.server_metrics]:
        out += url_secrets(url)
    return out


def redactor_for(options: ClientOptions, hosts: Iterable[str] = ()) -> Redactor:
    return Redactor(secrets_of(options, hosts))


class RedactingFilter(logging.Filter):
    """A logging filter that redacts each record's formatted message, traceback included (and
    drops its args)."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info or record.exc_text or record.stack_info:
            # the traceback is text too: formatted here, masked, and kept in the message
            extra = record.exc_text or ""
            if record.exc_info and not extra:
                extra = logging.Formatter().formatException(record.exc_info)
            parts = [message, extra, record.stack_info or ""]
            message = "\n".join(p for p in parts if p)
            record.exc_info, record.exc_text, record.stack_info = None, None, None
            record.msg, record.args = message, None
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


#: flags whose value is a URL that may carry credentials
_URL_FLAGS = ("--host", "-H", "--llm-hosts", "--llm-server-metrics")


def argument_secrets(argv: Sequence[str]) -> list[str]:
    """The values a command line gives secret flags, however abbreviated (``--llm-api-k K``,
    ``--api-key=K``), with the header tokens and URL credentials they hold."""
    flags = secret_flags()
    out: list[str] = []
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if not eq:
            value = argv[i + 1] if i + 1 < len(argv) else ""
        if len(name) > 2 and name.startswith("--") and any(f.startswith(name) for f in flags):
            out.append(value)
            out += header_secrets(value.partition(":")[2])
        if name in _URL_FLAGS:
            out += url_secrets(value)
    return [s for s in out if s]


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
    ``argv`` masked, also when the parser exits. The error line also masks a shorter secret
    where it stands as a word of its own (``invalid int value: 'ab'``)."""
    secrets = argument_secrets(argv)
    usage = Redactor(secrets)
    short = [re.compile(rf"(?<!\w){re.escape(s)}(?!\w)") for s in usage.too_short]

    def error(line: str) -> str:
        for pattern in short:
            line = pattern.sub(MASK, line)
        return usage(line)

    buffer = io.StringIO()
    try:
        with redirect_stderr(buffer):
            yield
    finally:
        lines = buffer.getvalue().splitlines(keepends=True)
        sys.stderr.write(
            "".join(error(line) if "error:" in line else usage(line) for line in lines)
        )
