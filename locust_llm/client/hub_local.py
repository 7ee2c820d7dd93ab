"""One object per gevent hub (per OS thread), and the OS's own epoll under gevent's patching.

The ready reader and the first-bytes sweep each keep one epoll set per worker hub. gevent's
monkey-patching makes ``threading.local`` per greenlet and takes ``select.epoll`` away, so both
come from the originals here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import gevent
from gevent.monkey import get_original

#: the OS's epoll (None off Linux)
os_epoll: Any = get_original("select", "epoll") if sys.platform.startswith("linux") else None
#: the OS thread's id
_thread_id: Any = get_original("_thread", "get_ident")

_T = TypeVar("_T")


def for_this_hub(
    registry: dict[int, _T], make: Callable[[Any], _T], idle: Callable[[_T], bool]
) -> _T:
    """This thread's object in ``registry``, made with ``make(hub)`` when there is none or the
    thread has a new hub (the old one closed first if ``idle`` says nothing uses it)."""
    thread = _thread_id()
    current = registry.get(thread)
    hub = gevent.get_hub()
    if current is None or current.hub is not hub:  # type: ignore[attr-defined]
        if current is not None and idle(current):
            current.close()  # type: ignore[attr-defined]
        current = registry[thread] = make(hub)
    return current
