"""How a run ended, in run.json's words, and the exit code each ending gives (pure).

A run dir's ``state`` is ``running`` while the load test runs, then one of:

``finished``
    every planned stage ran to its end (or the locustfile has no stage plan and its test
    stopped on its own);
``interrupted``
    a signal (SIGTERM, SIGINT, ``run --timeout``) stopped the run before its plan was done:
    ``state_reason`` names the signal, the stage cut and how far it got;
``failed``
    the run could not go on: no worker left, the run dir unwritable (a full disk).

``stages_planned`` lists every stage of the plan by name, so the report and ``run`` name the
stages that never ran. :data:`EXIT_CODES` is the one table of what ``locust-llm run`` (and the
Locust master) exit with; 1 (Locust saw failed requests), 2 (bad input) and 3 (alerts/SLOs
failed) keep their meaning, a finished run with alerts still exits 3.
"""

from __future__ import annotations

from collections.abc import Sequence

RUNNING, FINISHED, INTERRUPTED, FAILED = "running", "finished", "interrupted", "failed"

#: exit code of each final state (finished: 0, or 3 when alerts fire, from the report)
EXIT_CODES: dict[str, int] = {FINISHED: 0, INTERRUPTED: 4, FAILED: 5}


def final_state(*, failure: str, interrupted_by: str, plan_done: bool | None) -> str:
    """The state a run ends in. ``plan_done``: every planned stage ended (True), not (False),
    or the run has no stage plan (None). A failure wins; a run whose plan is done is finished
    even if a signal came during its last drain; a signal, or a plan cut short by anything
    else (a web UI stop), is ``interrupted``."""
    if failure:
        return FAILED
    if plan_done:
        return FINISHED
    if interrupted_by or plan_done is False:
        return INTERRUPTED
    return FINISHED


def exit_code(state: str) -> int:
    """The exit code of a final state (0 for a run dir from before states: ``""``)."""
    return EXIT_CODES.get(state, 0)


def stages_not_run(planned: Sequence[str], ran: int) -> list[str]:
    """The planned stages after the ``ran`` first, by name ("3/5 c=100")."""
    total = len(planned)
    return [f"{i + 1}/{total} {name}" for i, name in enumerate(planned) if i >= ran]


def cut_stage_words(
    index: int, total: int, name: str, *, ended: int, target: int | None,
    elapsed_s: float, duration_s: float | None,
) -> str:  # fmt: skip
    """How far the stage that was cut got: ``stage 3/5 c=100 at 120 of 300 requests``."""
    where = f"stage {index + 1}/{total} {name}"
    if target is not None:
        return f"{where} at {ended} of {target} requests"
    if duration_s is not None:
        return f"{where} after {elapsed_s:.0f} of {duration_s:.0f} s ({ended} requests)"
    return f"{where} after {elapsed_s:.0f} s ({ended} requests)"


def banner(state: str, reason: str, not_run: Sequence[str]) -> str:
    """One line naming a run's state, for the console and the report's top: '' when finished."""
    if state in (FINISHED, ""):
        return ""
    head = {INTERRUPTED: "RUN INTERRUPTED", FAILED: "RUN FAILED"}.get(state, "RUN NOT FINISHED")
    text = f"{head}: {reason}" if reason else head
    if not_run:
        text += f"; stages not run: {', '.join(not_run)}"
    return text
