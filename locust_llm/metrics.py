"""The one definition of every per-request LLM metric, and the record that carries them.

Pure: no I/O, no Locust. ``user.py`` collects raw timestamps while a stream is read and calls
:func:`summarize_stream` once, when the stream ends; everything downstream (live histograms,
the run dir, the report) reads the resulting :class:`RequestRecord`.

Definitions (the docs state them the same way):

- ``t0``: ``perf_counter()`` just before the request is written (before the connect, when the
  connection is new); ``time.time()`` is kept beside it.
- **send delay** = ``sent_s``: when the final send of the request returned (its last byte in
  the kernel) - ``t0``: the connect and the worker's own delay before the bytes left.
- **TTFT** = first chunk that carries generated text (content or reasoning) - ``t0``;
  reasoning models also get **TTFR** (first reasoning chunk) and **TTFC** (first answer chunk).
- **E2E** = end of stream (``[DONE]`` or close) - ``t0``.
- **output_tokens** = ``usage.completion_tokens``; when the server gives none, the number of
  token-bearing chunks, and the record is flagged ``tokens_estimated``.
- **TPOT** = (t_last_token - t_first_token) / (output_tokens - 1), only when output_tokens > 1.
  vLLM's and EvalScope's TPOT; GuideLLM and AIPerf call the same quantity "ITL".
- **ITL** = gaps between consecutive token-bearing chunks, each divided by the tokens the later
  chunk carries (known per chunk from ``continuous_usage_stats``; otherwise the stream's average
  tokens per later chunk); weighted by those tokens, so the token-weighted mean ITL equals TPOT
  whenever the first chunk carries one token.
- **error rate** = failed / (failed + completed); every failure has one of :data:`ERROR_KINDS`.

Undefined values are ``nan`` (never 0): a one-token answer has no TPOT, a failed request no TTFT.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields

NAN = float("nan")

#: Every failure is exactly one of these kinds.
ERROR_KINDS: tuple[str, ...] = (
    "http_4xx",  # any 4xx but 429
    "http_429",  # rate limited
    "http_5xx",  # any 5xx that is not an out-of-memory report
    "timeout",  # connect/read/total timeout of the client
    "connect",  # connection refused/reset before a response
    "stream_broken",  # stream closed without [DONE], or cut mid-chunk
    "bad_payload",  # a chunk that is not valid JSON / not the OpenAI shape
    "oom",  # the server says it ran out of (GPU) memory
    "cancelled",  # stopped by the load test itself (not the server's fault; not in error rates)
    "client_error",  # a bug in locust-llm itself (message: the exception type); not the server's
)

#: Kinds that are the load test's own doing, never the server's: left out of error rates and
#: shown apart.
CLIENT_SIDE_KINDS: tuple[str, ...] = ("cancelled", "client_error")

#: The kinds that count as the server's failures (error rates).
FAILURE_KINDS: tuple[str, ...] = tuple(k for k in ERROR_KINDS if k not in CLIENT_SIDE_KINDS)

_OOM = re.compile(r"\b(?:out of memory|outofmemory\w*|oom)\b")


def classify_http_error(status: int, body: str = "") -> str:
    """The error kind of an HTTP error response (``status`` >= 400)."""
    text = body.lower()
    if _OOM.search(text):
        return "oom"
    if status == 429:
        return "http_429"
    if 400 <= status < 500:
        return "http_4xx"
    return "http_5xx"


@dataclass(slots=True)
class RequestRecord:
    """Everything known about one request; exactly one record per request sent.

    Times ending in ``_s`` are seconds; ``*_wall_s`` are Unix wall-clock stamps, the others are
    offsets from ``t0`` (perf_counter based) or durations.
    """

    request_id: str
    endpoint: str
    model: str = ""
    worker_id: str = "local"
    user_id: int = 0
    stage: int = -1  # stage index current when the request was sent (-1: no stages)
    start_wall_s: float = NAN  # time.time() at t0
    scheduled_wall_s: float = NAN  # open loop: when it was due to be sent
    ok: bool = False
    status_code: int = 0
    error_kind: str = ""  # one of ERROR_KINDS when not ok
    error_message: str = ""
    # when the request's last byte was handed to the kernel (the final send's return), offset
    # from t0: the send-side delay (connect, the worker's own wait); nan where the transport
    # does not say (geventhttpclient, the virtual users)
    sent_s: float = NAN
    ttft_s: float = NAN  # first generated token (content or reasoning)
    ttfc_s: float = NAN  # first content token (excluding reasoning)
    e2e_s: float = NAN
    first_token_s: float = NAN  # offset of the first token-bearing chunk from t0 (= ttft_s)
    last_token_s: float = NAN  # offset of the last token-bearing chunk from t0
    # the first and last token's two stamps (offsets from t0): when the kernel received the
    # bytes (nan unless the kernel transport read them) and when Python read the line; their
    # difference is the client's own delay (report/client_delay.py)
    first_token_kernel_s: float = NAN
    last_token_kernel_s: float = NAN
    first_token_user_s: float = NAN
    last_token_user_s: float = NAN
    # the first token's read also carried the next token (kernel stamps only): the reader came
    # after the next token's bytes arrived and the stamp is theirs (the kernel keeps the latest
    # segment's), so first_token_kernel_s is an upper bound (docs/timing.md)
    first_token_merged: bool = False
    # how much earlier than first_token_kernel_s the first token can have arrived: 0 where its
    # stamp is its own segment's (not merged); where merged, the stamp minus the latest time
    # the reader knew the socket held none of its bytes (the TTFT lies in [ttft_s - bound,
    # ttft_s]); nan without kernel stamps or where that time is unknown
    ttft_error_bound_s: float = NAN
    tpot_s: float = NAN
    itl_mean_s: float = NAN
    itl_p50_s: float = NAN
    itl_p99_s: float = NAN
    itl_max_s: float = NAN
    chunks: int = 0  # token-bearing chunks received
    input_tokens: int = -1  # -1: unknown
    output_tokens: int = 0
    reasoning_tokens: int = 0
    tokens_estimated: bool = False  # output_tokens counted from chunks, not the server's usage
    input_tokens_estimated: bool = False
    cached_tokens: int = -1  # usage.prompt_tokens_details.cached_tokens (-1: not reported)
    ttfr_s: float = NAN  # first reasoning token (nan: the answer had no reasoning chunk)
    session_id: str = ""  # multi-turn sessions: the conversation ("" for single requests)
    turn: int = -1  # the turn's index in its session, from 0 (-1: not a session)
    trace_line: int = -1  # trace replay: the line's index in the trace (-1: not a replay)
    batch_inputs: int = 1  # inputs in the request (an embeddings batch; 1 for generation)

    @property
    def dispatch_delay_s(self) -> float:
        """Open loop: how late the request was sent against its schedule (nan in closed loop)."""
        return self.start_wall_s - self.scheduled_wall_s

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


#: Column names of a record, in order (the requests.parquet schema).
RECORD_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RequestRecord))

# Positions in a record row (a tuple in RECORD_FIELDS order) of the columns the live paths read
# per record (the recorder, the stage tally, the capacity planner): plain module constants,
# declared once here, so that path indexes a tuple and looks nothing up by name.
COL_STAGE = RECORD_FIELDS.index("stage")
COL_START = RECORD_FIELDS.index("start_wall_s")
COL_SCHEDULED = RECORD_FIELDS.index("scheduled_wall_s")
COL_E2E = RECORD_FIELDS.index("e2e_s")
COL_OK = RECORD_FIELDS.index("ok")
COL_KIND = RECORD_FIELDS.index("error_kind")
COL_TTFT = RECORD_FIELDS.index("ttft_s")
COL_TPOT = RECORD_FIELDS.index("tpot_s")
COL_OUT = RECORD_FIELDS.index("output_tokens")
COL_TRACE_LINE = RECORD_FIELDS.index("trace_line")


@dataclass(slots=True)
class StreamTiming:
    """Raw timestamps gathered while one stream is read (all perf_counter seconds).

    ``chunk_times`` / ``chunk_tokens`` hold one entry per token-bearing chunk; ``chunk_tokens``
    entries are 0 where the chunk's own token count is unknown.
    """

    t0: float
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    first_content_time: float = NAN
    first_reasoning_time: float = NAN
    end_time: float = NAN
    stamped: bool = False  # chunk_times are kernel receive stamps (else user-space reads)
    sent_time: float = NAN  # when the request's final send returned
    first_user_time: float = NAN  # when Python read the first / last token's line
    # kernel stamps: the earliest the first token's bytes can have arrived (the socket was
    # last known empty then)
    first_earliest_time: float = NAN
    last_user_time: float = NAN
    # filled by summarize_stream: per-token ITL samples and their weights (for the live stats)
    itl_values: list[float] = field(default_factory=list)
    itl_weights: list[float] = field(default_factory=list)


def weighted_quantile(values: Sequence[float], weights: Sequence[float], q: float) -> float:
    """Quantile ``q`` (0..1) of ``values`` weighted by ``weights``.

    With equal weights it equals numpy's default (linear interpolation between order
    statistics); with unequal weights it is the inverted CDF: the smallest value whose
    cumulative weight reaches ``q`` of the total.
    """
    if not values:
        return NAN
    pairs = sorted(zip(values, weights, strict=True))
    total = sum(w for _, w in pairs)
    if total <= 0:
        return NAN
    if all(w == pairs[0][1] for _, w in pairs):
        return _linear_quantile([v for v, _ in pairs], q)
    # unequal weights: inverted CDF (the smallest value whose cumulative weight reaches q)
    need = q * total
    cum = 0.0
    for value, w in pairs:
        cum += w
        if cum >= need:
            return value
    return pairs[-1][0]


def itl_samples(
    chunk_times: Sequence[float], chunk_tokens: Sequence[int], output_tokens: int
) -> tuple[list[float], list[float]]:
    """Per-token ITL samples and their weights (tokens) from token-bearing chunk times.

    Each gap between consecutive chunks is divided by the tokens the later chunk carries. When a
    chunk's own count is unknown (0), the stream's average tokens per later chunk is used:
    (output_tokens - tokens of the first chunk) / (chunks - 1), which makes the weighted mean
    equal TPOT.
    """
    n = len(chunk_times)
    if n < 2:
        return [], []
    known = all(t > 0 for t in chunk_tokens) and len(chunk_tokens) == n
    if known:
        weights = [float(t) for t in chunk_tokens[1:]]
    else:
        first = chunk_tokens[0] if chunk_tokens and chunk_tokens[0] > 0 else 1
        later = max(output_tokens - first, n - 1) if output_tokens > 0 else n - 1
        weights = [later / (n - 1)] * (n - 1)
    gaps = [chunk_times[i] - chunk_times[i - 1] for i in range(1, n)]
    return [g / w for g, w in zip(gaps, weights, strict=True)], weights


def summarize_stream(
    record: RequestRecord, timing: StreamTiming, usage_completion_tokens: int | None
) -> RequestRecord:
    """Fill ``record``'s timing and token fields from a finished stream; returns ``record``.

    Does not touch ``ok``/``error_kind``: the caller decides success (a stream without
    ``[DONE]`` is ``stream_broken`` even if it carried tokens).
    """
    times = timing.chunk_times
    record.chunks = len(times)
    if usage_completion_tokens is not None and usage_completion_tokens >= 0:
        record.output_tokens = int(usage_completion_tokens)
        record.tokens_estimated = False
    else:
        known = sum(timing.chunk_tokens)
        record.output_tokens = known if known >= len(times) else len(times)
        record.tokens_estimated = True
    if timing.sent_time == timing.sent_time:  # not nan
        record.sent_s = timing.sent_time - timing.t0
    if not math.isnan(timing.end_time):
        record.e2e_s = timing.end_time - timing.t0
    if times:
        record.first_token_s = record.ttft_s = times[0] - timing.t0
        record.last_token_s = times[-1] - timing.t0
        if timing.stamped:
            record.first_token_kernel_s = record.first_token_s
            record.last_token_kernel_s = record.last_token_s
            # one read's lines share its stamp exactly; two reads never do
            merged = record.first_token_merged = len(times) >= 2 and times[1] == times[0]
            bound = times[0] - timing.first_earliest_time if merged else 0.0
            record.ttft_error_bound_s = max(bound, 0.0) if bound == bound else NAN
        user_first, user_last = timing.first_user_time, timing.last_user_time
        if user_first != user_first:  # nan: no separate user stamps, the chunk times are them
            user_first, user_last = times[0], times[-1]
        record.first_token_user_s = user_first - timing.t0
        record.last_token_user_s = user_last - timing.t0
    if not math.isnan(timing.first_content_time):
        record.ttfc_s = timing.first_content_time - timing.t0
    if not math.isnan(timing.first_reasoning_time):
        record.ttfr_s = timing.first_reasoning_time - timing.t0
    if record.output_tokens > 1 and len(times) >= 2:
        record.tpot_s = (times[-1] - times[0]) / (record.output_tokens - 1)
    values, weights = itl_samples(times, timing.chunk_tokens, record.output_tokens)
    timing.itl_values, timing.itl_weights = values, weights
    if values:
        total = sum(weights)
        record.itl_mean_s = sum(map(operator.mul, values, weights)) / total
        if weights.count(weights[0]) == len(weights):  # equal weights: one sort, numpy's rule
            ordered = sorted(values)
            record.itl_p50_s = _linear_quantile(ordered, 0.5)
            record.itl_p99_s = _linear_quantile(ordered, 0.99)
            record.itl_max_s = ordered[-1]
        else:
            record.itl_p50_s = weighted_quantile(values, weights, 0.5)
            record.itl_p99_s = weighted_quantile(values, weights, 0.99)
            record.itl_max_s = max(values)
    return record


def _linear_quantile(ordered: Sequence[float], q: float) -> float:
    """numpy's default quantile of already sorted values."""
    rank = q * (len(ordered) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)
