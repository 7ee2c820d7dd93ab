"""The client's wiring: no import circle through the lifecycle, the shapes and the user classes
(every import statement read, function-level ones too), and the seams that replaced them: the
lifecycle finds LLM users through the base class the user module installs, a shape checks its
own options, ``TraceShape`` finds its replay user by what the class offers."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import locust_llm

PACKAGE = Path(locust_llm.__file__).parent

#: the modules that imported each other (issue 25); none may import itself back, at any depth
WIRED = (
    "locust_llm.client.lifecycle",
    "locust_llm.client.shapes",
    "locust_llm.client.user",
    "locust_llm.client.workload_users",
)


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["locust_llm", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, from every import statement in it
    (module level, inside functions, under TYPE_CHECKING)."""
    modules = _modules()

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps.update(filter(None, (resolve(a.name) for a in node.names)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    target = full if full in modules else resolve(base)
                    if target:
                        deps.add(target)
        deps.discard(name)
        graph[name] = deps
    return graph


def path_back(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """An import path from ``start`` back to itself, or None."""
    seen: set[str] = set()
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    while stack:
        node, path = stack.pop()
        for dep in sorted(graph.get(node, ())):
            if dep == start:
                return [*path, dep]
            if dep not in seen:
                seen.add(dep)
                stack.append((dep, [*path, dep]))
    return None


def test_the_graph_sees_function_level_and_relative_imports() -> None:
    graph = import_graph()
    assert "locust_llm.client.runtime" in graph["locust_llm.client.lifecycle"]
    assert "locust_llm.workloads.datasets" in graph["locust_llm.client.runtime"]  # in a function
    assert path_back({"a": {"b"}, "b": {"c"}, "c": {"a"}}, "a") == ["a", "b", "c", "a"]
    assert path_back({"a": {"b"}, "b": {"c"}, "c": set()}, "a") is None


def test_no_import_circle_through_the_lifecycle_shapes_and_users() -> None:
    graph = import_graph()
    circles = {m: path_back(graph, m) for m in WIRED}
    assert not any(circles.values()), circles
    lifecycle = graph["locust_llm.client.lifecycle"]
    assert not lifecycle & {"locust_llm.client.user", "locust_llm.client.shapes"}


_PROBE = r"""
import json
from locust import User
from locust_llm.client import lifecycle
from locust_llm.client.shapes import ReplaySource, StagesShape, TraceShape
from locust_llm.options.config import ClientOptions
from locust_llm.client.user import Chat, ChatUser, LLMUser
from locust_llm.errors import InputError
from locust_llm.client.workload_users import SessionUser, TraceReplayUser

class Env:
    user_classes = [Chat, User, SessionUser, "not a class"]

class Plain(User):
    pass

try:
    StagesShape().check_options(ClientOptions(concurrency="1,x", stage_requests="5"))
    bad = ""
except InputError as exc:
    bad = str(exc)
StagesShape().check_options(ClientOptions(concurrency="1,2", stage_requests="5"))
print(json.dumps({
    "users": [c.__name__ for c in lifecycle.llm_user_classes(Env)],
    "shapes_check": [isinstance(s(), lifecycle.ChecksOptions) for s in (StagesShape, TraceShape)],
    "plain_checks": isinstance(object(), lifecycle.ChecksOptions),
    "bad_plan": bad,
    "replay": [issubclass(c, ReplaySource) for c in (TraceReplayUser, ChatUser, Plain)],
}))
"""


def test_the_seams_find_llm_users_shape_checks_and_the_replay_user() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["users"] == ["Chat", "SessionUser"]  # LLMUser subclasses, nothing else
    assert found["shapes_check"] == [True, True] and found["plain_checks"] is False
    assert found["bad_plan"] == "--llm-concurrency '1,x': expected comma-separated numbers"
    assert found["replay"] == [True, False, False]
