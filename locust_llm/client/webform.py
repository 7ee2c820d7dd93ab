"""The LLM fields of Locust's web-UI start form: checked before Locust starts the test they set.

The options marked ``web_ui`` in :data:`locust_llm.options.table.OPTIONS` (model, max tokens,
input length, data set; the stage plan with a stage shape) are fields of Locust's start form
("Custom parameters"). Locust's ``/swarm`` (pinned: locust 2.47, ``web.py``) writes a submitted
field into ``environment.parsed_options`` under its name (``llm_max_tokens``), the master's
``test_start`` rereads them (``Runtime.configure``), and every spawn message carries the master's
parsed options to the workers, which reread theirs at their own ``test_start``: so each test the
form starts runs with its values, on the master and on every worker.

A value the command line would refuse must not reach a started test (a bad option at
``test_start`` ends the process): :func:`install` adds a ``before_request`` hook that, when a
new test is submitted, checks the Host field as ``--host`` is checked, applies the form's LLM
fields, runs the start checks and, on an
:class:`~locust_llm.errors.InputError`, puts the previous values back and answers as Locust's
``/swarm`` answers a bad field (``success: false`` and the message, which the form shows).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from locust_llm.errors import InputError
from locust_llm.options.table import web_ui_options
from locust_llm.options.validate import http_url

logger = logging.getLogger("locust_llm")

SWARM_ENDPOINT = "locust.swarm"  # Flask endpoint of Locust's /swarm
_RUNNING = ("spawning", "running")
#: the most a new test waits for the stage shape of the last one to end (its run dir written)
SHAPE_END_WAIT_S = 30.0


def form_values(form: Any) -> dict[str, str]:
    """The submitted LLM fields: parsed-options name -> value as typed."""
    return {o.dest: str(form[o.dest]) for o in web_ui_options() if o.dest in form}


def host_error(form: Any) -> InputError | None:
    """The form's Host field as ``--host`` checks it (each of a comma-separated list): a typo
    there (``127.0.0.1:8000``, no scheme) is answered in the form, not found at the test's start
    (where a bad option ends the process, and with it the web UI)."""
    hosts = str(form.get("host", "") or "")
    try:
        for host in hosts.split(","):
            if host.strip():
                http_url("the start form's Host", host)
    except InputError as exc:
        return exc
    return None


def apply_checked(
    namespace: Any, values: dict[str, str], check: Callable[[], None]
) -> InputError | None:
    """Set ``values`` on ``namespace`` and run ``check``; on an InputError put the previous values
    back (``check`` runs again on them) and return the error."""
    before = {name: getattr(namespace, name, None) for name in values}
    for name, value in values.items():
        setattr(namespace, name, value)
    try:
        check()
    except InputError as exc:
        for name, previous in before.items():
            setattr(namespace, name, previous)
        check()
        return exc
    return None


def await_shape_end(runner: Any) -> None:
    """A stage shape whose test has stopped but which is still ending it (writing its run dir):
    wait for it (bounded). Locust's start of a shape test does nothing while the last one's
    shape is still there ("There is an ongoing shape test running"), yet tells the form that it
    started: a Start pressed the moment the UI said STOPPED was lost."""
    shape = getattr(runner, "shape_greenlet", None)
    if shape is not None and getattr(runner, "state", "") not in ("init", *_RUNNING):
        shape.join(timeout=SHAPE_END_WAIT_S)


def install(environment: Any, check: Callable[[], None]) -> None:
    """Check the LLM fields of every new test submitted from ``environment``'s web UI with
    ``check`` (reread the options, then the start checks; raises InputError)."""
    from flask import jsonify, request

    app = environment.web_ui.app

    @app.before_request
    def _check_llm_fields() -> Any:
        if request.endpoint != SWARM_ENDPOINT or request.method != "POST":
            return None
        runner = environment.runner
        if runner is None or getattr(runner, "state", "") in _RUNNING:
            return None  # the form edits a running test's users: options apply at a start
        await_shape_end(runner)
        values = form_values(request.form)
        error = host_error(request.form)
        if error is None and values:
            error = apply_checked(environment.parsed_options, values, check)
        if error is None:
            return None
        logger.error("locust-llm: the web UI's start form: %s; the test was not started", error)
        return jsonify({"success": False, "message": f"locust-llm: {error}",
                        "host": environment.host})  # fmt: skip
