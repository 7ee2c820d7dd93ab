"""The server's words: each error kind's most frequent message, with numbers and ids folded.

Every failed record keeps the message it failed with (``RequestRecord.error_message``: an HTTP
error's body, an in-stream error, our own description of a timeout or a refused connection),
masked by ``client/redact.py`` and cut to 300 characters when the record is made. This module
turns those messages into what a person reads first: for each error kind, how many requests
failed with it and the message most of them carried, with its count. The report (console,
report.md/html, the verdict, summary.json) and the web UI's LLM tab all read it from here.

Pure: no I/O, standard library only.

- **Words**: an HTTP error whose body is OpenAI-style JSON (``{"error": {"message": ...}}``,
  vLLM's ``{"object": "error", "message": ...}``, FastAPI's ``{"detail": ...}``) is read as
  ``HTTP 400: <its message>``, even when the body was cut; any other message as it is, its
  whitespace folded.
- **One message, whatever its numbers**: numbers, UUIDs and long ids (8+ characters mixing
  letters and digits) are the message's *slots*; two messages with the same text around their
  slots are one message ("request 17 too long" and "request 18 too long"). It is shown with
  the slots that were the same in every request filled in and the others as ``{n}`` (a number)
  or ``{id}``: "maximum context length is 64 tokens. However, you requested {n} tokens".
- **Cut**: the text around the slots is kept to :data:`MESSAGE_CHARS` characters (a longer one
  ends in "…"), so messages that differ only past that point are one.
- **Bounded**: a kind keeps at most :data:`MAX_MESSAGES` distinct messages; later new ones
  count toward the kind, not toward a message.

Kinds tallied: every :data:`locust_llm.metrics.ERROR_KINDS` but ``cancelled`` (the load test
stopped those requests itself; nobody said anything).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from locust_llm.metrics import ERROR_KINDS

#: Characters of a message shown (its text around the slots).
MESSAGE_CHARS = 160
#: Distinct messages kept per error kind.
MAX_MESSAGES = 32
#: Raw messages whose keys a tally remembers (:meth:`MessageTally.add`).
KEY_CACHE = 256
#: The kinds whose messages are tallied (``cancelled`` says nothing about the server).
TALLIED_KINDS: tuple[str, ...] = tuple(k for k in ERROR_KINDS if k != "cancelled")

_HTTP = re.compile(r"(HTTP \d{3}: )(.*)", re.DOTALL)
_TEXT_FIELD = re.compile(r'"(?:message|detail)"\s*:\s*"((?:[^"\\]|\\.)*)')
_SLOT = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"  # a UUID
    r"|\b(?=[\w-]*\d)(?=[\w-]*[a-z])[\w-]{8,}\b"  # an id: letters and digits, 8+ long
    r"|\d+(?:\.\d+)?",  # a number
    re.IGNORECASE,
)
_SPACE = re.compile(r"\s+")
_HOLE = "\x00"  # a slot's place in a message's key


def _json_text(value: Any) -> str | None:
    """The human text of a parsed error body, or None."""
    if isinstance(value, dict):
        for key in ("error", "message", "detail"):
            found = _json_text(value.get(key)) if key in value else None
            if found:
                return found
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value:  # FastAPI's validation errors: a list of objects
        return "; ".join(t for t in (_json_text(v) for v in value) if t) or None
    return None


def _body_text(body: str) -> str:
    """A JSON error body's message (also from a body cut short); else the body."""
    if not body.lstrip().startswith(("{", "[")):
        return body
    try:
        found = _json_text(json.loads(body))
    except ValueError:  # cut at the record's limit, or not JSON after all
        match = _TEXT_FIELD.search(body)
        found = None
        if match:
            raw = match.group(1)
            try:
                found = json.loads(f'"{raw}"')
            except ValueError:  # an escape cut in half
                found = raw.replace('\\"', '"')
    return found or body


def server_words(message: str) -> str:
    """What a failure's message says, as a person reads it: an HTTP error's JSON body reduced
    to its message (``HTTP 400: <message>``), whitespace folded to single spaces."""
    text = str(message or "")
    http = _HTTP.fullmatch(text.strip())
    if http:
        text = http.group(1) + _body_text(http.group(2))
    return _SPACE.sub(" ", text).strip()


def message_key(message: str) -> tuple[str, tuple[str, ...]]:
    """A message as (its text with each slot replaced by a hole, cut to
    :data:`MESSAGE_CHARS` characters of text; the slots' values within the cut)."""
    words = server_words(message)
    parts: list[str] = []
    values: list[str] = []
    kept = end = 0
    for match in _SLOT.finditer(words):
        text = words[end : match.start()]
        if kept + len(text) >= MESSAGE_CHARS:
            break
        parts += [text, _HOLE]
        values.append(match.group())
        kept += len(text)
        end = match.end()
    tail, room = words[end:], MESSAGE_CHARS - kept
    parts.append(tail[:room] + ("…" if len(tail) > room else ""))
    return "".join(parts), tuple(values)


def _placeholder(shape: str) -> str:
    return "{n}" if shape.replace(".", "", 1).isdigit() else "{id}"


class _Message:
    """One distinct message: its count, the slots' values the first request had (``shapes``:
    a number or an id) and the slots' values every request agreed on (None where they
    differed)."""

    __slots__ = ("count", "shapes", "values")

    def __init__(self, shapes: tuple[str, ...]) -> None:
        self.count = 0
        self.shapes = shapes
        self.values: list[str | None] = list(shapes)

    def add(self, values: Iterable[str | None], count: int) -> None:
        self.count += count
        self.values = [a if a == b else None for a, b in zip(self.values, values, strict=True)]

    def text(self, key: str) -> str:
        """The message as shown: agreed slots filled in, the others ``{n}`` / ``{id}``."""
        pieces = key.split(_HOLE)
        out = [pieces[0]]
        for value, shape, piece in zip(self.values, self.shapes, pieces[1:], strict=True):
            out += [value if value is not None else _placeholder(shape), piece]
        return "".join(out)


class _Kind:
    """One error kind's count and its distinct messages (at most :data:`MAX_MESSAGES`)."""

    __slots__ = ("count", "messages")

    def __init__(self) -> None:
        self.count = 0
        self.messages: dict[str, _Message] = {}

    def add(self, key: str, shapes: tuple[str, ...], values: Iterable[str | None], n: int) -> None:
        message = self.messages.get(key)
        if message is None:
            if len(self.messages) >= MAX_MESSAGES:
                return
            message = self.messages[key] = _Message(shapes)
        message.add(values, n)


@dataclass(frozen=True)
class KindMessages:
    """One error kind: its count, its most frequent message and that message's count.

    ``message`` is "" when no request of the kind carried one; ``messages`` counts the distinct
    messages (at most :data:`MAX_MESSAGES`); ``share`` is the kind's count over the requests it
    is taken of (NaN when not given)."""

    kind: str
    count: int
    message: str
    message_count: int
    messages: int
    share: float = float("nan")

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class MessageTally:
    """Error messages per kind, counted as they come; mergeable (the live stats' workers send
    theirs to the master) and serialisable as plain JSON."""

    __slots__ = ("_keys", "kinds")

    def __init__(self) -> None:
        self.kinds: dict[str, _Kind] = {}
        #: the keys of messages seen lately (a failing server repeats itself), at most
        #: :data:`KEY_CACHE` of them: a repeated message costs a lookup, not a parse
        self._keys: dict[str, tuple[str, tuple[str, ...]]] = {}

    def __bool__(self) -> bool:
        return bool(self.kinds)

    def add(self, kind: str, message: str, count: int = 1) -> None:
        """Count ``count`` failures of ``kind`` that carried ``message`` ("" = none)."""
        if kind not in TALLIED_KINDS:
            return
        entry = self.kinds.setdefault(kind, _Kind())
        entry.count += count
        if message:
            found = self._keys.get(message)
            if found is None:
                if len(self._keys) >= KEY_CACHE:
                    self._keys.clear()
                found = self._keys[message] = message_key(message)
            key, values = found
            entry.add(key, values, values, count)

    def merge(self, other: MessageTally) -> None:
        for kind, theirs in other.kinds.items():
            mine = self.kinds.setdefault(kind, _Kind())
            mine.count += theirs.count
            for key, message in theirs.messages.items():
                mine.add(key, message.shapes, message.values, message.count)

    def to_dict(self) -> dict[str, Any]:
        """JSON: kind -> [count, [[key, shapes, values, count], ...]]."""
        return {
            kind: [
                entry.count,
                [[k, list(m.shapes), list(m.values), m.count] for k, m in entry.messages.items()],
            ]
            for kind, entry in self.kinds.items()
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MessageTally:
        """The tally :meth:`to_dict` wrote."""
        tally = cls()
        for kind, (count, messages) in data.items():
            entry = tally.kinds[str(kind)] = _Kind()
            entry.count = int(count)
            for key, shapes, values, n in messages:
                message = entry.messages[str(key)] = _Message(tuple(str(s) for s in shapes))
                message.count = int(n)
                message.values = [None if v is None else str(v) for v in values]
        return tally

    def summary(self, requests: int | None = None) -> list[KindMessages]:
        """Each kind with its most frequent message, the most frequent kind first (ties in
        :data:`~locust_llm.metrics.ERROR_KINDS` order); ``requests``: the share's denominator."""
        out = []
        for kind, entry in self.kinds.items():
            top = max(entry.messages.items(), key=lambda km: km[1].count, default=None)
            text, n = ("", 0) if top is None else (top[1].text(top[0]), top[1].count)
            share = entry.count / requests if requests else float("nan")
            out.append(KindMessages(kind, entry.count, text, n, len(entry.messages), share))
        return sorted(out, key=lambda k: (-k.count, ERROR_KINDS.index(k.kind)))


def kind_messages(
    kinds: Iterable[str], messages: Iterable[str], requests: int | None = None
) -> list[KindMessages]:
    """The :meth:`MessageTally.summary` of failures given as parallel ``kinds`` and
    ``messages`` (the records' ``error_kind`` and ``error_message``; ok records' "" kinds are
    left out, as are ``cancelled`` ones)."""
    tally = MessageTally()
    for kind, message in zip(kinds, messages, strict=True):
        tally.add(kind, message)
    return tally.summary(requests)
