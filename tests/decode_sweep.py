"""A closed-loop sweep of short prompts and fixed-length answers, for virtual runs whose stages
are decode-bound (tests/test_host_overhead.py, tests/test_probed_device.py)."""

from __future__ import annotations

from locust_llm.sim.virtual import VirtualWorkload
from locust_llm.workloads.stages import StagePlan


def decode_sweep(levels: tuple[int, ...], per_user: int, max_tokens: int) -> VirtualWorkload:
    """Stages at ``levels`` users, ``per_user`` requests each; 64-token prompts, answers of
    exactly ``max_tokens``; the server scraped every 0.25 s."""
    return VirtualWorkload(
        stages=tuple(StagePlan(concurrency=c, requests=per_user * c) for c in levels),
        input_len="64",
        max_tokens=str(max_tokens),
        ignore_eos=True,
        scrape_interval_s=0.25,
    )
