"""What Locust's single-user debug path prints per request, beside Locust's own line.

``python locustfiles/chat.py`` runs one user through Locust's ``run_single_user``: Locust prints
each request's response time and length only. In that mode (and only there) a listener on
``llm_events.request_done`` prints, per request, the figures of its record (TTFT, TPOT, tokens
in and out, E2E) and the answer's text, masked and cut to :data:`TEXT_LIMIT` characters
(:func:`debug_line`). Pure: no Locust.
"""

from __future__ import annotations

from locust_llm.client.redact import clip
from locust_llm.metrics import RequestRecord

#: characters of the answer's text a debug line shows
TEXT_LIMIT = 80


def _ms(seconds: float) -> str:
    return "-" if seconds != seconds else f"{seconds * 1e3:,.1f} ms"


def _tokens(count: int, estimated: bool) -> str:
    if count < 0:
        return "?"
    return f"~{count:,}" if estimated else f"{count:,}"


def shown_text(masked: str, limit: int = TEXT_LIMIT) -> tuple[str, bool]:
    """An answer's text (already masked) as a debug line shows it: a line break as ``\\n``,
    cut to ``limit`` characters (never inside a mask); and whether it was cut."""
    flat = masked.replace("\r", "\\r").replace("\n", "\\n")
    shown = clip(flat, limit)
    return shown, len(shown) < len(flat)


def debug_line(record: RequestRecord, text: str, *, cut: bool = False) -> str:
    """One request's line: ``locust-llm: TTFT 35.1 ms, TPOT 18.7 ms, tokens in 256 / out 64,
    E2E 1,215.0 ms: "the answer's start"...``, or its error. ``text``: as :func:`shown_text`
    gives it (``cut``: it goes on); ``~``: a count estimated, not the server's."""
    if not record.ok:
        return f"locust-llm: {record.endpoint} failed ({record.error_kind}): {record.error_message}"
    tokens_in = _tokens(record.input_tokens, record.input_tokens_estimated)
    tokens_out = _tokens(record.output_tokens, record.tokens_estimated)
    return (
        f"locust-llm: TTFT {_ms(record.ttft_s)}, TPOT {_ms(record.tpot_s)}, tokens in "
        f'{tokens_in} / out {tokens_out}, E2E {_ms(record.e2e_s)}: "{text}"{"..." if cut else ""}'
    )
