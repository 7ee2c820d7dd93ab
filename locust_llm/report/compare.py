"""Horizontal scaling: runs side by side, with the throughput gain ratio per server instance.

Pure. For each run: its peak QPS and output TPS over stages (soak excluded), the load and P99 at
that peak, the recommended cap, and its server instances (run.json ``server_instances``). Against
the first run: gain = peak QPS ratio, instance ratio = instances ratio, and scaling efficiency =
gain / instance ratio (1.0 = perfectly linear: doubling instances doubles throughput).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from locust_llm.report.fmt import is_num, load_label


@dataclass(frozen=True)
class CompareRow:
    """One run's line in the comparison."""

    run: str
    instances: int
    peak_qps: float
    peak_output_tps: float
    peak_load: str
    p99_at_peak_s: float
    cap: str
    gain: float  # peak QPS / first run's peak QPS
    instance_ratio: float
    gain_per_instance: float  # gain / instance ratio

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _peak(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    usable = [r for r in rows if r.get("kind") != "soak" and is_num(r.get("qps"))]
    return max(usable, key=lambda r: float(r["qps"])) if usable else None


RunSummary = tuple[str, int, Sequence[Mapping[str, Any]], str]


def compare_runs(runs: Sequence[RunSummary]) -> list[CompareRow]:
    """``runs``: (label, server instances, stage rows, cap) per run; the first is the base."""
    out: list[CompareRow] = []
    base_qps, base_inst = math.nan, 1
    for i, (label, instances, rows, cap) in enumerate(runs):
        instances = max(1, int(instances or 1))
        peak = _peak(rows)
        qps = float(peak["qps"]) if peak else math.nan
        if i == 0:
            base_qps, base_inst = qps, instances
        gain = qps / base_qps if base_qps > 0 else math.nan
        inst_ratio = instances / base_inst
        out.append(
            CompareRow(
                run=label,
                instances=instances,
                peak_qps=qps,
                peak_output_tps=float(peak["output_tps"]) if peak else math.nan,
                peak_load=load_label(peak.get("concurrency"), peak.get("rate")) if peak else "n/a",
                p99_at_peak_s=float(peak["latency_p99_s"]) if peak else math.nan,
                cap=cap,
                gain=gain,
                instance_ratio=inst_ratio,
                gain_per_instance=gain / inst_ratio,
            )
        )
    return out
