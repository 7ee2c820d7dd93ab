"""Multi-turn sessions: conversations, their sources, think time and the history they carry (pure).

A :class:`Session` is a numbered list of user turns (with the data set's own replies, when it
has them). A user runs one :class:`Conversation` at a time: each turn's request holds the whole
history so far (system prompt, earlier user turns and answers) plus the new user turn, so the
server's prefix cache can serve the history. The answers carried are the server's own
(``history = "server"``, the default: what a real chat client sends back) or the data set's
(``"dataset"``: every run sends the same bytes).

Sources (:func:`load_sessions`): ``synthetic`` (turns, per-turn input and output lengths as
distributions, generated per session number), a ShareGPT JSON file
(``[{"conversations": [{"from": "human"|"gpt"|"system", "value": ...}]}]``) or a JSONL file of
``{"messages": [{"role": ..., "content": ...}, ...]}`` lines. :class:`SessionBook` hands the
session numbers ``index, index + count, ...`` of this process's partition to its users, so no
session runs twice across workers.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from locust_llm.errors import InputError
from locust_llm.workloads.distributions import Distribution, parse_distribution
from locust_llm.workloads.textgen import estimate_message_tokens
from locust_llm.workloads.texts import block_text

HISTORY_MODES = ("server", "dataset")
_HUMAN = {"human", "user"}
_ASSISTANT = {"gpt", "assistant", "chatgpt", "bard", "model"}
_SYSTEM = {"system"}


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn: its text, the data set's reply ("" if none) and its output cap."""

    user: str
    reply: str = ""
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Session:
    """A conversation to run: ``session_id`` unique in the run, an optional system prompt."""

    session_id: str
    turns: tuple[Turn, ...]
    system: str = ""


class ThinkTime:
    """Seconds a user waits between two turns: ``2``, ``uniform:1,3`` or ``exponential:2``."""

    def __init__(self, spec: str | float) -> None:
        text = str(spec).strip()
        self.spec = text
        kind, _, args = text.partition(":")
        try:
            values = [float(x) for x in args.split(",")] if args else [float(kind)]
        except ValueError:
            raise InputError(
                f"think time {text!r}: expected seconds, uniform:LOW,HIGH or exponential:MEAN"
            ) from None
        if not args:
            kind = "fixed"
        if kind not in ("fixed", "uniform", "exponential") or any(v < 0 for v in values):
            raise InputError(
                f"think time {text!r}: expected seconds, uniform:LOW,HIGH or exponential:MEAN"
            )
        if kind == "uniform" and (len(values) != 2 or values[0] > values[1]):
            raise InputError(f"think time {text!r}: uniform needs LOW,HIGH with LOW <= HIGH")
        self.kind, self.values = kind, values

    def sample_s(self, rng: random.Random) -> float:
        if self.kind == "uniform":
            return rng.uniform(self.values[0], self.values[1])
        if self.kind == "exponential":
            return rng.expovariate(1.0 / self.values[0]) if self.values[0] > 0 else 0.0
        return self.values[0]


@dataclass(slots=True)
class Conversation:
    """One session being run: the history so far and the next turn's index."""

    session: Session
    history_mode: str = "server"
    turn: int = 0
    history: list[dict[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.session.system and not self.history:
            self.history.append({"role": "system", "content": self.session.system})

    @property
    def done(self) -> bool:
        return self.turn >= len(self.session.turns)

    def messages(self) -> list[dict[str, str]]:
        """The next request's messages: the history and the next user turn."""
        return [*self.history, {"role": "user", "content": self.session.turns[self.turn].user}]

    def max_tokens(self) -> int | None:
        return self.session.turns[self.turn].max_tokens

    def answered(self, server_answer: str) -> None:
        """The turn got ``server_answer``: carry it (or the data set's reply) and move on."""
        turn = self.session.turns[self.turn]
        answer = turn.reply if self.history_mode == "dataset" and turn.reply else server_answer
        self.history.append({"role": "user", "content": turn.user})
        self.history.append({"role": "assistant", "content": answer})
        self.turn += 1


def flatten(messages: Sequence[dict[str, str]]) -> str:
    """The messages as one text (for ``/v1/completions``): each on its own line."""
    return "\n".join(m["content"] for m in messages)


def message_tokens(messages: Sequence[dict[str, str]]) -> int:
    """The simulator's token estimate of ``messages`` (exact for the synthetic words)."""
    return estimate_message_tokens(messages)


# ---------------------------------------------------------------------------------- sources


class SyntheticSessions:
    """Generated sessions: session ``n`` is the same in every process (seeded by ``n``)."""

    def __init__(
        self, *, turns: str, input_len: str, output_len: str, seed: int = 0, name: str = "syn"
    ) -> None:
        self.turns: Distribution = parse_distribution(turns, what="session turns")
        self.input_len: Distribution = parse_distribution(input_len, what="turn input length")
        self.output_len: Distribution = parse_distribution(output_len, what="turn output length")
        self.seed, self.name = seed, name
        self.size: int | None = None  # endless

    def session(self, number: int) -> Session:
        rng = random.Random(f"{self.seed}:session:{number}")
        turns = []
        for t in range(max(self.turns.sample(rng), 1)):
            words = self.input_len.sample(rng)
            text = block_text(f"{self.seed}:session:{number}:turn:{t}", words)
            turns.append(Turn(text, "", self.output_len.sample(rng)))
        return Session(f"{self.name}-{number}", tuple(turns))


class ListedSessions:
    """Sessions read from a file; number ``n`` beyond the file's end is session ``n % size``
    run again under its own id (``name-n``)."""

    def __init__(self, sessions: list[Session], name: str) -> None:
        if not sessions:
            raise InputError(f"{name}: no conversation with a user turn in it")
        self.sessions, self.name = sessions, name
        self.size: int | None = len(sessions)

    def session(self, number: int) -> Session:
        base = self.sessions[number % len(self.sessions)]
        return Session(f"{self.name}-{number}", base.turns, base.system)


def _turns_from(pairs: list[tuple[str, str]], where: str) -> Session | None:
    """(role, text) pairs -> a Session of the user turns and the replies after each."""
    system, turns = "", list[Turn]()
    for i, (role, text) in enumerate(pairs):
        if role in _SYSTEM and not turns:
            system = text
        elif role in _HUMAN and text.strip():
            nxt = pairs[i + 1] if i + 1 < len(pairs) else None
            reply = nxt[1] if nxt is not None and nxt[0] in _ASSISTANT else ""
            cap = max(estimate_message_tokens([{"content": reply}]), 1) if reply else None
            turns.append(Turn(text, reply, cap))
    return Session(where, tuple(turns), system) if turns else None


def read_sharegpt_sessions(path: str | Path) -> list[Session]:
    """Every conversation of a ShareGPT JSON file with at least one user turn."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read ShareGPT JSON ({exc})") from None
    if not isinstance(data, list):
        raise InputError(f'{path}: expected a JSON list of {{"conversations": [...]}}')
    out = []
    for k, item in enumerate(data):
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list) or not all(
            isinstance(t, dict) and isinstance(t.get("value"), str) for t in turns
        ):
            raise InputError(
                f'{path}: item {k}: expected {{"conversations": [{{"from", "value"}}]}}'
            )
        pairs = [(str(t.get("from", "")).lower(), t["value"]) for t in turns]
        session = _turns_from(pairs, f"{k}")
        if session is not None:
            out.append(session)
    return out


def read_jsonl_sessions(path: str | Path) -> list[Session]:
    """Every ``{"messages": [{"role", "content"}, ...]}`` line of a JSONL file."""
    out = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc})") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise InputError(f"{path}:{n}: not JSON") from None
        messages = obj.get("messages") if isinstance(obj, dict) else None
        if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages
        ):
            raise InputError(f'{path}:{n}: expected {{"messages": [{{"role", "content"}}]}}')
        pairs = [(str(m.get("role", "")).lower(), m["content"]) for m in messages]
        session = _turns_from(pairs, f"{n}")
        if session is not None:
            out.append(session)
    return out


SessionSource = SyntheticSessions | ListedSessions


def load_sessions(
    spec: str,
    *,
    turns: str = "uniform:2,6",
    input_len: str = "fixed:128",
    output_len: str = "fixed:64",
    seed: int = 0,
) -> SessionSource:
    """``synthetic`` or a file path (``sharegpt:PATH`` / ``jsonl:PATH`` or sniffed by suffix)."""
    spec = spec.strip()
    if spec == "synthetic":
        return SyntheticSessions(turns=turns, input_len=input_len, output_len=output_len, seed=seed)
    fmt, _, rest = spec.partition(":")
    if fmt in ("sharegpt", "jsonl") and rest:
        path = rest
    else:
        path, fmt = spec, "jsonl" if spec.endswith(".jsonl") else "sharegpt"
    if not Path(path).is_file():
        raise InputError(
            f"sessions {spec!r}: no such file; expected synthetic or a ShareGPT JSON / "
            "JSONL conversations file"
        )
    name = re.sub(r"\W+", "_", Path(path).stem) or "sessions"
    read = read_jsonl_sessions if fmt == "jsonl" else read_sharegpt_sessions
    return ListedSessions(read(path), name)


class SessionBook:
    """Hands this process's session numbers (``index + k * count``) to its users in order."""

    def __init__(self, source: SessionSource) -> None:
        self.source = source
        self._next = 0

    def take(self, index: int, count: int) -> Session:
        number = index + self._next * count
        self._next += 1
        return self.source.session(number)


def answer_text(payloads: Sequence[bytes]) -> str:
    """The answer's text from the content chunks' payloads (or a whole response body):
    chat deltas, completion texts, chat messages, Responses API text deltas."""
    parts: list[str] = []
    for payload in payloads:
        try:
            obj: Any = json.loads(payload)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        if obj.get("type") == "response.output_text.delta" and isinstance(obj.get("delta"), str):
            parts.append(obj["delta"])
            continue
        for choice in obj.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            for holder in (choice.get("delta"), choice.get("message")):
                if isinstance(holder, dict) and isinstance(holder.get("content"), str):
                    parts.append(holder["content"])
            if isinstance(choice.get("text"), str):
                parts.append(choice["text"])
    return "".join(parts)
