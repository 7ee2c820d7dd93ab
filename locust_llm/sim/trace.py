"""Ground truth: one JSON line per request, written when the request ends.

Fields (wall clock, ``time.time()`` seconds): ``id``, ``client_request_id`` (the request's
``X-Request-Id`` header, "" without one: locust-llm sends its record's id there),
``endpoint``, ``stream``, ``arrival``, ``admission`` (first admission to the batch; null if
never admitted), ``first_token`` and ``last_token`` (the moment the chunk's bytes were handed
to the transport; null if none), ``prompt_tokens``, ``tokens_sent``, ``preemptions``,
``outcome`` (``ok``, ``oom``, ``aborted`` = client went away, ``rejected`` = 4xx,
``fault:KIND``) and ``status`` (HTTP).
The file is line-buffered, so every finished request is on disk at once and nothing is lost
when the server stops.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import IO, Any

from locust_llm.errors import InputError


class TraceWriter:
    """Appends one JSON object per line to ``path`` (created or truncated on open)."""

    def __init__(self, path: str | Path) -> None:
        try:
            self._file: IO[str] | None = open(path, "w", buffering=1, encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            raise InputError(f"--trace: cannot write {path} ({exc.strerror or exc})") from None
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


def read_trace(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a trace file (for tests and the report)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
