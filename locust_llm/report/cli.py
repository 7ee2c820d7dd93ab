"""``locust-llm report RUN_DIR``: build the report, write report.md / report.html / stages.csv /
summary.json, print the table and the verdict. Exit 0 ok, 3 when an alert fired, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from locust_llm.capacity import slo as slo_grammar
from locust_llm.errors import InputError
from locust_llm.report.build import Report, build_report
from locust_llm.report.capacity import capacity_report
from locust_llm.report.compare import compare_runs
from locust_llm.report.diagnosis.alerts import failing, parse_thresholds
from locust_llm.report.diagnosis.thresholds import Slo, Thresholds
from locust_llm.report.load import load_run
from locust_llm.report.render_console import render_console
from locust_llm.report.render_html import render_html
from locust_llm.report.render_md import render_markdown
from locust_llm.roofline.devices import DeviceArgs, check_tp
from locust_llm.roofline.floors import GpuSpec

EXIT_OK, EXIT_BAD_INPUT, EXIT_ALERTS = 0, 2, 3


def parse_slo(spec: str | None) -> Slo:
    """``--slo`` text -> Slo (the one grammar: :mod:`locust_llm.capacity.slo`)."""
    return slo_grammar.parse_slo(spec)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Flags of ``locust-llm report``."""
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run dir written by locust-llm")
    parser.add_argument(
        "--slo",
        help="objectives for goodput and the cap, e.g. "
        "ttft=0.5,tpot=0.05,e2e=10 (seconds; 500ms also works)",
    )
    parser.add_argument(
        "--alert",
        help="override alert thresholds, e.g. gpu_mem=95%%,"
        "gpu_util=off,error_rate=0.05,ttft=0.5,tpot=0.05,e2e=10",
    )
    parser.add_argument("--model", help="served model (preset or config.json) for roofline floors")
    parser.add_argument(
        "--gpu",
        help="GPU preset for roofline floors, or cpu (this host, measured by a probe); default: "
        "run.json's device (what `run` was told)",
    )
    parser.add_argument("--bandwidth", help="custom device: memory bandwidth, e.g. 40GB/s")
    parser.add_argument("--flops", help="custom device: dense peak, e.g. 1.2TFLOPS")
    parser.add_argument("--memory", help="custom device: memory capacity, e.g. 64GiB")
    parser.add_argument(
        "--tp",
        type=int,
        help="tensor-parallel degree of the server (default: run.json's, or 1)",
    )
    parser.add_argument(
        "--prometheus",
        metavar="URL",
        help="read telemetry for the run's window from this Prometheus",
    )
    parser.add_argument(
        "--prometheus-step",
        type=float,
        default=1.0,
        metavar="S",
        help="query step in seconds (default 1)",
    )
    parser.add_argument(
        "--compare",
        nargs="+",
        metavar="RUN",
        default=[],
        help="other run dirs to put side by side (horizontal scaling)",
    )
    parser.add_argument("--out", help="output folder (default: RUN_DIR)")


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return _clean(value.item())
    return value


def summary(report: Report) -> dict[str, Any]:
    """The machine-readable summary (NaN becomes null)."""
    info = report.run.info
    return _clean(
        {
            "run_id": info.run_id,
            "mode": info.mode,
            "server_instances": info.server_instances,
            "requests": report.request_counts,
            "verdict": report.overall.as_dict(),
            "stage_verdicts": [v.as_dict() for v in report.verdicts],
            "knee": report.knee.as_dict(),
            "alerts": [a.as_dict() for a in report.alerts],
            "soak": [s.as_dict() for s in report.soak],
            "comparison": [c.as_dict() for c in report.comparison],
            "slo": {
                "ttft_s": report.slo.ttft_s,
                "tpot_s": report.slo.tpot_s,
                "e2e_s": report.slo.e2e_s,
                "stage": report.slo.describe(),
            },
            "thresholds": report.thresholds.alert_values(),
            "roofline": (
                {
                    "model": report.floors.model.name,
                    "gpu": report.floors.gpu.name,
                    "tp": report.floors.tp,
                    "device": report.words.noun,
                }
                if report.floors
                else None
            ),
            "capacity": found.data if (found := capacity_report(report)) else None,
            "warnings": report.warnings,
            # per error kind: count, share, its most frequent message and that one's count
            "errors": [k.as_dict() for k in report.errors],
            "stage_errors": [[k.as_dict() for k in kinds] for kinds in report.stage_errors],
            "stages": report.rows,
        }
    )


def write_outputs(report: Report, out_dir: Path) -> dict[str, Path]:
    """Write the four outputs; returns name -> path."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--out {out_dir}: cannot create ({exc.strerror})") from None
    paths = {
        name: out_dir / name for name in ("report.md", "report.html", "stages.csv", "summary.json")
    }
    paths["report.md"].write_text(render_markdown(report))
    paths["report.html"].write_text(render_html(report))
    report.table.to_csv(paths["stages.csv"], index=False)
    paths["summary.json"].write_text(json.dumps(summary(report), indent=2, allow_nan=False))
    return paths


def device_from_args(args: argparse.Namespace) -> GpuSpec | None:
    """``--gpu`` (a preset, or ``cpu``: this host, measured), or a custom device from
    ``--bandwidth/--flops/--memory``; None: run.json's device (what ``run`` was told)."""
    check_tp(args.tp)
    given = (args.gpu, args.bandwidth, args.flops, args.memory)
    return DeviceArgs(*(value or "" for value in given)).resolve()


def make_report(args: argparse.Namespace) -> Report:
    """Load, analyse and (with --compare) compare, from parsed flags."""
    slo = parse_slo(args.slo)
    base = Thresholds(ttft=slo.ttft_s, tpot=slo.tpot_s, e2e=slo.e2e_s)
    thresholds = parse_thresholds(args.alert, base)
    device = device_from_args(args)  # bad device flags fail before the run dir is read
    run = load_run(args.run_dir, prometheus=args.prometheus, prometheus_step_s=args.prometheus_step)
    report = build_report(
        run, slo=slo, thresholds=thresholds, model=args.model, gpu=device, tp=args.tp
    )
    if args.compare:
        entries = [
            (
                report.run.info.run_id or str(args.run_dir),
                report.run.info.server_instances,
                report.rows,
                report.knee.cap,
            )
        ]
        for other_dir in args.compare:
            other = build_report(load_run(other_dir), slo=slo, model=args.model, gpu=device)
            entries.append(
                (
                    other.run.info.run_id or str(other_dir),
                    other.run.info.server_instances,
                    other.rows,
                    other.knee.cap,
                )
            )
        report.comparison = compare_runs(entries)
    return report


def run(args: argparse.Namespace) -> int:
    """Entry point of ``locust-llm report``."""
    report = make_report(args)
    paths = write_outputs(report, Path(args.out or args.run_dir))
    print(render_console(report, paths["report.html"]))
    return EXIT_ALERTS if failing(report.alerts) else EXIT_OK
