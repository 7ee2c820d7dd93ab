"""The one stage-plan type and parser (locust_llm.workloads.stages): every form, every refusal."""

from __future__ import annotations

import argparse
import math
import subprocess
import sys

import pytest

from locust_llm.errors import InputError
from locust_llm.launch.sweep import sweep_plan
from locust_llm.options.table import SWEEP_FLAGS, stage_flags
from locust_llm.rundir.layout import RunInfo, Stage, read_run_info
from locust_llm.workloads.stages import (
    LOCUST_FLAGS,
    StagePlan,
    parse_duration,
    parse_stages,
)


def _shape(plans: tuple[StagePlan, ...]) -> list[tuple]:
    return [(p.name, p.concurrency, p.rate, p.requests, p.duration_s, p.kind) for p in plans]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), ("2.5", 2.5), (".5", 0.5), ("500ms", 0.5), ("90s", 90.0), ("30m", 1800.0),
     ("1.5h", 5400.0), (" 3 ", 3.0)],
)  # fmt: skip
def test_durations_in_every_unit(text: str, seconds: float) -> None:
    assert parse_duration(text, "--x") == seconds


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        (
            {"concurrency": "1,10,50", "requests": "10,20,100"},
            [("c=1", 1, None, 10, None, "step"), ("c=10", 10, None, 20, None, "step"),
             ("c=50", 50, None, 100, None, "step")],
        ),
        (  # one value spreads over every stage; both ends: whichever comes first
            {"concurrency": " 2, 4 ", "requests": "8", "duration": "1m"},
            [("c=2", 2, None, 8, 60.0, "step"), ("c=4", 4, None, 8, 60.0, "step")],
        ),
        (  # whole numbers written as floats
            {"concurrency": "4.0,1e2", "duration": "5,10"},
            [("c=4", 4, None, None, 5.0, "step"), ("c=100", 100, None, None, 10.0, "step")],
        ),
        (
            {"rate": "0.5,2.5", "duration": "30s"},
            [("rate 0.5/s", None, 0.5, None, 30.0, "step"),
             ("rate 2.5/s", None, 2.5, None, 30.0, "step")],
        ),
        (  # a soak at the last stage's concurrency, or its own
            {"concurrency": "1,8", "requests": "5", "soak": "30m"},
            [("c=1", 1, None, 5, None, "step"), ("c=8", 8, None, 5, None, "step"),
             ("soak c=8", 8, None, None, 1800.0, "soak")],
        ),
        (
            {"rate": "4", "duration": "10", "soak": "2s@2"},
            [("rate 4/s", None, 4.0, None, 10.0, "step"), ("soak c=2", 2, None, None, 2.0, "soak")],
        ),
        ({"soak": "1h@50"}, [("soak c=50", 50, None, None, 3600.0, "soak")]),
        ({}, []),
        ({"requests": "5", "duration": "9"}, []),  # no loads: no stages (a plain locustfile)
    ],
)  # fmt: skip
def test_every_accepted_form(kwargs: dict[str, str], expected: list[tuple]) -> None:
    assert _shape(parse_stages(**kwargs)) == expected


@pytest.mark.parametrize(
    ("kwargs", "needles"),
    [
        ({"concurrency": "1", "rate": "2", "duration": "5"}, ["--llm-concurrency", "--llm-rate",
                                                             "one of the two"]),
        ({"concurrency": "0", "requests": "5"}, ["--llm-concurrency '0'", "positive"]),
        ({"concurrency": "a,b", "requests": "5"}, ["--llm-concurrency 'a,b'", "numbers"]),
        ({"concurrency": "1.5", "requests": "5"}, ["--llm-concurrency '1.5'", "whole numbers"]),
        ({"concurrency": ",", "requests": "5"}, ["--llm-concurrency", "positive numbers"]),
        ({"rate": "inf", "duration": "5"}, ["--llm-rate 'inf'", "positive"]),
        ({"rate": "-2", "duration": "5"}, ["--llm-rate '-2'", "positive"]),
        ({"concurrency": "1,2"}, ["needs --llm-stage-requests or --llm-stage-duration"]),
        ({"concurrency": "1,2,3", "requests": "4,5"}, ["--llm-stage-requests", "one per stage (3)",
                                                       "got 2"]),
        ({"concurrency": "1", "requests": "2.5"}, ["--llm-stage-requests '2.5'", "whole"]),
        ({"concurrency": "1,2", "duration": "1,2,3"}, ["--llm-stage-duration", "one per stage"]),
        ({"concurrency": "1", "duration": "0"}, ["--llm-stage-duration '0'", "> 0"]),
        ({"concurrency": "1", "duration": "soon"}, ["--llm-stage-duration 'soon'", "90s, 30m"]),
        ({"concurrency": "1", "duration": "5d"}, ["--llm-stage-duration '5d'", "duration"]),
        ({"soak": "forever"}, ["--llm-soak 'forever'", "duration"]),
        ({"soak": "30m"}, ["--llm-soak needs DURATION@CONCURRENCY"]),
        ({"rate": "2", "duration": "5", "soak": "30m"}, ["--llm-soak needs DURATION@CONCURRENCY"]),
        ({"soak": "30m@x"}, ["--llm-soak concurrency 'x'"]),
    ],
)  # fmt: skip
def test_bad_input_names_the_flag_and_what_was_wrong(
    kwargs: dict[str, str], needles: list[str]
) -> None:
    with pytest.raises(InputError) as info:
        parse_stages(**kwargs)
    message = str(info.value)
    assert all(n in message for n in needles), message
    assert "\n" not in message


def test_the_sweep_commands_own_flag_names_show_in_errors() -> None:
    assert LOCUST_FLAGS.requests == "--llm-stage-requests"
    assert stage_flags() == LOCUST_FLAGS  # the default is the spec's plugin flags
    with pytest.raises(InputError, match=r"^--stage-requests: give one value or one per stage"):
        parse_stages(concurrency="1,2,4", requests="4,5", flags=SWEEP_FLAGS)
    with pytest.raises(InputError, match=r"give --concurrency .* or --rate .*one of the two"):
        parse_stages(concurrency="1", rate="3", requests="4", flags=SWEEP_FLAGS)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({}, "give a concurrency or a rate"),
        ({"concurrency": 2, "rate": 1.0, "requests": 1}, "one of the two"),
        ({"concurrency": 0, "requests": 1}, "concurrency must be >= 1"),
        ({"rate": math.nan, "duration_s": 1.0}, "rate must be a positive number"),
        ({"concurrency": 1}, "needs a request count or a duration"),
        ({"concurrency": 1, "requests": 0}, "requests must be >= 1"),
        ({"concurrency": 1, "duration_s": 0.0}, "duration must be > 0 s"),
        ({"rate": 2.0, "requests": 4, "max_sends": 4}, "max sends is for closed loop"),
        ({"concurrency": 2, "requests": 4, "max_sends": 3}, "at least the request count"),
        ({"concurrency": 2, "requests": 4, "kind": "warm"}, "kind 'warm'"),
    ],
)
def test_a_plan_that_cannot_run_is_refused_when_made(kwargs: dict, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        StagePlan(**kwargs)


def test_a_plan_is_frozen_and_named() -> None:
    plan = StagePlan(concurrency=3, requests=9, max_sends=12)
    assert plan.name == "c=3" and not plan.open_loop
    assert StagePlan(rate=1.5, duration_s=2.0).open_loop
    assert StagePlan(concurrency=3, duration_s=1.0, name="trace replay").name == "trace replay"
    with pytest.raises(AttributeError):
        plan.concurrency = 4  # type: ignore[misc]


def test_the_window_is_run_json_s_stage_and_old_run_dirs_still_load(tmp_path) -> None:
    soak = parse_stages(concurrency="2", requests="7", soak="1m@5")
    windows = [p.window(i, 100.0 + i, warmup_s=1.5) for i, p in enumerate(soak)]
    assert windows[0] == Stage(index=0, name="c=2", start_wall_s=100.0, concurrency=2,
                               warmup_s=1.5, target_requests=7)  # fmt: skip
    assert (windows[1].kind, windows[1].target_requests, windows[1].concurrency) == (
        "soak",
        None,
        5,
    )
    info = RunInfo(run_id="r", stages=windows)
    (tmp_path / "run.json").write_text(info.to_json())
    assert read_run_info(tmp_path).stages[1].name == "soak c=5"


#: the Locust shape's plan of its options (a subprocess: the shape imports locust)
SHAPE_PLAN = """
from locust_llm.options.config import ClientOptions
from locust_llm.client.shapes import plan_stages
from locust_llm.options.table import SWEEP_FLAGS, stage_flags
opts = ClientOptions(concurrency="1,3", stage_requests="4,9", soak="10s", stage_duration="1m")
print(repr(plan_stages(opts)))
"""


def test_the_locust_shape_and_run_plan_the_same_stages() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SHAPE_PLAN], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    same = parse_stages(concurrency="1,3", requests="4,9", soak="10s", duration="1m")
    assert out.strip() == repr(list(same))
    args = argparse.Namespace(concurrency="1,10", rate="", stage_requests="10,20",
                              stage_duration="", llm_soak="1m")  # fmt: skip
    assert _shape(sweep_plan(args))[-1] == ("soak c=10", 10, None, None, 60.0, "soak")
    timed = argparse.Namespace(concurrency="1,10,50", rate="2,4", stage_requests="10,20,100",
                               stage_duration="30s")  # fmt: skip
    assert [(p.rate, p.duration_s) for p in sweep_plan(timed)] == [(2.0, 30.0), (4.0, 30.0)]
    timed.stage_duration = ""
    with pytest.raises(InputError, match="--rate: open-loop stages need --stage-duration"):
        sweep_plan(timed)
