"""Ground truth: one JSON line per request (``--trace``) and one per engine step (``--step-trace``).

Request lines, written when the request ends (wall clock, ``time.time()`` seconds): ``id``,
``client_request_id`` (the request's ``X-Request-Id`` header, "" without one: locust-llm sends
its record's id there), ``endpoint``, ``stream``, ``arrival``, ``admission`` (first admission
to the batch; null if never admitted), ``engine_first_token`` and ``engine_finish`` (when the
engine produced the first and the last token), ``first_token`` and ``last_token`` (the moment
the chunk's bytes were handed to the transport; null if none: later than the engine's when a
fault held them), ``prompt_tokens``, ``cached_tokens`` (prompt tokens the prefix cache served),
``tokens_sent``, ``preemptions``, ``fault`` (the injected fault's kind, null without one: set
also when the request survived it), ``outcome`` (``ok``, ``oom``, ``aborted`` = client went
away, ``rejected`` = 4xx, ``fault:KIND`` = the fault ended it) and ``status`` (HTTP).

Step lines (:func:`step_record`), written as each step is handed out: ``start`` (wall clock),
``duration_s``, ``prefill_tokens``, ``decode_seqs``, ``cached_tokens``, ``compute_s``,
``memory_s``, ``allreduce_s``, ``overhead_s`` (the roofline's terms for one GPU: duration =
overhead + max(compute, memory) + all-reduce), ``bound`` (``compute`` or ``memory``: which set
the duration), ``running``, ``waiting``, ``blocked_by`` (why requests were left waiting:
``kv_blocks``, ``max_num_seqs``, ``token_budget``, ``preemption``; "" = none waiting),
``admitted``, ``preempted``, ``finished``, ``kv_usage`` and ``lag_s`` (how late the real-time
loop handed the step out). Nothing is built when the step trace is off.

The files are line-buffered, so every line is on disk at once and nothing is lost when the
server stops. :mod:`locust_llm.sim.labels` turns both into ground-truth labels.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import IO, Any

from locust_llm.errors import InputError
from locust_llm.sim.engine import SimRequest, StepResult


class TraceWriter:
    """Appends one JSON object per line to ``path`` (created or truncated on open)."""

    def __init__(self, path: str | Path, flag: str = "--trace") -> None:
        try:
            self._file: IO[str] | None = open(path, "w", buffering=1, encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            raise InputError(f"{flag}: cannot write {path} ({exc.strerror or exc})") from None
        self.path = Path(path)

    def write(self, record: dict[str, Any]) -> None:
        """One request's line; NaN values become null."""
        if self._file is None:
            return
        clean = {
            k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in record.items()
        }
        self._file.write(json.dumps(clean, separators=(",", ":")) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def step_record(
    result: StepResult, *, clock_offset_s: float = 0.0, kv_usage: float = math.nan
) -> dict[str, Any]:
    """One step's trace line; ``clock_offset_s`` turns the engine's clock into wall time."""
    return {
        "start": result.start_s + clock_offset_s,
        "duration_s": result.duration_s,
        "prefill_tokens": result.prefill_tokens,
        "decode_seqs": result.decode_seqs,
        "cached_tokens": result.cached_tokens,
        "compute_s": result.compute_s,
        "memory_s": result.memory_s,
        "allreduce_s": result.allreduce_s,
        "overhead_s": result.overhead_s,
        "bound": result.bound,
        "running": result.running,
        "waiting": result.waiting,
        "blocked_by": result.blocked_by,
        "admitted": len(result.admitted),
        "preempted": len(result.preempted),
        "finished": len(result.finished),
        "kv_usage": kv_usage,
        "lag_s": result.lag_s,
    }


def request_times(req: SimRequest, *, clock_offset_s: float = 0.0) -> dict[str, float]:
    """A request's engine-side phase times as trace fields (wall clock via the offset)."""
    return {
        "arrival": req.arrival_s + clock_offset_s,
        "admission": req.admitted_s + clock_offset_s,
        "engine_first_token": req.first_token_s + clock_offset_s,
        "engine_finish": req.finished_s + clock_offset_s,
    }


def read_trace(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a trace file (for tests and the report)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
