"""The API adapter contract and its registry (pure).

An adapter is a class with a ``name`` (what ``LLMUser.api`` says), the ``path`` it posts to, and
three methods:

- ``build_body(request)``: the JSON body of one request;
- ``classify(payload)``: one SSE ``data:`` payload -> ``(kind, chunk)`` with the kinds of
  :mod:`locust_llm.client.sse`; ``KIND_DONE`` is how an adapter says *this payload ends the stream*
  (chat: ``[DONE]``; an API without a marker returns it for its final event);
- ``parse_body(body)``: a whole non-streamed response -> one :class:`~locust_llm.client.sse.Chunk`
  (``ValueError`` when it is not the API's shape: the record becomes ``bad_payload``).

``classify`` is on the per-token hot path: keep it a plain function of bytes.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from locust_llm.client import sse
from locust_llm.client.sse import Chunk
from locust_llm.errors import InputError
from locust_llm.workloads.datasets import Prompt


@dataclass(frozen=True, slots=True, kw_only=True)
class BodyRequest:
    """What one request body is made from."""

    model: str
    prompt: Prompt
    max_tokens: int
    stream: bool = True
    max_tokens_field: str = "max_tokens"  # or max_completion_tokens
    temperature: float = 0.0
    ignore_eos: bool = False
    extra_body: Mapping[str, Any] = field(default_factory=dict)


class ApiAdapter:
    """Base of the adapters: subclass, set ``name`` and ``path``, implement the three methods."""

    name: ClassVar[str] = ""
    path: ClassVar[str] = ""
    #: False: the API answers with one JSON body (embeddings), read by ``parse_body``
    streams: ClassVar[bool] = True

    def build_body(self, request: BodyRequest) -> dict[str, Any]:
        raise NotImplementedError

    def classify(self, payload: bytes) -> tuple[int, Chunk | None]:
        raise NotImplementedError

    def parse_body(self, body: bytes) -> Chunk:
        raise NotImplementedError


class OpenAIChunksApi(ApiAdapter):
    """An API that streams OpenAI chunks (``choices[]``, ``usage``, ``[DONE]``): chat and
    completions. Classified by :func:`locust_llm.client.sse.parse_chunk`, the byte-scanning fast
    path
    (JSON is parsed only for chunks with usage, an error or a finish reason)."""

    classify = staticmethod(sse.parse_chunk)
    parse_body = staticmethod(sse.parse_response_body)


_REGISTRY: dict[str, type[ApiAdapter]] = {}
A = TypeVar("A", bound=type[ApiAdapter])


def register_api(cls: A) -> A:
    """Class decorator: make ``cls`` available as ``LLMUser.api = cls.name``."""
    if not cls.name or not cls.path.startswith("/"):
        raise TypeError(f"{cls.__name__}: an API adapter needs a name and a path starting '/'")
    _REGISTRY[cls.name] = cls
    return cls


def registered_apis() -> list[str]:
    """The names of the adapters registered so far (chat and completions always)."""
    _load_builtin()
    return sorted(_REGISTRY)


def get_api(name: str) -> ApiAdapter:
    """A fresh adapter for ``name``; an unknown name is an InputError listing the known ones."""
    _load_builtin()
    if name not in _REGISTRY and name.isidentifier():
        try:
            importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.{name}":
                raise
    cls = _REGISTRY.get(name)
    if cls is None:
        raise InputError(
            f"API {name!r} is not registered; registered: {', '.join(sorted(_REGISTRY))}"
        )
    return cls()


def _load_builtin() -> None:
    importlib.import_module(f"{__package__}.chat")
    importlib.import_module(f"{__package__}.completions")


def common_fields(body: dict[str, Any], request: BodyRequest) -> dict[str, Any]:
    """The OpenAI fields chat and completions share: streaming, output cap, sampling, extras."""
    body["stream"] = request.stream
    if request.stream:
        body["stream_options"] = {"include_usage": True}
    body[request.max_tokens_field] = request.max_tokens
    body["temperature"] = request.temperature
    if request.ignore_eos:
        body["ignore_eos"] = True
    body.update(request.extra_body)
    return body
