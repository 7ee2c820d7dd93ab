"""The workloads family imports downward only: no module imports one that imports it back."""

from __future__ import annotations

import ast
from pathlib import Path

import locust_llm.workloads

FAMILY = "locust_llm.workloads"
ROOT = Path(locust_llm.workloads.__file__).parent


def _imports(path: Path) -> set[str]:
    """The workloads modules ``path`` imports, at any depth (function-level ones too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n for n in names if n.startswith(FAMILY + ".") and _module_file(n)}
    return found


def _module_file(name: str) -> Path | None:
    path = ROOT / (name.removeprefix(FAMILY + ".").replace(".", "/") + ".py")
    return path if path.is_file() else None


def _graph() -> dict[str, set[str]]:
    return {
        f"{FAMILY}.{path.stem}": _imports(path)
        for path in ROOT.glob("*.py")
        if path.stem != "__init__"
    }


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` as the modules along it, or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_workloads_modules_import_no_circle() -> None:
    graph = _graph()
    assert f"{FAMILY}.datasets" in graph and f"{FAMILY}.texts" in graph
    assert _cycle(graph) == []


def test_prompt_builders_sit_above_texts() -> None:
    graph = _graph()
    lowest = {f"{FAMILY}.{m}" for m in ("texts", "prompt", "tokenizer", "distributions")}
    for module in lowest:  # the shared pieces import no prompt builder
        assert not graph[module] & {f"{FAMILY}.{m}" for m in ("datasets", "shared_prefix")}
    assert f"{FAMILY}.shared_prefix" in graph[f"{FAMILY}.datasets"]
    assert f"{FAMILY}.datasets" not in graph[f"{FAMILY}.shared_prefix"]
