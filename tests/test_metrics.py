"""The metric definitions: TTFT, TPOT, ITL (per token), E2E, estimated tokens, error kinds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from locust_llm.metrics import (
    ERROR_KINDS,
    RECORD_FIELDS,
    RequestRecord,
    StreamTiming,
    classify_http_error,
    itl_samples,
    summarize_stream,
    weighted_quantile,
)  # fmt: skip


def _record() -> RequestRecord:
    return RequestRecord(request_id="r", endpoint="/v1/chat/completions")


def test_definitions_with_usage() -> None:
    t = StreamTiming(
        t0=10.0,
        chunk_times=[10.1, 10.2, 10.4],
        chunk_tokens=[0, 0, 0],
        first_content_time=10.2,
        end_time=10.5,
    )
    r = summarize_stream(_record(), t, usage_completion_tokens=5)
    assert r.ttft_s == pytest.approx(0.1) and r.ttfc_s == pytest.approx(0.2)
    assert r.e2e_s == pytest.approx(0.5) and r.last_token_s == pytest.approx(0.4)
    assert r.output_tokens == 5 and not r.tokens_estimated
    assert r.tpot_s == pytest.approx(0.3 / 4)  # (last - first) / (tokens - 1)
    # 3 chunks carry 5 tokens: the 2 gaps are split over the 4 later tokens, 2 per gap
    assert r.itl_mean_s == pytest.approx(r.tpot_s)
    assert r.itl_max_s == pytest.approx(0.2 / 2)


def test_without_usage_tokens_are_estimated_from_chunks() -> None:
    t = StreamTiming(t0=0.0, chunk_times=[1.0, 2.0], chunk_tokens=[0, 0], end_time=2.5)
    r = summarize_stream(_record(), t, usage_completion_tokens=None)
    assert r.output_tokens == 2 and r.tokens_estimated and r.tpot_s == pytest.approx(1.0)


def test_undefined_is_nan_not_zero() -> None:
    one = summarize_stream(
        _record(), StreamTiming(t0=0.0, chunk_times=[0.2], chunk_tokens=[0], end_time=0.3), 1
    )
    assert (
        math.isnan(one.tpot_s) and math.isnan(one.itl_mean_s) and one.ttft_s == pytest.approx(0.2)
    )
    none = summarize_stream(_record(), StreamTiming(t0=0.0, end_time=0.3), 0)
    assert math.isnan(none.ttft_s) and none.output_tokens == 0


def test_itl_with_known_chunk_tokens_is_token_weighted() -> None:
    values, weights = itl_samples([0.0, 0.1, 0.4], [1, 1, 3], output_tokens=5)
    assert values == pytest.approx([0.1, 0.1]) and weights == [1.0, 3.0]
    values, weights = itl_samples([0.0, 0.1, 0.2], [0, 0, 0], output_tokens=3)
    assert values == pytest.approx([0.1, 0.1]) and weights == [1.0, 1.0]


def test_weighted_quantile_equal_weights_is_numpy() -> None:
    rng = np.random.default_rng(1)
    xs = list(rng.exponential(size=101))
    for q in (0.0, 0.5, 0.9, 0.99, 1.0):
        assert weighted_quantile(xs, [1.0] * len(xs), q) == pytest.approx(np.quantile(xs, q))
    assert weighted_quantile([1.0, 2.0], [1.0, 9.0], 0.5) == 2.0
    assert math.isnan(weighted_quantile([], [], 0.5))


@pytest.mark.parametrize(("status", "body", "kind"), [
    (429, "", "http_429"), (404, "model not found", "http_4xx"), (503, "busy", "http_5xx"),
    (500, '{"error": {"message": "CUDA out of memory. Tried to allocate"}}', "oom"),
    (500, "torch.OutOfMemoryError: ...", "oom"), (500, "engine OOM, aborted", "oom"),
    (404, "The model `bigscience/bloom-560m` does not exist", "http_4xx"),
    (400, "no room left in the context", "http_4xx"),
])  # fmt: skip
def test_classify_http_error(status: int, body: str, kind: str) -> None:
    assert classify_http_error(status, body) == kind
    assert kind in ERROR_KINDS


def test_record_schema() -> None:
    assert RECORD_FIELDS[0] == "request_id" and "tpot_s" in RECORD_FIELDS
    r = _record()
    assert math.isnan(r.dispatch_delay_s)
