"""A verdict's confidence: the doubts that predict a wrong verdict, each worth one or two levels.

Pure. A verdict starts at ``high`` (server telemetry and the resource model, or the server's own
time split); each :class:`Doubt` lowers it by its ``levels``, and ``low`` is the floor. A verdict
decided on client-side evidence is ``low`` outright. The doubts were chosen on the benchmark
(``bench/verdict_accuracy.py``: simulator runs judged against their traces' ground truth) by
what separated its wrong verdicts from its right ones on fitting seeds, and the levels' accuracy
is then measured on seeds drawn after (``bench/results/verdict_accuracy.md``):

- the margin of the test that named the cause: compute's share of the busy time within
  ``confidence_margin`` of ``compute_bound_share`` (one level; within
  ``confidence_margin_tight``: two) for a step cause (compute- vs memory-bound steps); the
  memory term and the host's time as close for memory- vs host-bound steps; decode
  and TTFT within a factor ``confidence_ratio`` of each other (one; ``confidence_ratio_tight``:
  two) for a prefill cause (prompts' compute vs their interference with decoding); requests
  waiting in less than ``queue_stood_share`` + 2 x ``confidence_margin`` of the samples (one;
  + ``confidence_margin``: two) for an admission cause (a queue that stood vs bursts); the KV
  cache named while a token budget is set and prompts' compute sets the steps (two: the
  scheduler tests the budget first, and the two gates take turns);
- thinner evidence: no resource model and no server time split (one); fewer than
  ``confident_requests`` requests (one); a step cause priced on a device a probe measured on
  this host (``--gpu cpu``: one, its figures' spread in the evidence);
- delay in the timings that is not the server's: a simulated server behind its schedule, or
  first tokens the worker read late (one, whatever their number).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from locust_llm.report.diagnosis.thresholds import Thresholds
from locust_llm.report.fmt import ms, pct

#: The levels, most confident first.
LEVELS: tuple[str, ...] = ("high", "medium", "low")


@dataclass(frozen=True)
class Doubt:
    """What lowers a verdict's confidence, by how many levels, and why (an evidence line, or ""
    for a doubt the verdict's own evidence already states)."""

    levels: int
    why: str = ""
    where: str = "on the margin of its rule"  # what the doubt is, before its reason

    @property
    def evidence(self) -> str:
        """The evidence line, or ""."""
        if not self.why:
            return ""
        lower = {1: "one", 2: "two"}.get(self.levels, str(self.levels))
        return f"{self.where} ({self.why}): confidence {lower} lower"


def level(doubts: Sequence[Doubt]) -> str:
    """``high`` lowered by the doubts' levels, ``low`` at the floor."""
    lowered = sum(d.levels for d in doubts)
    return LEVELS[min(len(LEVELS) - 1, max(0, lowered))]


def _points_off(off: float, th: Thresholds) -> tuple[int, float] | None:
    """(levels, points) of a rule's test that passed ``off`` from its line (shares 0..1): two
    levels within ``confidence_margin_tight``, one within ``confidence_margin``; None beyond."""
    if not off < th.confidence_margin:
        return None
    tight = off < th.confidence_margin_tight
    return (2, th.confidence_margin_tight * 100) if tight else (1, th.confidence_margin * 100)


def step_margin(share: float, th: Thresholds) -> Doubt | None:
    """Compute's share of the busy time close to the line between compute- and memory-bound
    steps, or None."""
    near = _points_off(abs(share - th.compute_bound_share), th)
    if near is None:
        return None
    return Doubt(
        near[0],
        f"compute sets {pct(share)} of the busy time, less than {near[1]:.0f} points from the "
        f"{pct(th.compute_bound_share)} that parts compute- from memory-bound steps",
    )


def host_margin(memory_share: float, host_share: float, th: Thresholds) -> Doubt | None:
    """The memory term and the host's time within ``confidence_margin`` of each other (a
    memory- vs host-bound step), or None."""
    near = _points_off(abs(memory_share - host_share), th)
    if near is None:
        return None
    return Doubt(
        near[0],
        f"the memory term sets {pct(memory_share)} of the busy time and the host's work "
        f"{pct(host_share)}, less than {near[1]:.0f} points apart",
    )


def probed_device(source: str) -> Doubt:
    """A device whose figures a short probe on a shared host measured (one level)."""
    return Doubt(
        1,
        f"{source}; on a shared host the same probe's figures move between runs",
        "priced on a device a probe measured",
    )


def prefill_ratio(decode_s: float, ttft_s: float, th: Thresholds) -> Doubt | None:
    """Decode and TTFT close (a prefill cause: interference when decode is the longer), or
    None."""
    if not (decode_s > 0 and ttft_s > 0):
        return None
    ratio = max(decode_s, ttft_s) / min(decode_s, ttft_s)
    if not ratio < th.confidence_ratio:
        return None
    tight = ratio < th.confidence_ratio_tight
    return Doubt(
        2 if tight else 1,
        f"decode {ms(decode_s)} ms and TTFT {ms(ttft_s)} ms are within a factor "
        f"{th.confidence_ratio_tight if tight else th.confidence_ratio:g}",
    )


def queue_margin(waited: float, th: Thresholds) -> Doubt | None:
    """Requests waited in a share of the samples close to what makes a queue stand, or None
    (NaN: the waiting gauge's share is unknown, no doubt from it)."""
    if math.isnan(waited):
        return None
    tight = th.queue_stood_share + th.confidence_margin
    if waited < tight:
        return Doubt(2, f"requests waited in {pct(waited)} of the samples")
    if waited < tight + th.confidence_margin:
        return Doubt(1, f"requests waited in {pct(waited)} of the samples")
    return None


#: The token budget beside a full KV cache (two levels: on the benchmark's fitting seeds the
#: KV cache was what the traces named in only about two of three such stages).
KV_BESIDE_BUDGET = Doubt(
    2, "the steps are compute-bound on prompts: the token budget binds beside the KV cache"
)

#: The stall rule's reading rests on the client's gaps, and no benchmark of many cases has
#: measured its accuracy (the verdict benchmark's simulated stages all have a resource model):
#: checked on a real vLLM engine with chunked prefill off and on (tests/test_vllm_budget.py).
STALLS_UNBENCHED = Doubt(
    1,
    "prompts' stalls read from the client's inter-token gaps; this reading is checked on a "
    "real vLLM engine's chunked-prefill regimes, not on the verdict benchmark",
    where="without a resource model",
)
