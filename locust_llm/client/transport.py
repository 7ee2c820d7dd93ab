"""The HTTP connections one user keeps: one keep-alive geventhttpclient client per server.

geventhttpclient is the library under Locust's ``FastHttpUser``; it is used directly so nothing
fires a Locust event on our behalf. :meth:`Transport.post` maps every failure to send the
request or read its head to a :class:`~locust_llm.errors.RequestFailed` with its error kind.
This is the seam where connection policy lives (reconnects, a kernel-timestamp transport).

Connection policy: a response that says ``Connection: close`` (or that was not read to its end)
closes its connection; otherwise the connection is kept for the user's next request. Some
servers (llama.cpp's ``llama-server``) close it anyway after each response, without saying so:
when a kept connection turns out closed before a single byte of the response arrived, the
server never processed the request, so it is sent once more on a fresh connection and the
reconnect is counted. A request is never sent again once any byte of its response arrived.
"""

from __future__ import annotations

import errno
import ssl
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from geventhttpclient import HTTPClient
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError, HTTPSocketResponse

from locust_llm.client.ghc_response import GhcResponse
from locust_llm.errors import RequestFailed

#: What a broken read raises (mapped by :func:`locust_llm.client.stream.read_failure`).
READ_ERRORS = (OSError, HTTPConnectionClosed, HTTPParseError)


class Transport:
    """Keep-alive connections to each base URL, opened on first use, dropped after a failure."""

    def __init__(
        self,
        *,
        connect_timeout_s: float,
        read_timeout_s: float,
        insecure: bool,
        ca_bundle: str = "",
        on_reconnect: Callable[[], None] | None = None,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.insecure = insecure
        self.ca_bundle = ca_bundle
        self.on_reconnect = on_reconnect  # called once per resend on a fresh connection
        self._clients: dict[str, HTTPClient] = {}
        self._kept: set[str] = set()  # base URLs whose connection a response left open

    def _client(self, base_url: str) -> HTTPClient:
        client = self._clients.get(base_url)
        if client is None:
            parts = urlsplit(base_url)
            client = HTTPClient(
                parts.hostname or "127.0.0.1",
                parts.port,
                ssl=parts.scheme == "https",
                connection_timeout=self.connect_timeout_s,
                network_timeout=self.read_timeout_s,
                concurrency=1,
                insecure=self.insecure,
                ssl_context_factory=tls_context_factory(self.insecure, self.ca_bundle),
            )
            self._clients[base_url] = client
        return client

    def post(
        self,
        base_url: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        before_send: Callable[[], None] | None = None,
        after_send: Callable[[float], None] | None = None,
    ) -> Any:
        """Send a POST and return the response once its head is in (the body is not read).

        ``before_send`` runs just before each attempt (the caller's start stamp);
        ``after_send(perf_counter())`` as an attempt's final send returns, where the client
        can say (:mod:`locust_llm.client.http11`; geventhttpclient cannot: never called).
        """
        reused = base_url in self._kept
        self._kept.discard(base_url)
        if before_send is not None:
            before_send()
        try:
            return self._send(base_url, path, body, headers, after_send)
        except HTTPConnectionClosed:  # closed before any byte of the response
            if not reused:
                raise RequestFailed("connect", "HTTPConnectionClosed: connection closed.") from None
        # a kept connection the server had closed: it never saw this request
        self.drop(base_url)
        if self.on_reconnect is not None:
            self.on_reconnect()
        if before_send is not None:
            before_send()
        try:
            return self._send(base_url, path, body, headers, after_send)
        except HTTPConnectionClosed as exc:
            raise RequestFailed("connect", f"HTTPConnectionClosed: {exc}") from None

    def preconnect(self, base_url: str) -> bool:
        """Open the connection to ``base_url`` now, off any request's timed path, where the
        client can (our HTTP/1.1 client; geventhttpclient connects on first use: False). It
        counts as kept: a server that closes it before the first request gets that request
        once more on a fresh connection, as after any kept connection. Connect errors
        propagate (OSError)."""
        client: Any = self._client(base_url)
        if not hasattr(client, "connect"):
            return False
        opened = bool(client.connect())
        self._kept.add(base_url)
        return opened

    def release(self, base_url: str, resp: Any) -> None:
        """Done with ``resp``: its connection is kept for the next request unless the response
        said ``Connection: close`` or was not read to its end (then it is closed)."""
        kept = not resp.should_close()
        resp.release()
        if kept and base_url in self._clients:
            self._kept.add(base_url)

    def _send(
        self,
        base_url: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        after_send: Callable[[float], None] | None = None,
    ) -> Any:
        """One attempt; failures other than a connection closed before any byte are mapped."""
        client: Any = self._client(base_url)
        try:
            if after_send is not None and getattr(client, "stamps_sends", False):
                resp = client.request("POST", path, body=body, headers=headers, on_sent=after_send)
            else:
                resp = client.request("POST", path, body=body, headers=headers)
        except HTTPConnectionClosed:
            raise
        except (OSError, HTTPParseError) as exc:
            raise send_failure(exc) from None
        # geventhttpclient's own readline has no bound: its lines are read by GhcResponse
        return GhcResponse(resp) if isinstance(resp, HTTPSocketResponse) else resp

    def get(
        self, base_url: str, path: str, headers: dict[str, str], max_bytes: int = 64 << 20
    ) -> tuple[int, bytes]:
        """A GET whose whole body is read (model discovery), at most ``max_bytes`` of it (a
        larger body is HTTPParseError); OSError etc. propagate."""
        resp = self._client(base_url).get(path, headers=headers)
        try:
            body = resp.read(max_bytes + 1)
            if len(body) > max_bytes:
                raise HTTPParseError(f"body over {max_bytes} bytes")
            return resp.status_code, body
        finally:
            resp.release()

    def drop(self, base_url: str) -> None:
        """Close the connection to ``base_url`` (the next request opens a fresh one)."""
        client = self._clients.pop(base_url, None)
        self._kept.discard(base_url)
        if client is not None:
            client.close()

    def close(self) -> None:
        for base_url in list(self._clients):
            self.drop(base_url)


def send_failure(exc: OSError | HTTPParseError) -> RequestFailed:
    """The failure a request's send (connect, write, response head) ended with, by kind:
    ``connect`` (refused, reset, TLS verification, any other socket error), ``timeout``,
    ``bad_payload`` (a garbled or cut response head)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return RequestFailed(
            "connect", f"TLS: {exc.verify_message} (--llm-ca-bundle or --llm-insecure)"
        )
    if isinstance(exc, (ConnectionRefusedError, ConnectionResetError)):
        return RequestFailed("connect", f"{type(exc).__name__}: {exc}")
    if isinstance(exc, HTTPParseError):
        return RequestFailed("bad_payload", f"bad response head: {exc}")
    if isinstance(exc, TimeoutError):
        return RequestFailed("timeout", f"no response: {exc}")
    kind = "timeout" if exc.errno == errno.ETIMEDOUT else "connect"
    return RequestFailed(kind, f"{type(exc).__name__}: {exc}")


def tls_context_factory(insecure: bool, ca_bundle: str = "") -> Callable[..., ssl.SSLContext]:
    """How https connections verify the server. geventhttpclient's own ``insecure`` only drops
    the hostname check, so ``--llm-insecure`` is a context that verifies nothing; a CA bundle
    (``--llm-ca-bundle``, a private CA) replaces the default trust store."""

    def factory(**_kw: Any) -> ssl.SSLContext:
        if insecure:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        if ca_bundle:
            return ssl.create_default_context(cafile=ca_bundle)
        return ssl.create_default_context(cafile=_kw.get("cafile"))

    return factory
