"""The spellings a leaked secret may take, spelled here independently of the redactor's list:
raw, JSON-escaped (``ensure_ascii`` both ways), URL-encoded (``quote``, ``quote_plus``), and as
Python quotes a str and bytes (Locust's failures table holds ``repr`` of an exception)."""

from __future__ import annotations

import json
from urllib.parse import quote, quote_plus


def forms(key: str) -> set[str]:
    return {
        key,
        json.dumps(key)[1:-1],
        json.dumps(key, ensure_ascii=False)[1:-1],
        quote(key, safe=""),
        quote(key),
        quote_plus(key),
        repr(key + '"')[1:-2],
        repr(key.encode() + b'"')[2:-2],
    }


def assert_no_form(text: str, key: str, where: str = "") -> None:
    for form in forms(key):
        assert form not in text, f"{form!r} in {where or text!r}"


def assert_no_tail(text: str, key: str) -> None:
    """``text`` ends with no beginning of any form of ``key`` (what a cut leaves)."""
    for form in forms(key):
        for k in range(1, len(form)):
            assert not text.endswith(form[:k]), (form[:k], text)
