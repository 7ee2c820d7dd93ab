"""Variant ``ours-counted``: ``ours`` (the shipped user) plus a count of the reads it made.

For ``bench/kernel_timestamps.py``, which normalises CPU per read as well as per token: a worker
that falls behind reads several tokens per read and spends less per token, so tokens per read
tells a starved reader apart. The kernel transport counts its own reads
(``StampedConnection.reads``, ``late_sweeps``: part of the shipped code); under
geventhttpclient (``LOCUST_LLM_TRANSPORT=ghc``) a wrapper counts gevent's socket ``recv`` calls
(one Python call per read more, about 0.1 us). At exit the counts go to
``CHOICE_OUT + ".reads.json"``.

``KTS_STAMPED_FROM`` (a path to another revision's ``kernel_transport.py``): the kernel transport
reads with that revision's ``StampedConnection`` instead, its reads counted by a wrapper around
its ``_recv`` (the before/after of a change in one bench run).
"""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Any

import gevent.socket
from locust import events

from bench.client_variants.ours import Chat, Stages
from locust_llm.client.kernel_transport import StampedClient, StampedConnection

__all__ = ["Chat", "Stages"]

_connections: list[StampedConnection] = []
_socket_reads = [0]


def _count_stamped_connections() -> None:
    made = StampedConnection.__init__

    def register(self: StampedConnection, sock: Any) -> None:
        made(self, sock)
        _connections.append(self)

    StampedConnection.__init__ = register  # type: ignore[method-assign]


def _count_socket_reads() -> None:
    recv = gevent.socket.socket.recv

    def counted(self: Any, *args: Any) -> bytes:
        _socket_reads[0] += 1
        return recv(self, *args)

    gevent.socket.socket.recv = counted  # type: ignore[method-assign]


def _read_with_revision(path: str) -> None:
    spec = importlib.util.spec_from_file_location("stamped_revision", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    revision = module.StampedConnection
    recv = revision._recv

    def counted(self: Any) -> bytes:
        _socket_reads[0] += 1
        return recv(self)

    revision._recv = counted
    StampedClient.connection_class = revision


if os.environ.get("LOCUST_LLM_TRANSPORT") == "ghc":
    _count_socket_reads()
elif os.environ.get("KTS_STAMPED_FROM"):
    _read_with_revision(os.environ["KTS_STAMPED_FROM"])
else:
    _count_stamped_connections()


@events.quitting.add_listener
def _write_counts(**_kw: Any) -> None:
    out = os.environ.get("CHOICE_OUT", "")
    if not out:
        return
    counts = {
        "reads": _socket_reads[0] + sum(c.reads for c in _connections),
        "late_sweeps": sum(c.late_sweeps for c in _connections) if _connections else None,
        "unstamped_reads": sum(c.unstamped_reads for c in _connections),
    }
    with open(out + ".reads.json", "w", encoding="utf-8") as f:
        json.dump(counts, f)
