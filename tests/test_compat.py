"""The flat import paths of earlier releases still import, as the module's new home, with a
DeprecationWarning naming it (locust_llm/_compat.py); the lazy root names resolve."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

from locust_llm import _compat

#: old paths whose new home imports neither Locust nor gevent (checked in this process)
PURE_OLD = [old for old, new in _compat.MOVED.items() if not new.startswith("locust_llm.client.")]


@pytest.mark.parametrize("old", PURE_OLD)
def test_an_old_module_path_is_the_new_module_with_a_warning(old: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {_compat.MOVED[old]}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(_compat.MOVED[old])


@pytest.mark.parametrize(
    ("package", "name"),
    [
        ("locust_llm.roofline", "ModelSpec"),
        ("locust_llm.telemetry", "TelemetryScraper"),
        ("locust_llm.rundir", "read_run_info"),
        ("locust_llm.options", "OPTIONS"),
    ],
)
def test_a_package_that_was_a_module_still_gives_its_names(package: str, name: str) -> None:
    new = _compat.PACKAGE_WAS[package]
    with pytest.warns(DeprecationWarning, match=f"{package}.{name} moved to {new}.{name}"):
        value = getattr(importlib.import_module(package), name)
    assert value is getattr(importlib.import_module(new), name)


def test_a_name_no_module_had_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        importlib.import_module("locust_llm.roofline").no_such_name  # noqa: B018


def test_the_locustfile_imports_of_earlier_releases_still_work() -> None:
    """In a child process (they import Locust): what docs of earlier releases told users."""
    code = (
        "import warnings; warnings.simplefilter('ignore', DeprecationWarning)\n"
        "from locust_llm.user import ChatUser\n"
        "from locust_llm.shapes import StagesShape\n"
        "from locust_llm.workloads.users import SessionUser\n"
        "from locust_llm.sweep_locustfile import Chat\n"
        "from locust_llm import ChatUser as Root, TraceReplayUser\n"
        "print(ChatUser.__module__, StagesShape.__module__, SessionUser.__module__,"
        " Chat.__module__, Root is ChatUser, TraceReplayUser.__module__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "locust_llm.client.user",
        "locust_llm.client.shapes",
        "locust_llm.client.workload_users",
        "locust_llm.client.user",
        "True",
        "locust_llm.client.workload_users",
    ]


def test_every_moved_module_exists() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for new in [*_compat.MOVED.values(), *_compat.PACKAGE_WAS.values()]:
            if not new.startswith("locust_llm.client."):
                importlib.import_module(new)
