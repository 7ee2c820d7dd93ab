"""UserSettings: one user class's attributes resolved against the ``--llm-*`` options (pure).

``LLMUser`` declares a class attribute for each option the spec marks ``class_attribute``
(``model``, ``dataset``, ``max_tokens``, ``input_len`` and the timeouts, named as the
``ClientOptions`` field) and ``api``; ``None`` (the default) means "the ``--llm-*`` option". So
two user classes in one locustfile can target different models, APIs or data sets. The host
follows Locust's rule: ``--host`` (Locust sets it on every user class) wins over the class's
``host``; ``--llm-hosts`` spreads requests over several servers and wins over both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from locust_llm.options.config import ClientOptions
from locust_llm.options.readers import split_hosts
from locust_llm.options.table import OPTIONS

#: the ClientOptions fields a user class attribute of the same name overrides
CLASS_ATTRIBUTES: tuple[str, ...] = tuple(o.field_name for o in OPTIONS if o.class_attribute)


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


def resolve_settings(
    options: ClientOptions,
    *,
    host: str | None,
    api: str = "chat",
    **attributes: object,
) -> UserSettings:
    """The settings of a user class: ``attributes`` are its :data:`CLASS_ATTRIBUTES` (None or
    left out: the option), each read as the option's field is (a length as a string, a time as
    seconds)."""
    unknown = set(attributes) - set(CLASS_ATTRIBUTES)
    if unknown:
        raise TypeError(f"not a user class setting: {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for name in CLASS_ATTRIBUTES:
        option_value = getattr(options, name)
        value = attributes.get(name)
        values[name] = option_value if value is None else type(option_value)(value)
    return UserSettings(hosts=options.hosts or split_hosts(host or ""), api=api, **values)
