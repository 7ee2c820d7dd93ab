"""OpenAI server-sent-event stream parsing: one ``data:`` line in, one classified chunk out (pure).

The client reads a stream line by line and timestamps each line as it arrives; this module says
what the line carried. It is on the per-token hot path, so the common chunk (a delta with some
text) is classified by one regular-expression pass over its keys (every occurrence of
``content``, ``text``, ``reasoning_content``, ``reasoning``, ``usage``, ``error``,
``finish_reason`` and how its value starts), without building Python objects, and answered with
a shared :class:`Chunk`; ``json.loads`` runs only on chunks that need it (usage, errors, finish
reasons, anything the scan cannot read with certainty). ``parse_chunk_strict`` parses every
chunk fully and is the reference the fast path is tested against (``tests/test_sse.py``: real
llama.cpp and vLLM chunks, and generated ones). The fast path checks the chunk's outer braces,
not its whole structure (a chunk whose ``choices`` is not a list passes it, and a text key is
read wherever it is); truncated or garbled chunks are caught.

Chunk shapes handled: chat (``choices[].delta.content`` / ``reasoning_content`` / ``reasoning``),
completions (``choices[].text``), a final usage chunk (``usage.completion_tokens``), continuous
usage (usage on every chunk), in-stream errors (``{"error": ...}``), ``[DONE]``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

DONE = b"[DONE]"

# What a line is
KIND_IGNORE = 0  # blank line, comment, event:/id:/retry: field, keep-alive
KIND_CHUNK = 1  # a JSON chunk (see Chunk)
KIND_DONE = 2  # data: [DONE]
KIND_BAD = 3  # data that is not a JSON object of the OpenAI shape


@dataclass(slots=True)
class Chunk:
    """What one ``data:`` JSON chunk carried (only the fields the timing needs)."""

    content: bool = False  # carries visible text (content / text)
    reasoning: bool = False  # carries reasoning text
    completion_tokens: int = -1  # usage.completion_tokens if present (cumulative), else -1
    prompt_tokens: int = -1
    reasoning_tokens: int = -1
    cached_tokens: int = -1  # usage.prompt_tokens_details.cached_tokens (prefix-cache hits)
    finish_reason: str | None = None
    error: str | None = None  # an in-stream error message

    @property
    def has_token(self) -> bool:
        return self.content or self.reasoning


#: One pass over a payload: every quoted key the classification depends on, the colon that
#: should follow it (else the word was a value, or the payload is not the shape this scan reads),
#: and how its value starts (``null``, ``""``, ``"`` for a non-empty string, nothing for anything
#: else: a number, a list of parts, an object). Each occurrence is matched whole (one bytes
#: object, no groups) and looked up whole (:func:`_occurrence_flags`).
_KEY_SCAN = re.compile(
    rb'"(?:content|text|reasoning_content|reasoning|usage|error|finish_reason)"'
    rb'[ \t]*:?[ \t]*(?:null|""|"|)'
)
#: the parts of one occurrence, for :func:`_occurrence_flags`
_OCCURRENCE = re.compile(rb'"([a-z_]+)"[ \t]*(:?)[ \t]*(.*)', re.DOTALL)
_CONTENT, _REASONING = 1, 2  # the flags a key occurrence sets
_STRICT = -1  # an occurrence the fast path cannot read: parse the whole chunk
#: (key, colon, value start) -> the flags it sets; an occurrence not here needs the full parse
#: (a usage object, an error, a finish reason, content as a list of parts, a key-like value)
_FLAGS: dict[tuple[bytes, bytes, bytes], int] = {}
for _key, _flag in (
    (b"content", _CONTENT),
    (b"text", _CONTENT),
    (b"reasoning_content", _REASONING),
    (b"reasoning", _REASONING),
    (b"usage", 0),
    (b"error", 0),
    (b"finish_reason", 0),
):
    _FLAGS[(_key, b":", b"null")] = 0
    _FLAGS[(_key, b":", b'""')] = 0  # empty text; an empty error, usage or reason is none
    if _flag:
        _FLAGS[(_key, b":", b'"')] = _flag
#: an occurrence as matched (spacing and all) -> its flags or ``_STRICT``: filled as servers'
#: spellings are met, a few per server; bounded (past it, occurrences are read each time)
_SEEN: dict[bytes, int] = {}
_SEEN_LIMIT = 256
#: the fast path's results, one per flag combination: shared, so read-only (see parse_chunk)
_SHARED = tuple(Chunk(content=bool(f & _CONTENT), reasoning=bool(f & _REASONING)) for f in range(4))
#: the fast path's answer for the ordinary token chunk (text, nothing else): a reader outside
#: the stream's greenlet records exactly these (``kernel_transport.StampedConnection``)
CONTENT_TOKEN = _SHARED[_CONTENT]


def _occurrence_flags(found: bytes) -> int:
    """The flags one matched occurrence sets, or ``_STRICT`` (remembered per spelling)."""
    parts = _OCCURRENCE.fullmatch(found)
    assert parts is not None  # every _KEY_SCAN match has this shape
    flags = _FLAGS.get((parts[1], parts[2], parts[3]), _STRICT)
    if len(_SEEN) < _SEEN_LIMIT:
        _SEEN[found] = flags
    return flags


def text_split(event: bytes) -> tuple[bytes, bytes] | None:
    """An event :func:`parse_chunk` reads as :data:`CONTENT_TOKEN` (its raw ``data:`` line),
    cut around its first text value (``content`` or ``text``, a non-empty string): (the bytes
    up to and with its opening quote, the bytes from its closing quote on); None where the
    first quote after the text's start is an escaped one (the text's end is not found
    without parsing its escapes).

    Any event made of the same two parts around a non-empty middle that holds no ``"`` is read
    the same: :data:`_KEY_SCAN`'s matches all start at a quote and look only forward, the
    ones in the first part and the opener's own match (its value starts with one quote, then
    no quote) are the same, no match starts in the middle, and the scan from the second part on
    is the same. So a reader that knows a stream's split checks a token event by two byte
    comparisons and a search for a quote instead of the scan (``kernel_transport``)."""
    for found in _KEY_SCAN.finditer(event):
        parts = _OCCURRENCE.fullmatch(found.group())
        assert parts is not None  # every _KEY_SCAN match has this shape
        if parts[1] in (b"content", b"text") and parts[2] == b":" and parts[3] == b'"':
            opened = found.end()
            closed = event.find(b'"', opened)
            if closed <= opened or event[closed - 1] == 92:  # 92: a backslash (an escaped quote)
                return None
            return event[:opened], event[closed:]
    return None


def fits_split(data: bytes, start: int, stop: int, split: tuple[bytes, bytes]) -> bool:
    """``data[start:stop]`` is ``split``'s two parts around a non-empty middle holding no
    ``"``: read as the event ``split`` was cut from (:func:`text_split`)."""
    head, tail = split
    opened, closed = start + len(head), stop - len(tail)
    return (
        opened < closed
        and data.startswith(head, start)
        and data.startswith(tail, closed)
        and data.find(b'"', opened, closed) < 0
    )


def data_payload(line: bytes) -> bytes | None:
    """The payload of an SSE ``data:`` line, or None for any other line (blank, comment...)."""
    if not line.startswith(b"data:"):
        return None
    return line[5:].strip()


def parse_chunk(payload: bytes) -> tuple[int, Chunk | None]:
    """Classify one ``data:`` payload. Returns (kind, chunk); chunk is None unless KIND_CHUNK.

    The common chunk (text or reasoning deltas, usage / error / finish reason absent or null)
    is read by one regular-expression pass over its keys and answered with a shared
    :class:`Chunk` that callers must not change; anything else is parsed by
    :func:`parse_chunk_strict`.
    """
    if payload == DONE:
        return KIND_DONE, None
    if not payload or payload[:1] != b"{" or payload[-1:] != b"}":
        return (KIND_IGNORE, None) if not payload else (KIND_BAD, None)
    flags = 0
    known = _SEEN.get
    for found in _KEY_SCAN.findall(payload):
        flag = known(found)
        if flag is None:
            flag = _occurrence_flags(found)
        if flag < 0:
            return parse_chunk_strict(payload)
        flags |= flag
    return KIND_CHUNK, _SHARED[flags]


def parse_chunk_strict(payload: bytes) -> tuple[int, Chunk | None]:
    """Classify one payload by parsing it fully (the reference for :func:`parse_chunk`)."""
    if payload == DONE:
        return KIND_DONE, None
    if not payload:
        return KIND_IGNORE, None
    try:
        obj = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return KIND_BAD, None
    if not isinstance(obj, dict):
        return KIND_BAD, None
    chunk = Chunk()
    error = obj.get("error")
    if error:
        chunk.error = str(error.get("message", error) if isinstance(error, dict) else error)
        return KIND_CHUNK, chunk
    choices = obj.get("choices")
    if choices is not None and not isinstance(choices, list):
        return KIND_BAD, None
    for choice in choices or ():
        if not isinstance(choice, dict):
            return KIND_BAD, None
        delta = choice.get("delta")
        if isinstance(delta, dict):
            chunk.content |= _has_text(delta.get("content"))
            chunk.reasoning |= _has_text(delta.get("reasoning_content")) or _has_text(
                delta.get("reasoning")
            )
        chunk.content |= _has_text(choice.get("text"))
        if choice.get("finish_reason"):
            chunk.finish_reason = str(choice["finish_reason"])
    read_usage(chunk, obj.get("usage"))
    return KIND_CHUNK, chunk


def read_usage(chunk: Chunk, usage: object) -> None:
    """Fill ``chunk``'s token counts from an OpenAI ``usage`` object (no-op unless a dict)."""
    if not isinstance(usage, dict):
        return
    chunk.completion_tokens = _int_or(usage.get("completion_tokens"), -1)
    chunk.prompt_tokens = _int_or(usage.get("prompt_tokens"), -1)
    details = usage.get("completion_tokens_details")
    if isinstance(details, dict):
        chunk.reasoning_tokens = _int_or(details.get("reasoning_tokens"), -1)
    prompt_details = usage.get("prompt_tokens_details")
    if isinstance(prompt_details, dict):
        chunk.cached_tokens = _int_or(prompt_details.get("cached_tokens"), -1)


def _has_text(value: object) -> bool:
    if isinstance(value, str):
        return bool(value)
    if isinstance(value, list):  # content as a list of parts
        return any(isinstance(p, dict) and p.get("text") for p in value)
    return False


def _int_or(value: object, default: int) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def parse_response_body(body: bytes) -> Chunk:
    """A non-streaming response body (``chat.completion`` / ``text_completion``) as one Chunk."""
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"response body is not JSON: {exc}") from exc
    if not isinstance(obj, dict) or not isinstance(obj.get("choices"), list):
        raise ValueError("response body has no 'choices' list")
    chunk = Chunk()
    for choice in obj["choices"]:
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict):
            chunk.content |= _has_text(message.get("content"))
            chunk.reasoning |= _has_text(message.get("reasoning_content"))
        if isinstance(choice, dict):
            chunk.content |= _has_text(choice.get("text"))
            if choice.get("finish_reason"):
                chunk.finish_reason = str(choice["finish_reason"])
    read_usage(chunk, obj.get("usage"))
    return chunk
