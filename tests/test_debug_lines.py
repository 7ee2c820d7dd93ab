"""The debug path's per-request line (locust_llm/client/debug_lines.py): figures, a failure,
the answer masked, on one line and cut (the run itself: tests/test_client_locust.py)."""

from __future__ import annotations

from locust_llm.client.debug_lines import TEXT_LIMIT, debug_line, shown_text
from locust_llm.client.redact import MASK, Redactor
from locust_llm.metrics import RequestRecord


def test_a_line_holds_the_record_s_figures_and_the_text() -> None:
    record = RequestRecord(request_id="r", endpoint="/v1/chat/completions", ok=True,
                           ttft_s=0.0351, tpot_s=0.0187, e2e_s=1.215, input_tokens=256,
                           output_tokens=64, tokens_estimated=True)  # fmt: skip
    text, cut = shown_text("Hello\nworld")
    assert (text, cut) == ("Hello\\nworld", False)
    assert debug_line(record, text, cut=cut) == (
        "locust-llm: TTFT 35.1 ms, TPOT 18.7 ms, tokens in 256 / out ~64, E2E 1,215.0 ms: "
        '"Hello\\nworld"'
    )


def test_a_long_answer_is_cut_never_inside_a_mask_and_a_failure_says_why() -> None:
    secret = "sk-abcdefghijklmnop"
    masked = Redactor([secret])("x" * (TEXT_LIMIT - 2) + secret + " more")
    text, cut = shown_text(masked)
    assert cut and secret not in text and not text.endswith(MASK[:2]) and len(text) <= TEXT_LIMIT
    failed = RequestRecord(request_id="r", endpoint="/v1/completions", error_kind="http_5xx",
                           error_message="HTTP 500: boom")  # fmt: skip
    assert debug_line(failed, "") == "locust-llm: /v1/completions failed (http_5xx): HTTP 500: boom"
