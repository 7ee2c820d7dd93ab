"""The kernel-receive-timestamp transport: each token timed by when its bytes reached the host.

On Linux the kernel stamps every arriving TCP segment when ``SO_TIMESTAMPNS`` is set on the
socket; ``recvmsg`` hands back, as ancillary data, the stamp of the latest segment the read
consumed (segments that queued up while the reader was busy are merged by the kernel and keep
the latest stamp). :class:`StampedConnection` reads that way and converts the stamp
(``CLOCK_REALTIME``) to the ``perf_counter`` clock the records use, from the two clocks read
side by side right after the read: ``arrival = perf_counter() - (time_ns() - stamp)``. A line
is stamped with the read that completed it, so a token's time no longer includes how long the
worker took to get to it; the user-space time is kept beside it as the client delay.

:class:`KernelTransport` is :class:`~locust_llm.client.transport.Transport` with its own
HTTP/1.1 reader (:mod:`locust_llm.client.http11`) for ``http://`` servers; ``https://`` servers
stay on geventhttpclient (TLS records are decrypted in user space, after the kernel stamp, and
Python's ``SSLSocket`` has no ``recvmsg``), as does everything off Linux.
:func:`select_transport` maps ``--llm-transport`` (``auto``, ``kernel``, ``ghc``) to a class.
"""

from __future__ import annotations

import functools
import math
import os
import socket
import struct
import sys
import time
from time import perf_counter
from typing import Any
from urllib.parse import urlsplit

from locust_llm.client.http11 import RECV_BYTES, Http11Client, Http11Connection
from locust_llm.client.transport import Transport
from locust_llm.errors import InputError

#: Linux's ``SO_TIMESTAMPNS`` (= ``SCM_TIMESTAMPNS``); Python's socket module does not name it.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("@qq")  # struct timespec: two 64-bit longs
_TIMESPEC_BYTES = _TIMESPEC.size
_ANC_BYTES = socket.CMSG_SPACE(_TIMESPEC_BYTES) if hasattr(socket, "CMSG_SPACE") else 0

#: The ``--llm-transport`` choices.
TRANSPORT_CHOICES = ("auto", "kernel", "ghc")


class StampedConnection(Http11Connection):
    """A connection whose reads carry the kernel's receive stamp (``arrival_s``)."""

    def __init__(self, sock: Any) -> None:
        super().__init__(sock)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.user_s = math.nan  # perf_counter when the latest read returned
        self.unstamped_reads = 0  # reads that came back without a stamp

    def _recv(self) -> bytes:
        data, ancdata, _flags, _addr = self.sock.recvmsg(RECV_BYTES, _ANC_BYTES)
        now_ns = time.time_ns()
        now = perf_counter()
        self.user_s = now
        for level, kind, cdata in ancdata:
            stamp = level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS
            if stamp and len(cdata) >= _TIMESPEC_BYTES:
                sec, nsec = _TIMESPEC.unpack_from(cdata)
                self.arrival_s = now - (now_ns - (sec * 1_000_000_000 + nsec)) * 1e-9
                return data
        self.unstamped_reads += 1
        self.arrival_s = now
        return data


class StampedClient(Http11Client):
    """:class:`Http11Client` over :class:`StampedConnection`."""

    connection_class = StampedConnection


class KernelTransport(Transport):
    """:class:`Transport` with kernel receive stamps on ``http://`` servers."""

    #: the responses of this transport carry ``arrival_s`` (kernel stamp) per line read
    stamped = True

    def _client(self, base_url: str) -> Any:
        parts = urlsplit(base_url)
        if parts.scheme == "https":
            return super()._client(base_url)  # geventhttpclient: no stamp through TLS
        client: Any = self._clients.get(base_url)
        if client is None:
            client = StampedClient(
                parts.hostname or "127.0.0.1",
                parts.port or 80,
                connection_timeout=self.connect_timeout_s,
                network_timeout=self.read_timeout_s,
            )
            self._clients[base_url] = client  # type: ignore[assignment]
        return client


@functools.cache
def kernel_stamps_available() -> bool:
    """True when this system stamps received TCP segments for ``recvmsg`` (Linux)."""
    if not sys.platform.startswith("linux") or not hasattr(socket.socket, "recvmsg"):
        return False
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            return bool(probe.getsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS))
    except OSError:
        return False


def select_transport(name: str) -> type[Transport]:
    """The transport class of ``--llm-transport`` ``name``: ``kernel`` where the kernel
    stamps reads (``auto``: else geventhttpclient), ``ghc`` geventhttpclient."""
    name = (name or "auto").lower()
    if name == "auto":  # in-process users (no Locust parser) still honour the env variable
        name = os.environ.get("LOCUST_LLM_TRANSPORT", "auto").lower() or "auto"
    if name not in TRANSPORT_CHOICES:
        raise InputError(
            f"--llm-transport {name!r}: expected one of {', '.join(TRANSPORT_CHOICES)}",
        )
    if name == "ghc":
        return Transport
    if kernel_stamps_available():
        return KernelTransport
    if name == "kernel":
        raise InputError("--llm-transport kernel: this system has no kernel receive stamps")
    return Transport
