"""The cause vocabulary is declared once and everything else is keyed by it: the verdict, the
simulator's ground-truth labels and the actions."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from locust_llm.report.diagnosis import causes
from locust_llm.report.diagnosis.actions import CAUSE_ACTIONS, KIND_ACTIONS
from locust_llm.report.diagnosis.causes import (
    CAUSE_KINDS,
    CAUSES,
    KIND_TABLE,
    KINDS,
    STEP_CAUSES,
    source_name,
)
from locust_llm.report.diagnosis.verdict import Verdict
from locust_llm.sim import labels

PACKAGE = Path(__file__).resolve().parent.parent / "locust_llm"


def _imports(path: Path) -> set[str]:
    """The modules a file imports (absolute names, at any depth of the file)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_every_cause_names_a_declared_kind_and_a_known_gate() -> None:
    assert set(CAUSE_KINDS.values()) <= set(KINDS)
    assert {c.gate for c in CAUSES.values()} == {"admission", "load", "step"}
    assert STEP_CAUSES == (
        "prefill_interference",
        "compute_bound_prefill",
        "compute_bound_decode",
        "bandwidth_bound_decode",
        "host_overhead",
    )
    for table in (CAUSES, KIND_TABLE):
        assert all(name == entry.name for name, entry in table.items())
    assert all(c.resource and c.mechanism and c.meaning and c.source_name for c in CAUSES.values())
    assert all(k.meaning for k in KIND_TABLE.values())


def test_the_source_name_is_the_causes_else_the_kinds() -> None:
    assert source_name("overloaded", "kv_capacity_admission") == "OOM / memory"
    assert source_name("memory_oom") == "OOM / memory"
    assert source_name("low_concurrency") == "low concurrency"
    assert source_name("errors") == "" and source_name("no_such_kind") == ""
    v = Verdict("overloaded", (), (), cause="batch_limit_admission")
    assert v.headline == "overloaded: batch slots"
    assert v.source_name == "low concurrency (batch limit)"


def test_the_simulators_labels_are_the_causes() -> None:
    assert tuple(CAUSES) == labels.LABELS
    assert labels.VERDICT_KINDS == CAUSE_KINDS
    # the label rules of sim/labels.py's docstring name every label, in the causes' order
    doc = labels.__doc__ or ""
    ruled = re.findall(r"^\d+\. ``(\w+)``", doc, re.M)
    assert tuple(ruled) == labels.LABELS


def test_every_cause_and_kind_has_actions_and_no_action_is_undeclared() -> None:
    assert set(CAUSE_ACTIONS) == set(CAUSES)
    assert set(KIND_ACTIONS) == set(KINDS)
    assert all(CAUSE_ACTIONS.values()) and all(KIND_ACTIONS.values())


def test_the_vocabulary_imports_nothing_of_the_package() -> None:
    imported = _imports(Path(causes.__file__))
    assert not {m for m in imported if m.startswith("locust_llm")}


def test_the_diagnosis_does_not_import_the_simulator() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(m for m in _imports(path) if "sim" in m.split("."))
        for path in (PACKAGE / "report" / "diagnosis").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}
