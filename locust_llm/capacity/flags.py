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
                            one-look interval is this wide (relative to its
                            value)
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
    helps = {
        "start": "first load of the search",
        "max": "largest load the search tries",
        "factor": "growth between loads",
        "resolution": "bracket width to stop at",
        "width": "percentile interval width (relative) at which a stage is measured",
        "min-requests": "settled requests before a stage may end",
        "max-requests": "requests cap of a capacity stage",
        "max-duration": "time cap of a capacity stage",
    }
    for dest, key in SPEC_KEYS.items():
        default = _DEFAULTS[key]
        add(
            "--" + dest.replace("_", "-"), default=default,
            help=f"{helps[key]} (default {default.replace('%', '%%')})",
        )  # fmt: skip


#: the tuning flags -> their key in ``--llm-capacity-search`` (what ``run`` hands to Locust)
SPEC_KEYS: dict[str, str] = {
    "capacity_start": "start",
    "capacity_max": "max",
    "capacity_factor": "factor",
    "capacity_resolution": "resolution",
    "stage_ci_width": "width",
    "stage_min_requests": "min-requests",
    "stage_max_requests": "max-requests",
    "stage_max_duration": "max-duration",
}
_DEFAULTS: dict[str, str] = {
    "start": "1", "max": "512", "factor": "2", "resolution": "10%", "width": "25%",
    "min-requests": "20", "max-requests": "2000", "max-duration": "300s",
}  # fmt: skip


def to_spec(args: Any) -> str:
    """The tuning flags as ``--llm-capacity-search`` text (``start=1,max=512,...``)."""
    return ",".join(f"{key}={getattr(args, dest)}" for dest, key in SPEC_KEYS.items())


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
    return from_spec(args.find_capacity, slo_text, to_spec(args), flat_gain=flat_gain)


def from_spec(
    mode: str, slo_text: str, spec: str, *, flat_gain: float
) -> tuple[SearchSettings, StageRule, Slo]:
    """The search's settings, stage rule and SLOs from ``mode`` (users or rate), the --slo
    text and the ``--llm-capacity-search`` text (InputError when bad)."""
    if mode not in MODES:
        raise InputError(f"--find-capacity {mode!r}: expected one of {', '.join(MODES)}")
    slo = parse_slo(slo_text)
    if not slo.stage_given:
        raise InputError(
            "--find-capacity needs stage objectives in --slo, e.g. ttft_p99=2s,errors=1%"
        )
    values = dict(_DEFAULTS)
    flag_of = {key: "--" + dest.replace("_", "-") for dest, key in SPEC_KEYS.items()}
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or key not in values:
            raise InputError(
                f"--llm-capacity-search: cannot read {item!r}; keys: {', '.join(values)}"
            )
        values[key] = value.strip()
    closed = mode == "users"
    settings = SearchSettings(
        closed=closed,
        flat_gain=flat_gain,
        start=_number(values["start"], flag_of["start"], whole=closed),
        max_load=_number(values["max"], flag_of["max"], whole=closed),
        factor=_number(values["factor"], flag_of["factor"]),
        resolution=parse_share(values["resolution"], flag_of["resolution"]),
    )
    # a rate may go below 1/s when even the first fails (users stop at 1)
    settings = replace(settings, min_load=1.0 if closed else settings.start / 64).checked()
    rule = StageRule(
        width=parse_share(values["width"], flag_of["width"]),
        min_requests=int(_number(values["min-requests"], flag_of["min-requests"], whole=True)),
        max_requests=int(_number(values["max-requests"], flag_of["max-requests"], whole=True)),
        max_duration_s=parse_duration(values["max-duration"], flag_of["max-duration"]),
    )
    if rule.max_requests < rule.min_requests:
        raise InputError("--stage-max-requests must be at least --stage-min-requests")
    return settings, rule, slo
