"""bench/verdict_compare.py: two dumps of the same stages, side by side."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import verdict_compare as vc


def _stage(case: int, label: str, cause: str, compute: float, *, judged: bool = True) -> dict:
    kinds = {"host_overhead": "decode_bound", "prefill_interference": "prefill_bound"}
    return {
        "seed": 7, "case": case, "stage": 0, "judged": judged, "label": label,
        "truth_kind": kinds[label], "cause": cause, "kind": kinds[cause],
        "confidence": "low", "rule": "step_bound", "why_not": "", "contradiction": "",
        "queue_err": 0.0, "prefill_err": 0.0, "description": "a case",
        "row": {"compute_time_share": compute, "memory_time_share": 0.2},
        "truth": {"compute_share": 0.4, "memory_set_share": 0.2},
    }  # fmt: skip


def _dump(path: Path, stages: list[dict]) -> str:
    path.write_text("".join(json.dumps(s) + "\n" for s in stages))
    return str(path)


def test_the_comparison_counts_mends_losses_and_the_share_error(tmp_path: Path) -> None:
    before = _dump(tmp_path / "b.jsonl", [
        _stage(0, "host_overhead", "prefill_interference", 0.55),
        _stage(1, "prefill_interference", "prefill_interference", 0.52),
        _stage(2, "host_overhead", "prefill_interference", 0.60, judged=False),
    ])  # fmt: skip
    after = _dump(tmp_path / "a.jsonl", [
        _stage(0, "host_overhead", "host_overhead", 0.45),
        _stage(1, "prefill_interference", "host_overhead", 0.48),
        _stage(2, "host_overhead", "host_overhead", 0.40, judged=False),
    ])  # fmt: skip
    text = vc.report(vc.load(before), vc.load(after))
    assert "all                          1 / 2 -> 1 / 2 = 50.0%" in text
    assert "host_overhead                0 / 1 -> 1 / 1 = 100.0%" in text
    # |0.55-0.4|, |0.52-0.4| -> |0.45-0.4|, |0.48-0.4|: the unjudged stage left out
    assert "compute_time_share (2 stages): 0.135 / 0.150 / 0.135 -> 0.065 / 0.080 / 0.065" in text
    assert "7 0 0: host_overhead; prefill_interference -> host_overhead (mended)" in text
    assert "7 1 0: prefill_interference; prefill_interference -> host_overhead (lost)" in text
    assert "7 2 0" not in text


def test_dumps_of_different_stages_are_refused(tmp_path: Path) -> None:
    one = _dump(tmp_path / "one.jsonl", [_stage(0, "host_overhead", "host_overhead", 0.4)])
    two = _dump(tmp_path / "two.jsonl", [_stage(1, "host_overhead", "host_overhead", 0.4)])
    with pytest.raises(SystemExit, match="different stages"):
        vc.report(vc.load(one), vc.load(two))
