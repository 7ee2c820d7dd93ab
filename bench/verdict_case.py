"""One case of the verdict benchmark, stage by stage: the report's row beside the simulator's
ground truth, to see why a verdict missed (``bench/verdict_accuracy.py`` names the case).

    .venv/bin/python bench/verdict_case.py --seed 8101 --case 43 --stages 2

Per stage: the verdict (cause, kind, rule, confidence) and the truth's label; as JSON, the
row's columns the benchmark's ``--dump`` writes (its resource model: compute, memory and host
shares, the steps with prompt work) and the truth's shares; the
steps in the window with prompt work, counted in the step trace, beside the row's
``first_token_step_share``; the verdict's first evidence lines. Virtual time: the same every run.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import verdict_accuracy as va


def _rounded(value: object) -> object:
    return round(value, 4) if isinstance(value, float) else value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, required=True, help="the matrix's seed")
    p.add_argument("--case", type=int, required=True, help="the case's index in the matrix")
    p.add_argument("--stages", default="", help="stage indexes, comma-separated (default all)")
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    case = [va.make_case(i, rng) for i in range(args.case + 1)][args.case]
    wanted = {int(x) for x in args.stages.split(",") if x}
    print(case.describe())
    with tempfile.TemporaryDirectory() as tmp:
        report, engine = va.traced_report(case.config, case.workload, Path(tmp) / "case")
    for row, verdict in zip(report.rows, report.verdicts, strict=True):
        stage = int(row["stage"])
        if wanted and stage not in wanted:
            continue
        lo, hi = va.stage_window(row)
        truth = va.stage_truth(engine, row)
        said = f"{verdict.kind}, rule {verdict.rule}, confidence {verdict.confidence}"
        print(f"--- stage {stage}: truth {truth.label}; verdict {verdict.cause} ({said})")
        print("  row:", json.dumps({k: _rounded(row.get(k)) for k in va.DUMPED}, default=str))
        shares = {
            k: round(v, 4)
            for k, v in vars(truth).items()
            if isinstance(v, float) and not math.isnan(v)
        }
        print("  truth:", json.dumps(shares, default=str), "blocked by:", truth.blocked_by)
        window = [s for s in engine.steps_seen if lo <= s["start"] < hi]
        with_prompts = sum(1 for s in window if s["prefill_tokens"] > 0)
        if window:
            print(f"  trace: {with_prompts} of {len(window)} steps with prompt work "
                  f"({with_prompts / len(window):.1%}); the row's first-token bins: "
                  f"{_rounded(row.get('first_token_step_share'))}")  # fmt: skip
        for line in verdict.evidence[:4]:
            print("  evidence:", line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
