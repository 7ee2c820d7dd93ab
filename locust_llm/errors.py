"""The package's exception hierarchy: small on purpose, so callers know what to catch.

    LocustLLMError                 anything this package raises on purpose
     └── InputError (ValueError)   bad input from a user: a flag, a file, a config, a run dir.
                                   The message is one line naming the input and what was
                                   expected; the CLI prints it and exits with code 2.

Failures of the server under test are never exceptions: they become classified failure
records (see ``locust_llm.metrics.ERROR_KINDS``).
"""

from __future__ import annotations


class LocustLLMError(Exception):
    """Base class of every error this package raises on purpose."""


class InputError(LocustLLMError, ValueError):
    """Bad user input; ``str(exc)`` is a one-line message naming the input and the expectation."""
