"""Prompt sources: where each request's prompt comes from.

Pure: no Locust, no network; files are read once, at load time, and a malformed one is refused
then (:class:`~locust_llm.errors.InputError` naming the file, the line or item, and what was
expected). :func:`load_dataset` reads a ``--llm-dataset`` value:

- ``random``: prompts of random words whose token length is drawn from ``--llm-input-len``
  (:mod:`locust_llm.workloads.distributions`); every prompt differs from its first word on, so a
  prefix
  cache cannot help. The length is estimated with the simulator's
  :func:`~locust_llm.workloads.textgen.estimate_tokens` (so the simulated server's ``prompt_tokens``
  match it) or, with a local Hugging Face tokenizer (``--llm-tokenizer``, needs the
  ``tokenizers`` package), exact: the length of the message text is ``--llm-input-len``.
- ``openqa``: a built-in set of a few hundred varied questions written for this project
  (``locust_llm/data/openqa.jsonl``).
- a JSONL file (``{"prompt": "..."}`` or ``{"messages": [...]}`` per line, optional
  ``"max_tokens"``) or a ShareGPT JSON file (a list of ``{"conversations": [...]}``: the first
  human turn is the prompt, the reply after it gives the ``max_tokens`` hint). The format follows
  the extension and the first character; ``jsonl:PATH`` / ``sharegpt:PATH`` force it.

Every source answers :meth:`PromptSource.next_request` with a :class:`Prompt`; all randomness
comes from the ``random.Random`` passed in, so a user seeded with ``seed + user index`` sends the
same prompts in every run.

A prompt's token count (:attr:`Prompt.input_tokens_estimate`) is what a chat server tokenizes:
with a tokenizer and a chat template (``--llm-chat-template``, or the one beside the tokenizer:
:mod:`locust_llm.workloads.chat_template`) it counts the rendered template, role markers and the
opened
assistant turn included; without a template it covers the message text only. Either way it is an
estimate: the server's ``usage.prompt_tokens`` replaces it when the server sends one.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Protocol, TextIO

from locust_llm.errors import InputError
from locust_llm.workloads.chat_template import ChatTemplate, find_template
from locust_llm.workloads.distributions import Distribution, parse_distribution
from locust_llm.workloads.prompt import Prompt, PromptSource
from locust_llm.workloads.shared_prefix import PREFIX as SHARED_PREFIX
from locust_llm.workloads.shared_prefix import load_shared_prefix
from locust_llm.workloads.textgen import estimate_tokens
from locust_llm.workloads.texts import WORDS, cut_to_tokens
from locust_llm.workloads.tokenizer import HfTokenizer

#: Prompt length of the random dataset when ``--llm-input-len`` is not given (tokens).
DEFAULT_INPUT_LEN = "256"
ROLES = ("system", "user", "assistant", "developer", "tool")

_SHAREGPT_HUMAN = ("human", "user")
_SHAREGPT_SYSTEM = ("system",)
_SHAREGPT_NOT_REPLY = (*_SHAREGPT_HUMAN, *_SHAREGPT_SYSTEM)


class _Counter(Protocol):
    def __call__(self, text: str) -> int: ...


# --------------------------------------------------------------------------- counting


class _MessagesCounter(Protocol):
    def __call__(self, messages: list[dict[str, str]]) -> int: ...


def messages_counter(count: _Counter, template: ChatTemplate | None) -> _MessagesCounter:
    """Tokens a chat server sees for a message list: the rendered template when there is one,
    else the message texts joined by blank lines."""
    if template is None:
        return lambda messages: count("\n\n".join(m["content"] for m in messages))
    return lambda messages: count(template.render(messages))


# --------------------------------------------------------------------------- random


class RandomSource:
    """Prompts of random common words with a token length drawn from ``input_len``."""

    name = "random"

    def __init__(
        self,
        input_len: Distribution,
        *,
        seed: int = 0,
        tokenizer: HfTokenizer | None = None,
        template: ChatTemplate | None = None,
    ) -> None:
        self.input_len = input_len
        self._tokenizer = tokenizer
        self._count_messages = (
            messages_counter(tokenizer.count, template) if tokenizer and template else None
        )
        self._rng = random.Random(seed)

    def next_request(self, rng: random.Random | None = None) -> Prompt:
        rng = rng or self._rng
        target = self.input_len.sample(rng)
        if self._tokenizer is None:
            text = " ".join(rng.choices(WORDS, k=target))
            tokens = target  # every word is one token by estimate_tokens
        else:
            text, tokens = cut_to_tokens(self._tokenizer, rng, target)
        messages = [{"role": "user", "content": text}]
        if self._count_messages is not None:
            tokens = self._count_messages(messages)
        return Prompt(messages, text, tokens, None)


# --------------------------------------------------------------------------- fixed sets


@dataclass(frozen=True, slots=True)
class _Entry:
    messages: list[dict[str, str]]
    max_tokens: int | None


class ListSource:
    """A fixed list of prompts (openqa, JSONL, ShareGPT); each request draws one at random."""

    def __init__(
        self, name: str, entries: Sequence[_Entry], *, seed: int = 0, count: _MessagesCounter
    ) -> None:
        if not entries:
            raise InputError(f"dataset {name}: no prompts in it")
        self.name = name
        self._entries = list(entries)
        self._count = count
        self._prompts: dict[int, Prompt] = {}
        self._rng = random.Random(seed)

    def __len__(self) -> int:
        return len(self._entries)

    def next_request(self, rng: random.Random | None = None) -> Prompt:
        i = (rng or self._rng).randrange(len(self._entries))
        prompt = self._prompts.get(i)
        if prompt is None:  # built on first use: big files load fast, counts are paid once
            entry = self._entries[i]
            text = "\n\n".join(m["content"] for m in entry.messages)
            prompt = Prompt(entry.messages, text, self._count(entry.messages), entry.max_tokens)
            self._prompts[i] = prompt
        return prompt


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def _messages(value: Any, where: str) -> list[dict[str, str]]:
    """Validate a chat message list; text-part lists are flattened to a plain string."""
    expected = 'a non-empty list of {"role": ..., "content": "..."}'
    if not isinstance(value, list) or not value:
        raise InputError(f'{where}: "messages" must be {expected}')
    out = []
    for k, msg in enumerate(value):
        if not isinstance(msg, dict) or msg.get("role") not in ROLES:
            raise InputError(
                f'{where}: message {k} needs a "role" of {", ".join(ROLES)}; expected {expected}'
            )
        content = msg.get("content")
        if isinstance(content, list):
            if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
                raise InputError(f"{where}: message {k} has non-text content parts")
            content = "".join(str(p.get("text", "")) for p in content)
        if not isinstance(content, str):
            raise InputError(f'{where}: message {k} "content" must be a string')
        out.append({"role": msg["role"], "content": content})
    return out


def _max_tokens(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f'{where}: "max_tokens" must be a whole number >= 1, got {value!r}')
    return value


def read_jsonl(path: str | Path) -> list[_Entry]:
    """Entries of a JSONL file; InputError names the file and line of the first bad one."""
    entries = []
    expected = 'a JSON object with "prompt" (string) or "messages" (list), optional "max_tokens"'
    with _open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{where}: not JSON ({exc.msg}); expected {expected}") from None
            if not isinstance(obj, dict) or ("prompt" in obj) == ("messages" in obj):
                raise InputError(f"{where}: expected {expected}")
            if "prompt" in obj:
                if not isinstance(obj["prompt"], str) or not obj["prompt"].strip():
                    raise InputError(f'{where}: "prompt" must be a non-empty string')
                messages = _user(obj["prompt"])
            else:
                messages = _messages(obj["messages"], where)
            entries.append(_Entry(messages, _max_tokens(obj.get("max_tokens"), where)))
    return entries


def read_sharegpt(path: str | Path, count: _Counter) -> list[_Entry]:
    """First human turn of each conversation (after any system turn); the reply sets max_tokens.

    Conversations without a human turn are skipped (real ShareGPT dumps hold some); a file whose
    structure is wrong is refused with the item index.
    """
    expected = (
        'a JSON list of {"conversations": [{"from": "human"|"gpt"|"system", "value": "..."}]}'
    )
    with _open(path) as fh:
        try:
            data = json.load(fh)
        except json.JSONDecodeError as exc:
            raise InputError(
                f"{path}: not JSON (line {exc.lineno}: {exc.msg}); expected {expected}"
            ) from None
    if not isinstance(data, list):
        raise InputError(f"{path}: top level is a {type(data).__name__}; expected {expected}")
    entries = []
    for k, item in enumerate(data):
        where = f"{path}: item {k}"
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list):
            raise InputError(f"{where}: expected {expected}")
        for t, turn in enumerate(turns):
            if not (
                isinstance(turn, dict)
                and isinstance(turn.get("from"), str)
                and isinstance(turn.get("value"), str)
            ):
                raise InputError(f'{where}, turn {t}: expected {{"from": str, "value": str}}')
        entry = _first_exchange(turns, count)
        if entry is not None:
            entries.append(entry)
    return entries


def _first_exchange(turns: list[dict[str, str]], count: _Counter) -> _Entry | None:
    system = []
    for t, turn in enumerate(turns):
        role, value = turn["from"].lower(), turn["value"]
        if role in _SHAREGPT_SYSTEM and value.strip():
            system = [{"role": "system", "content": value}]
        elif role in _SHAREGPT_HUMAN and value.strip():
            after = turns[t + 1] if t + 1 < len(turns) else None
            is_reply = after is not None and after["from"].lower() not in _SHAREGPT_NOT_REPLY
            reply = after["value"] if is_reply and after is not None else ""
            hint = count(reply) if reply.strip() else None
            return _Entry([*system, *_user(value)], hint)
    return None


def _open(path: str | Path) -> TextIO:
    try:
        return open(path, encoding="utf-8")  # the caller closes it
    except OSError as exc:
        raise InputError(f"dataset file {path}: cannot open ({exc.strerror})") from None


def read_openqa() -> list[_Entry]:
    """The built-in question set (package data)."""
    ref = resources.files("locust_llm") / "data" / "openqa.jsonl"
    with resources.as_file(ref) as path:
        return read_jsonl(path)


# --------------------------------------------------------------------------- load_dataset


def sniff_format(path: str | Path) -> str:
    """``"jsonl"`` or ``"sharegpt"`` from the extension, else from the first visible character."""
    suffix = Path(path).suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    with _open(path) as fh:
        head = fh.read(4096).lstrip()
    if head.startswith("["):
        return "sharegpt"
    if head.startswith("{"):
        return "jsonl"
    raise InputError(
        f"dataset file {path}: cannot tell its format; expected JSONL (one object per line) or "
        "a ShareGPT JSON list (force one with jsonl:PATH or sharegpt:PATH)"
    )


def load_dataset(
    spec: str,
    *,
    input_len: str | None = None,
    seed: int = 0,
    tokenizer_path: str | None = None,
    chat_template: str | None = None,
) -> PromptSource:
    """The prompt source for a ``--llm-dataset`` value (see the module docstring).

    ``input_len`` (a distribution string) applies to ``random`` only; given with another data
    set it is refused rather than silently ignored. ``seed`` seeds the source's own generator,
    used when :meth:`~PromptSource.next_request` gets no ``rng``. ``chat_template`` is the
    ``--llm-chat-template`` value (a file or ``none``; default: the template beside the
    tokenizer); it needs a tokenizer.
    """
    spec = (spec or "").strip()
    if not spec:
        raise InputError("--llm-dataset is empty; expected random, openqa or a file path")
    tokenizer = HfTokenizer(tokenizer_path) if tokenizer_path else None
    if chat_template and chat_template.strip().lower() != "none" and tokenizer is None:
        raise InputError(
            f"--llm-chat-template {chat_template}: counting with a chat template needs the "
            "model's tokenizer too; give --llm-tokenizer"
        )
    template = find_template(chat_template, tokenizer_path) if tokenizer else None
    count: _Counter = tokenizer.count if tokenizer else estimate_tokens
    count_messages = messages_counter(count, template)
    if spec == "random":
        dist = parse_distribution(input_len or DEFAULT_INPUT_LEN, what="--llm-input-len")
        return RandomSource(dist, seed=seed, tokenizer=tokenizer, template=template)
    if input_len:
        raise InputError(
            f"--llm-input-len applies to the random dataset only, not to {spec!r}; drop it"
        )
    if spec == "openqa":
        return ListSource("openqa", read_openqa(), seed=seed, count=count_messages)
    if spec.startswith(SHARED_PREFIX):  # docs/workloads.md
        return load_shared_prefix(spec, seed=seed, tokenizer=tokenizer)
    fmt, _, rest = spec.partition(":")
    if fmt in ("jsonl", "sharegpt") and rest:
        path = rest
    else:
        fmt, path = "", spec
    if not Path(path).is_file():
        raise InputError(
            f"--llm-dataset {spec!r}: no such file; expected random, openqa, or a path to a "
            "JSONL / ShareGPT JSON file (optionally prefixed jsonl: or sharegpt:)"
        )
    try:
        fmt = fmt or sniff_format(path)
        entries = read_jsonl(path) if fmt == "jsonl" else read_sharegpt(path, count)
    except UnicodeDecodeError as exc:
        raise InputError(_not_utf8(path, exc)) from None
    return ListSource(Path(path).name, entries, seed=seed, count=count_messages)


def _not_utf8(path: str | Path, exc: UnicodeDecodeError) -> str:
    """The one-line refusal of a data set file that is not UTF-8 text."""
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        guess = "it looks UTF-16 (convert it: iconv -f UTF-16 -t UTF-8)"
    elif b"\x00" in head or exc.start < 16:
        guess = "it looks binary"
    else:
        guess = "re-save it as UTF-8"
    return f"dataset file {path}: not UTF-8 text (byte {exc.start}); {guess}"
