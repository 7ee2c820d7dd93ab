"""One Thresholds object for the verdict, the knee and the alerts: the shared error rate moves
all three together, the defaults are the ones documented, and no other module defines one."""

from __future__ import annotations

import ast
import math
from dataclasses import FrozenInstanceError, fields
from pathlib import Path

import pytest

from locust_llm.report.diagnosis.alerts import check, parse_thresholds
from locust_llm.report.diagnosis.knee import meets_slo
from locust_llm.report.diagnosis.thresholds import ALERT_FIELDS, Slo, Thresholds
from locust_llm.report.diagnosis.verdict import stage_verdict

ROOT = Path(__file__).resolve().parents[1]


def _row(error_rate: float) -> dict:
    return {
        "stage": 0, "concurrency": 8.0, "rate": math.nan, "requests": 200, "completed": 196,
        "error_rate": error_rate, "error_rate_http_5xx": error_rate, "error_rate_oom": 0.0,
        "worker_cpu_max": 0.2, "gpu_util": 0.5, "gpu_mem_util_max": 0.5, "running": 8.0,
        "waiting": 0.0, "kv_cache_usage_max": 0.3, "qps": 10.0, "latency_p99_s": 1.0,
    }  # fmt: skip


def _judged(row: dict, thresholds: Thresholds) -> tuple[str, bool, list[str]]:
    verdict = stage_verdict(row, [row], thresholds=thresholds).kind
    ok, _ = meets_slo(row, Slo(), thresholds)
    return verdict, ok, [a.name for a in check([row], thresholds)]


def test_the_error_rate_is_one_threshold_for_verdict_knee_and_alerts() -> None:
    row = _row(0.02)
    assert _judged(row, Thresholds()) == ("errors", False, ["error_rate"])
    assert _judged(_row(0.01), Thresholds()) != ("errors", False, ["error_rate"])  # strictly above
    raised = parse_thresholds("error_rate=5%")
    verdict, ok, alerts = _judged(row, raised)
    assert verdict != "errors" and ok and alerts == []
    off = parse_thresholds("error_rate=off")
    assert off.error_rate is None
    verdict, ok, alerts = _judged(row, off)
    assert verdict != "errors" and ok and alerts == []


def test_defaults_are_the_documented_values_and_frozen() -> None:
    t = Thresholds()
    assert (t.error_rate, t.gpu_mem, t.gpu_util, t.client_cpu) == (0.01, 0.90, 0.95, 0.90)
    assert (t.saturated_gpu_util, t.saturated_kv, t.saturated_bw_util) == (0.90, 0.90, 0.70)
    assert (t.linear_efficiency, t.flat_band, t.min_gain, t.latency_weight) == (
        0.5, 0.02, 0.05, 0.10,
    )  # fmt: skip
    assert (t.ttft, t.tpot, t.e2e) == (None, None, None)
    with pytest.raises(FrozenInstanceError):
        t.error_rate = 0.5  # type: ignore[misc]
    assert t.alert_values() == {
        "gpu_mem": 0.9, "gpu_util": 0.95, "error_rate": 0.01,
        "ttft": None, "tpot": None, "e2e": None,
    }  # fmt: skip
    assert set(ALERT_FIELDS) <= {f.name for f in fields(Thresholds)}


def test_alert_overrides_only_name_alert_fields() -> None:
    with pytest.raises(Exception, match="expected NAME=VALUE with NAME one of e2e, error_rate"):
        parse_thresholds("saturated_kv=0.5")


def test_no_other_module_defines_a_threshold_class_or_error_rate_default() -> None:
    offenders = []
    for path in sorted((ROOT / "locust_llm").rglob("*.py")):
        if path.name == "thresholds.py" or "sim" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            named = isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            if named and "error_rate" in node.target.id and node.value is not None:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.ClassDef) and node.name in (
                "Rules",
                "Rule",
                "SoakRule",
                "Thresholds",
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} class {node.name}")
    assert not offenders, offenders


# -- no stray thresholds -----------------------------------------------------------------------

#: The packages that judge (the report and its diagnosis, the live console, the web UI): every
#: threshold they judge by is a field of Thresholds.
JUDGING = ("report", "live", "webui")
#: Modules that only lay figures out (axis ticks, number formats, chart sizes): not judgements.
LAYOUT = {"fmt.py", "svg.py", "render_html.py", "render_md.py", "render_console.py"}
#: Numbers in judging modules that equal a threshold's default but mean something else.
NOT_THRESHOLDS = {
    ("report/diagnosis/resources.py", "COMPUTE_EFFICIENCY"): "the roofline's achievable efficiency",
    (
        "report/diagnosis/resources.py",
        "BANDWIDTH_EFFICIENCY",
    ): "the roofline's achievable efficiency",
    (
        "report/diagnosis/decompose.py",
        "MIN_EFFICIENCY",
    ): "the calibrated prefill efficiency's clamp",
    ("report/diagnosis/lag.py", "LATE_STEP_S"): "the simulator's late-step counter's definition",
    ("live/progress.py", "PLAIN_EVERY_S"): "a print interval",
    ("live/progress.py", "SETTLE_WAIT_S"): "a wait for the workers' last figures",
    ("live/progress.py", "poll_stats(timeout_s=)"): "an HTTP timeout",
    ("live/stage_tally.py", "WINDOW_S"): "a window, not a limit",
    ("webui/data.py", "RECORD_TRANSIT_S"): "a delivery delay, not a limit",
}
_SIZES = ("len(", ".size", ".sum(", ".shape", ".ndim")
#: Factors that convert units (s <-> ms / us / ns, minutes, hours, bytes) when they multiply
UNIT_FACTORS = {*(10.0**k for k in range(1, 13)), 60.0, 3600.0, 1024.0, 1024.0**2, 1024.0**3}


def _table_values() -> set[float]:
    values = {getattr(Thresholds(), f.name) for f in fields(Thresholds)}
    return {float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)}


def _float(node: ast.AST) -> float | None:
    """A float literal's value (``0.5``, ``-2.0``); None for anything else, integers included."""
    inner = node.operand if isinstance(node, ast.UnaryOp) else node
    if isinstance(inner, ast.Constant) and type(inner.value) is float:
        return _number(node)
    return None


def _number(node: ast.AST) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return None if isinstance(node.value, bool) else float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return None if inner is None else -inner
    return None


def _module_numbers(tree: ast.Module) -> list[tuple[int, str, float]]:
    """(line, name, value) of each float a module binds at its top level (``A = 0.5``,
    ``A, B = 0.05, 1.0``) or gives a function's parameter as its default (integers are counts,
    sizes and exit codes too often to tell)."""
    out = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, bound = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, bound = [node.target], node.value
        else:
            continue
        for target in targets:
            names = target.elts if isinstance(target, ast.Tuple) else [target]
            values = bound.elts if isinstance(bound, ast.Tuple) else [bound]
            for name, value in zip(names, values, strict=False):
                number = _float(value)
                if isinstance(name, ast.Name) and number is not None:
                    out.append((node.lineno, name.id, number))
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            for arg, default in zip(
                fn.args.args[::-1] + fn.args.kwonlyargs[::-1],
                fn.args.defaults[::-1] + fn.args.kw_defaults[::-1],
                strict=False,
            ):
                number = None if default is None else _float(default)
                if number is not None:
                    out.append((fn.lineno, f"{fn.name}({arg.arg}=)", number))
    return out


def _compared_literals(tree: ast.Module) -> list[tuple[int, str, float]]:
    """(line, comparison, value) of each number a comparison holds literally, other than 0 and 1,
    tolerances (below 1e-6), unit factors (``x * 1e3``), indexes (``row[2]``) and integers a size
    is compared with (``len(x) < 2``)."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        text = ast.unparse(node)
        units = {
            id(operand)
            for sub in ast.walk(node)
            if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Mult | ast.Div)
            for operand in (sub.left, sub.right)
            if _number(operand) in UNIT_FACTORS
        }
        indexes = {
            id(inner)
            for sub in ast.walk(node)
            if isinstance(sub, ast.Subscript)
            for inner in ast.walk(sub.slice)
        }
        for sub in ast.walk(node):
            number = _number(sub)
            if number is None or abs(number) in (0.0, 1.0) or abs(number) < 1e-6:
                continue
            if id(sub) in units or id(sub) in indexes:
                continue
            integer = isinstance(sub, ast.Constant) and type(sub.value) is int
            if integer and any(s in text for s in _SIZES):
                continue
            out.append((node.lineno, text, number))
    return out


def stray_thresholds(root: Path) -> list[str]:
    """Numbers in the judging modules that are thresholds of their own: a top-level constant or
    parameter default equal to a Thresholds value (unless listed in NOT_THRESHOLDS), or any
    literal a comparison judges by."""
    table = _table_values()
    offenders = []
    for package in JUDGING:
        for path in sorted((root / package).rglob("*.py")):
            if path.name in LAYOUT or path.name == "thresholds.py":
                continue
            where = path.relative_to(root).as_posix()
            tree = ast.parse(path.read_text())
            for line, name, value in _module_numbers(tree):
                if value in table and (where, name) not in NOT_THRESHOLDS:
                    offenders.append(f"{where}:{line} {name} = {value:g}")
            for line, text, value in _compared_literals(tree):
                offenders.append(f"{where}:{line} {text} (literal {value:g})")
    return offenders


def test_no_judging_module_holds_a_threshold_of_its_own() -> None:
    assert stray_thresholds(ROOT / "locust_llm") == []


def test_the_guard_sees_a_stray_duplicate_and_a_literal_but_not_a_unit(tmp_path: Path) -> None:
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "rule.py").write_text(
        "NO_QUEUE_WAITING = 0.5\n"  # a duplicate of no_queue_waiting
        "MS_PER_S = 1000.0\n"  # a unit conversion
        "def f(x, n, limit=0.95):\n"  # a duplicate of gpu_util as a default
        "    if len(n) < 3:\n"  # a size
        "        return x * 1e3 > 1e-9\n"  # a conversion and a tolerance
        "    return x >= 0.42 * n\n"  # a new literal threshold
    )
    found = stray_thresholds(tmp_path)
    assert [f.split(" ", 1)[0] for f in found] == ["report/rule.py:1", "report/rule.py:3",
                                                    "report/rule.py:6"]  # fmt: skip
    assert "literal 0.42" in found[2]


def test_every_number_let_through_still_equals_a_threshold_and_exists() -> None:
    table = _table_values()
    for where, name in NOT_THRESHOLDS:
        tree = ast.parse((ROOT / "locust_llm" / where).read_text())
        bound = {n: v for _, n, v in _module_numbers(tree)}
        assert bound.get(name) in table, (where, name)


def test_the_thresholds_moved_into_the_table_keep_their_values() -> None:
    t = Thresholds()
    assert (t.client_delay_bound_s, t.client_delay_min_late) == (0.010, 2)
    assert (t.standing_queue_share, t.cache_note_share, t.compute_prefill_share) == (0.5, 0.1, 0.5)
    assert (t.compute_bound_share, t.observed_kv_min, t.min_attributed_share) == (0.5, 0.05, 0.5)
    assert (t.moe_gain_share, t.linear_wording, t.latency_explodes) == (0.8, 0.9, 2.0)
    assert (t.confident_requests, t.replay_late_s, t.behind_schedule_s) == (20, 0.005, 0.25)
    assert t.confident_requests == 4 * t.min_requests
