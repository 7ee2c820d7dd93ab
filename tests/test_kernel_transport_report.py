"""The report's client delay per stage (report/client_delay.py) and the verdict's use of it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from locust_llm.report.diagnosis.client_delay import (
    add_client_delay,
    delay_caveats,
    send_caveats,
)
from locust_llm.report.diagnosis.thresholds import DEFAULT_THRESHOLDS
from locust_llm.report.diagnosis.verdict import stage_verdict
from locust_llm.rundir.layout import Stage

BOUND_S = DEFAULT_THRESHOLDS.client_delay_bound_s

STAGES = [Stage(0, "c1", 0.0, 10.0, concurrency=1), Stage(1, "c2", 10.0, 20.0, concurrency=2)]


def _records(delays_s: list[float], starts: list[float], kernel: bool = True) -> pd.DataFrame:
    first_kernel = np.full(len(delays_s), 0.05 if kernel else np.nan)
    return pd.DataFrame(
        {
            "start_wall_s": starts,
            "ok": [True] * len(starts),
            "first_token_kernel_s": first_kernel,
            "first_token_user_s": 0.05 + np.array(delays_s),
            "last_token_kernel_s": first_kernel + 1.0,
            "last_token_user_s": 1.05 + np.array(delays_s) / 2,
        }
    )


def test_each_stage_gets_the_distribution_of_its_own_records() -> None:
    delays = [0.001] * 50 + [0.020] * 50
    starts = [1.0] * 50 + [11.0] * 50
    rows: list[dict] = [{"stage": 0}, {"stage": 1}]
    add_client_delay(rows, _records(delays, starts), STAGES, 20.0)
    assert rows[0]["client_delay_stamped"] == 50
    assert math.isclose(rows[0]["client_delay_first_p99_s"], 0.001)
    assert math.isclose(rows[1]["client_delay_first_p50_s"], 0.020)
    assert math.isclose(rows[1]["client_delay_last_max_s"], 0.010)


def test_without_kernel_stamps_the_columns_are_nan_and_the_rule_is_silent() -> None:
    rows: list[dict] = [{"stage": 0}, {"stage": 1}]
    add_client_delay(rows, _records([0.5] * 4, [1.0, 1.0, 11.0, 11.0], kernel=False), STAGES, 20)
    assert rows[0]["client_delay_stamped"] == 0
    assert math.isnan(rows[0]["client_delay_first_p99_s"])


def test_client_bound_fires_on_client_delay_and_only_above_the_bound() -> None:
    base = {"stage": 0, "concurrency": 64, "requests": 500, "error_rate": 0.0}
    late = stage_verdict({**base, "client_delay_first_p99_s": BOUND_S * 2})
    assert late.kind == "client_bound"
    assert "after the kernel received them" in late.evidence[0]
    in_time = stage_verdict({**base, "client_delay_first_p99_s": BOUND_S / 4})
    assert in_time.kind != "client_bound"


def test_one_late_read_is_a_hiccup_not_a_client_bound_stage() -> None:
    """Twelve requests, one read 12 ms late (the p99 of 12 is nearly the max): the stage's
    verdict is not client_bound; two late reads make it so."""
    base = {"stage": 0, "concurrency": 4, "requests": 12, "error_rate": 0.0}
    rows: list[dict] = [{"stage": 0}, {"stage": 1}]
    add_client_delay(rows, _records([0.001, 0.012, 0.001, 0.001], [1.0] * 4), STAGES, 20)
    assert rows[0]["client_delay_first_late"] == 1 < DEFAULT_THRESHOLDS.client_delay_min_late
    one = stage_verdict({**base, "client_delay_first_p99_s": 0.012, "client_delay_first_late": 1})
    assert one.kind != "client_bound"
    two = stage_verdict({**base, "client_delay_first_p99_s": 0.012, "client_delay_first_late": 2})
    assert two.kind == "client_bound" and "2 requests" in two.evidence[0]


def test_late_reads_beside_a_standing_server_queue_leave_the_stage_to_the_server() -> None:
    """8 users on 4 slots: 4 run, 4 wait. Reads 30 ms late blur the timings, but the server is
    offered more than it takes: the stage is not client-bound."""
    base = {"stage": 0, "concurrency": 8, "requests": 32, "error_rate": 0.0,
            "client_delay_first_p99_s": 0.030, "client_delay_first_late": 2}  # fmt: skip
    queued = stage_verdict({**base, "running": 4.0, "waiting": 4.0})
    assert queued.kind != "client_bound"
    assert stage_verdict({**base, "running": 4.0, "waiting": 0.0}).kind == "client_bound"


def test_merged_first_tokens_are_counted_per_stage_and_unknown_without_the_column() -> None:
    starts = [1.0] * 4 + [11.0] * 4
    records = _records([0.001] * 8, starts)
    rows: list[dict] = [{"stage": 0}, {"stage": 1}]
    add_client_delay(rows, records, STAGES, 20.0)  # a run from before the flag: not known
    assert math.isnan(rows[0]["client_delay_first_merged"])
    records["first_token_merged"] = [True, False, False, False, True, True, False, False]
    add_client_delay(rows, records, STAGES, 20.0)
    assert [r["client_delay_first_merged"] for r in rows] == [1, 2]
    # each stage's largest TTFT error bound (0 for the unmerged; nan before the column)
    assert math.isnan(rows[0]["ttft_error_bound_max_s"])
    records["ttft_error_bound_s"] = [0.012, 0.0, 0.0, 0.0, 0.003, 0.02, 0.0, np.nan]
    add_client_delay(rows, records, STAGES, 20.0)
    assert [r["ttft_error_bound_max_s"] for r in rows] == [0.012, 0.02]
    assert math.isclose(rows[1]["ttft_error_bound_p99_s"], np.percentile([0.003, 0.02, 0], 99))


def test_late_reads_beside_a_long_ttft_are_a_caveat_not_the_stage_s_limit() -> None:
    """27 ms of read delay beside a 2.7 s TTFT (a busy host under the demo): the stage keeps
    the server's verdict and the report warns of the delay with its share of TTFT; the same
    delay beside a 40 ms TTFT dominates it and makes the stage client-bound."""
    base = {"stage": 0, "concurrency": 64, "requests": 500, "error_rate": 0.0,
            "client_delay_first_p99_s": 0.027, "client_delay_first_late": 2}  # fmt: skip
    long = {**base, "ttft_p50_s": 2.7}
    assert stage_verdict(long).kind != "client_bound"
    (caveat,) = delay_caveats([long], [stage_verdict(long).kind])
    assert "up to 27.0 ms" in caveat and "1% of TTFT P50 2,700 ms" in caveat
    short = {**base, "ttft_p50_s": 0.040}
    assert stage_verdict(short).kind == "client_bound"
    assert delay_caveats([short], ["client_bound"]) == []


def test_a_few_late_reads_beside_prompt_reads_are_a_host_hiccup_not_the_limit() -> None:
    """Open loop at 12/s on a host whose cores other processes spin on (the verdict benchmark's
    loaded-host runs): 2 of 55 first tokens read 116 ms late, the median 1 ms, TTFT P50 210 ms.
    The p99 exceeds half the TTFT, but the typical request is not delayed: a caveat, and the
    stage keeps the server's verdict; the same p99 with a 150 ms median is the client's limit."""
    base = {"stage": 0, "concurrency": 64, "requests": 55, "error_rate": 0.0,
            "client_delay_first_p99_s": 0.116, "client_delay_first_late": 2,
            "client_delay_first_p50_s": 0.001, "ttft_p50_s": 0.210}  # fmt: skip
    assert stage_verdict(base).kind != "client_bound"
    (caveat,) = delay_caveats([base], [stage_verdict(base).kind])
    assert "up to 116.0 ms" in caveat
    behind = {**base, "client_delay_first_p50_s": 0.150}
    assert stage_verdict(behind).kind == "client_bound"


def test_the_send_delay_is_summarized_per_stage_and_nan_without_the_column() -> None:
    starts = [1.0] * 4 + [11.0] * 4
    records = _records([0.001] * 8, starts)
    rows: list[dict] = [{"stage": 0}, {"stage": 1}]
    add_client_delay(rows, records, STAGES, 20.0)  # a run from before the send stamp
    assert math.isnan(rows[0]["send_delay_p50_s"]) and math.isnan(rows[1]["send_delay_max_s"])
    records["sent_s"] = [0.001, 0.002, 0.003, 0.004, 0.010, 0.020, 0.030, np.nan]
    add_client_delay(rows, records, STAGES, 20.0)
    assert math.isclose(rows[0]["send_delay_p50_s"], 0.0025)
    assert math.isclose(rows[0]["send_delay_max_s"], 0.004)
    assert math.isclose(rows[1]["send_delay_p50_s"], 0.020)  # the nan is left out


def test_sends_that_left_late_beside_a_short_ttft_are_a_caveat_with_their_share() -> None:
    """A burst's requests left the client a median 57 ms after their start stamps (the quiet
    host's 256-user burst without --llm-preconnect, bench/results/send_side.md) beside a TTFT
    P50 of 140 ms: a caveat naming the share and the option that takes connects out. The same
    delay beside a 2 s TTFT, a sub-millisecond one (preconnected), a stage without send stamps
    and a stage whose host was contended (its own caveat says why) get none."""
    burst = {"stage": 3, "send_delay_p50_s": 0.057, "send_delay_p99_s": 0.081,
             "ttft_p50_s": 0.140}  # fmt: skip
    (caveat,) = send_caveats([burst])
    assert caveat.startswith("stage 3: requests left the client a median 57.0 ms")
    assert "41% of TTFT P50 140 ms, P99 81.0 ms" in caveat and "--llm-preconnect" in caveat
    assert send_caveats([{**burst, "ttft_p50_s": 2.0}]) == []  # 3%: under the share
    assert send_caveats([{**burst, "send_delay_p50_s": 0.00001}]) == []
    assert send_caveats([{"stage": 0, "ttft_p50_s": 0.140}]) == []  # no send stamps (nan)
    contended = {**burst, "worker_cpu_demand_max": 1.0, "worker_cpu_max": 0.5}
    assert send_caveats([contended]) == []
