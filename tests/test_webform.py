"""The web UI's start form: its LLM fields applied to the options, refused ones put back
(``locust_llm.client.webform``, without Locust; tests/test_webui_restart.py drives the form)."""

from __future__ import annotations

from argparse import Namespace
from types import SimpleNamespace

from locust_llm.client.webform import (
    SHAPE_END_WAIT_S,
    apply_checked,
    await_shape_end,
    form_values,
    host_error,
)
from locust_llm.errors import InputError
from locust_llm.options import config, table


def test_only_the_start_forms_llm_fields_are_read() -> None:
    form = {"user_count": "4", "llm_max_tokens": "8", "llm_api_key": "sk-x", "llm_model": "m"}
    assert form_values(form) == {"llm_max_tokens": "8", "llm_model": "m"}


def test_a_field_the_command_line_would_refuse_is_put_back() -> None:
    namespace = table.defaults()
    namespace.llm_max_tokens = "32"
    checked: list[str] = []

    def check() -> None:  # the start checks: the options read and checked from the namespace
        checked.append(namespace.llm_max_tokens)
        config.from_namespace(namespace)

    error = apply_checked(namespace, {"llm_max_tokens": "abc", "llm_model": "m"}, check)
    assert isinstance(error, InputError) and "--llm-max-tokens" in str(error)
    assert (namespace.llm_max_tokens, namespace.llm_model) == ("32", "")
    assert checked == ["abc", "32"]  # checked again on the values put back
    assert apply_checked(namespace, {"llm_max_tokens": "8"}, check) is None
    assert namespace.llm_max_tokens == "8"


def test_a_refused_value_the_namespace_lacked_is_unset_again() -> None:
    namespace = Namespace()

    def check() -> None:
        if namespace.llm_model == "bad":
            raise InputError("--llm-model: bad")

    assert apply_checked(namespace, {"llm_model": "bad"}, check) is not None
    assert getattr(namespace, "llm_model", None) is None


class _Shape:
    def __init__(self) -> None:
        self.joined: list[float] = []

    def join(self, timeout: float) -> None:
        self.joined.append(timeout)


def test_a_start_waits_for_the_last_tests_shape_to_end_not_for_a_running_one() -> None:
    """Locust ignores a shape test's start while the last one's shape still ends its test (and
    tells the form it started): the start waits for it, bounded; a running shape is left."""
    for state, waits in (
        ("stopped", True),
        ("stopping", True),
        ("init", False),
        ("running", False),
    ):
        shape = _Shape()
        await_shape_end(SimpleNamespace(state=state, shape_greenlet=shape))
        assert shape.joined == ([SHAPE_END_WAIT_S] if waits else []), state
    await_shape_end(SimpleNamespace(state="stopped", shape_greenlet=None))


def test_the_forms_host_is_checked_as_host_is() -> None:
    error = host_error({"host": "127.0.0.1:8000"})
    assert isinstance(error, InputError)
    assert str(error) == (
        "the start form's Host '127.0.0.1:8000': no scheme; write http://127.0.0.1:8000 "
        "(or https://127.0.0.1:8000 for TLS)"
    )
    assert host_error({"host": "http://a:1/v1, ftp://b"}) is not None  # each of a list
    assert host_error({"host": "http://a:1/v1, https://b"}) is None
    assert host_error({"user_count": "2"}) is None and host_error({"host": ""}) is None
