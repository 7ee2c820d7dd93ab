"""The package's exception hierarchy: small on purpose, so callers know what to catch.

    LocustLLMError                 anything this package raises on purpose
     ├── InputError (ValueError)   bad input from a user: a flag, a file, a config, a run dir.
     │                             The message is one line naming the input and what was
     │                             expected; the CLI prints it and exits with code 2.
     └── RequestFailed             one request ended as a classified failure (``kind``, one of
                                   ``locust_llm.metrics.ERROR_KINDS``). Raised only inside the
                                   client while a request runs, and shown in Locust's failures
                                   table; it never leaves the user.

Failures of the server under test never crash a user: they become classified failure records.
"""

from __future__ import annotations


class LocustLLMError(Exception):
    """Base class of every error this package raises on purpose."""


class InputError(LocustLLMError, ValueError):
    """Bad user input; ``str(exc)`` is a one-line message naming the input and the expectation."""


class RequestFailed(LocustLLMError):
    """A request failed as ``kind``; ``str(exc)`` is ``"kind: message"`` (Locust's table)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
