"""The run states' rules (locust_llm.rundir.states), pure: which state, which exit code, the
banner and the stages not run."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from locust_llm.rundir.states import (
    EXIT_CODES,
    banner,
    cut_stage_words,
    exit_code,
    final_state,
    stages_not_run,
)


@settings(max_examples=60, deadline=None)
@given(failure=st.sampled_from(["", "no worker left"]), signal=st.sampled_from(["", "SIGTERM"]),
       plan_done=st.sampled_from([True, False, None]))  # fmt: skip
def test_a_failure_wins_a_finished_plan_is_finished_else_a_stop_is_interrupted(
    failure: str, signal: str, plan_done: bool | None
) -> None:
    state = final_state(failure=failure, interrupted_by=signal, plan_done=plan_done)
    if failure:
        assert state == "failed"
    elif plan_done or (plan_done is None and not signal):
        assert state == "finished"
    else:
        assert state == "interrupted"
    assert exit_code(state) == {"finished": 0, "interrupted": 4, "failed": 5}[state]


def test_exit_codes_keep_the_existing_ones_free() -> None:
    # 1: Locust saw failed requests, 2: bad input, 3: alerts/SLOs failed
    assert sorted(EXIT_CODES.values()) == [0, 4, 5]
    assert exit_code("") == 0  # a run dir from before states


def test_the_banner_names_the_state_the_cut_stage_and_the_stages_not_run() -> None:
    planned = ["c=2", "c=4", "c=8"]
    where = cut_stage_words(0, 3, "c=2", ended=120, target=300, elapsed_s=9.0, duration_s=None)
    assert where == "stage 1/3 c=2 at 120 of 300 requests"
    line = banner("interrupted", f"stopped by SIGTERM during {where}", stages_not_run(planned, 1))
    assert line == ("RUN INTERRUPTED: stopped by SIGTERM during stage 1/3 c=2 at 120 of 300 "
                    "requests; stages not run: 2/3 c=4, 3/3 c=8")  # fmt: skip
    assert banner("failed", "no worker left", []) == "RUN FAILED: no worker left"
    assert banner("finished", "", []) == ""
    timed = cut_stage_words(1, 2, "c=4", ended=7, target=None, elapsed_s=4.4, duration_s=10.0)
    assert timed == "stage 2/2 c=4 after 4 of 10 s (7 requests)"
