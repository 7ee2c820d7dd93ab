"""UserSettings: one user class's attributes resolved against the ``--llm-*`` options (pure).

``LLMUser`` declares ``model``, ``api``, ``dataset``, ``max_tokens``, ``input_len`` and the
timeouts as class attributes; ``None`` (the default) means "the ``--llm-*`` option". So two user
classes in one locustfile can target different models, APIs or data sets. The host follows
Locust's rule: ``--host`` (Locust sets it on every user class) wins over the class's ``host``;
``--llm-hosts`` spreads requests over several servers and wins over both.
"""

from __future__ import annotations

from dataclasses import dataclass

from locust_llm.client.config import ClientOptions
from locust_llm.client.readers import split_hosts


@dataclass(frozen=True, slots=True, kw_only=True)
class UserSettings:
    """What one user class sends: where, which model and API, which prompts, how long."""

    hosts: tuple[str, ...]
    model: str  # "" = the first id the server lists at /v1/models
    api: str
    dataset: str
    max_tokens: str  # a number or distribution; "" = the data set's hint, else 256
    input_len: str
    connect_timeout_s: float
    read_timeout_s: float
    total_timeout_s: float


def _pick(value: object, default: str) -> str:
    return default if value is None else str(value)


def _seconds(value: float | None, default: float) -> float:
    return default if value is None else float(value)


def resolve_settings(
    options: ClientOptions,
    *,
    host: str | None,
    model: str | None = None,
    api: str = "chat",
    dataset: str | None = None,
    max_tokens: int | str | None = None,
    input_len: int | str | None = None,
    connect_timeout_s: float | None = None,
    read_timeout_s: float | None = None,
    total_timeout_s: float | None = None,
) -> UserSettings:
    """The settings of a user class whose attributes are the keyword arguments."""
    hosts = options.hosts or split_hosts(host or "")
    return UserSettings(
        hosts=hosts,
        model=_pick(model, options.model),
        api=api,
        dataset=_pick(dataset, options.dataset),
        max_tokens=_pick(max_tokens, options.max_tokens),
        input_len=_pick(input_len, options.input_len),
        connect_timeout_s=_seconds(connect_timeout_s, options.connect_timeout_s),
        read_timeout_s=_seconds(read_timeout_s, options.read_timeout_s),
        total_timeout_s=_seconds(total_timeout_s, options.total_timeout_s),
    )
