"""A small named registry: the one shape behind every "add one piece" extension point.

GPU sources (:mod:`locust_llm.gpu.registry`), canonical signals
(:mod:`locust_llm.telemetry.signals`) and
server vocabularies (:mod:`locust_llm.telemetry.vocabularies`) each keep their entries in one
:class:`Registry`: names registered once, kept in registration order, and a lookup error that
lists what is registered.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Entries of one ``kind`` (``"GPU source"``, ``"signal"`` ...) by name."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str, entry: T) -> T:
        """Add ``entry`` as ``name`` (a name is registered once); returns it."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> bool:
        """Remove ``name`` (tests that register their own); True when it was there."""
        return self._entries.pop(name, None) is not None

    def get(self, name: str) -> T:
        """The entry registered as ``name``; a KeyError that lists the registered names."""
        try:
            return self._entries[name]
        except KeyError:
            raise KeyError(self.unknown(name)) from None

    def unknown(self, name: str) -> str:
        """The one-line message for a name that is not registered."""
        return f"no {self.kind} {name!r}; registered: {', '.join(self._entries)}"

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._entries.values()))

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)
