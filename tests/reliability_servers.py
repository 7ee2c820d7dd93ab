"""Small loopback HTTP(S) servers that misbehave on purpose, for the reliability, hint and
base-URL tests.

``serving(handler_class, tls=None)`` runs a ThreadingHTTPServer on 127.0.0.1 port 0, optionally
in TLS with a certificate :func:`self_signed` makes with the openssl CLI, and yields its base
URL. Standard library only: nothing of ours is between the client and these answers.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class Quiet(BaseHTTPRequestHandler):
    """A handler that keeps the test output clean and answers /v1/models."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *_args: object) -> None:
        pass

    def reply(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.reply(200, "application/json", json.dumps({"data": [{"id": "m"}]}).encode())

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))


def answering(status: int, content_type: str, body: bytes) -> type[Quiet]:
    """A handler answering every POST with ``status``, ``content_type`` and ``body``."""

    class Fixed(Quiet):
        def do_POST(self) -> None:
            self.read_body()
            self.reply(status, content_type, body)

    return Fixed


def not_found(seen: list[str] | None = None) -> type[Quiet]:
    """A handler answering 404 to every GET (no /v1/models, no /metrics), listing each path
    asked in ``seen``."""

    class NotFound(Quiet):
        def do_GET(self) -> None:
            if seen is not None:
                seen.append(self.path)
            self.reply(404, "text/plain", b"")

    return NotFound


class EchoSecrets(Quiet):
    """Answers every POST 401 with a body that echoes every request header (a leaky proxy)."""

    def do_POST(self) -> None:
        self.read_body()
        echoed = "; ".join(f"{k}={v}" for k, v in self.headers.items())
        self.reply(401, "text/plain", f"unauthorized: you sent {echoed}".encode())


class Streaming(Quiet):
    """A correct tiny SSE stream: two tokens, usage, [DONE]."""

    def do_POST(self) -> None:
        self.read_body()
        chunks = [
            {"choices": [{"index": 0, "delta": {"content": "hi"}}]},
            {"choices": [{"index": 0, "delta": {"content": " there"}}]},
            {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
        ]
        body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
        self.reply(200, "text/event-stream", body + b"data: [DONE]\n\n")


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None
            ) -> Iterator[str]:  # fmt: skip
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    scheme = "https" if tls else "http"
    try:
        yield f"{scheme}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def self_signed(directory: Path, common_name: str = "127.0.0.1") -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 made by the ``openssl`` CLI: (cert, key)."""
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", f"/CN={common_name}",
         "-addext", f"subjectAltName=IP:{common_name}",
         "-keyout", str(key_path), "-out", str(cert_path)],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    return cert_path, key_path


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context
