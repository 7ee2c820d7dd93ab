"""The capacity search's flags, declared once for ``locust-llm virtual`` and ``run``.

``--find-capacity [users|rate]`` turns the search on (closed loop by default); ``--slo`` (the
command's own) holds the objectives; the rest tune the search and each stage's stop rule:

=========================== =============================================== =============
flag                        meaning                                         default
=========================== =============================================== =============
``--capacity-start``        the first load (users, or requests/s)           1
``--capacity-max``          the largest load tried                          512
``--capacity-factor``       growth factor between loads                     2
``--capacity-resolution``   bracket width at which the search stops         10%
``--stage-ci-width``        an undecided percentile is measured when its    25%
                            interval is this wide (relative to its value)
``--stage-min-requests``    settled requests before a stage may end         20
``--stage-max-requests``    requests cap of one stage                       2000
``--stage-max-duration``    time cap of one stage                           300s
=========================== =============================================== =============
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from locust_llm.capacity.measure import StageRule
from locust_llm.capacity.search import SearchSettings
from locust_llm.capacity.slo import Slo, parse_share, parse_slo
from locust_llm.errors import InputError
from locust_llm.workloads.stages import parse_duration

MODES = ("users", "rate")


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The search's flags (not ``--slo``: each command has its own)."""
    add = parser.add_argument
    add(
        "--find-capacity", nargs="?", const="users", default="", choices=MODES,
        help="search the largest load meeting every --slo: users (closed loop, the default) or "
        "rate (open loop); see docs/capacity.md",
    )  # fmt: skip
    add("--capacity-start", default="1", help="first load of the search (default 1)")
    add("--capacity-max", default="512", help="largest load the search tries (default 512)")
    add("--capacity-factor", default="2", help="growth between loads (default 2)")
    add("--capacity-resolution", default="10%", help="bracket width to stop at (default 10%%)")
    add("--stage-ci-width", default="25%", help="percentile interval width a stage needs")
    add("--stage-min-requests", default="20", help="settled requests before a stage may end")
    add("--stage-max-requests", default="2000", help="requests cap of a capacity stage")
    add("--stage-max-duration", default="300s", help="time cap of a capacity stage")


def _number(text: str, flag: str, *, whole: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{flag} {text!r}: expected a number") from None
    if whole and not value.is_integer():
        raise InputError(f"{flag} {text!r}: expected a whole number")
    if not value > 0:
        raise InputError(f"{flag} {text!r}: expected a number > 0")
    return value


def from_args(
    args: Any, slo_text: str, *, flat_gain: float
) -> tuple[SearchSettings, StageRule, Slo]:
    """The search's settings, stage rule and SLOs from parsed flags (InputError when bad)."""
    slo = parse_slo(slo_text)
    if not slo.stage_given:
        raise InputError(
            "--find-capacity needs stage objectives in --slo, e.g. ttft_p99=2s,errors=1%"
        )
    closed = args.find_capacity == "users"
    settings = SearchSettings(
        closed=closed,
        flat_gain=flat_gain,
        start=_number(args.capacity_start, "--capacity-start", whole=closed),
        max_load=_number(args.capacity_max, "--capacity-max", whole=closed),
        factor=_number(args.capacity_factor, "--capacity-factor"),
        resolution=parse_share(args.capacity_resolution, "--capacity-resolution"),
    )
    # a rate may go below 1/s when even the first fails (users stop at 1)
    settings = replace(settings, min_load=1.0 if closed else settings.start / 64).checked()
    rule = StageRule(
        width=parse_share(args.stage_ci_width, "--stage-ci-width"),
        min_requests=int(_number(args.stage_min_requests, "--stage-min-requests", whole=True)),
        max_requests=int(_number(args.stage_max_requests, "--stage-max-requests", whole=True)),
        max_duration_s=parse_duration(args.stage_max_duration, "--stage-max-duration"),
    )
    if rule.max_requests < rule.min_requests:
        raise InputError("--stage-max-requests must be at least --stage-min-requests")
    return settings, rule, slo
