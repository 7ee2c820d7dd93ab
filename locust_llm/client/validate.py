"""Checks of the ``--llm-*`` option values, run before any request is sent (pure).

:func:`check_options` refuses values the load test cannot run with (a time of 0, a length
distribution that does not parse, a negative count), each as one ``InputError``
naming the flag and what it expects. ``config.from_namespace`` calls it, so every process
(master, workers, a single process) checks the same options the same way; the data set's dry
pass and the stage plan are checked by ``lifecycle`` at start, where the user classes are known.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from locust_llm.errors import InputError
from locust_llm.roofline.devices import PLUGIN_FLAGS, DeviceArgs, check_tp
from locust_llm.workloads.distributions import parse_distribution

if TYPE_CHECKING:
    from locust_llm.client.config import ClientOptions


def _positive_seconds(flag: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"{flag} {value:g}: expected a number of seconds > 0")


def _at_least(flag: str, value: float, low: float, hint: str = "") -> None:
    if not (math.isfinite(value) and value >= low):
        raise InputError(f"{flag} {value:g}: expected >= {low:g}{hint}")


def roofline_device(opts: ClientOptions) -> DeviceArgs:
    """The device the ``--llm-roofline-*`` options describe (run.json's roofline entry)."""
    return DeviceArgs(
        opts.roofline_gpu, opts.roofline_bandwidth, opts.roofline_flops, opts.roofline_memory
    )


def check_options(opts: ClientOptions) -> None:
    """Raise InputError for the first option value the load test cannot run with."""
    for flag, seconds in (
        ("--llm-connect-timeout", opts.connect_timeout_s),
        ("--llm-read-timeout", opts.read_timeout_s),
        ("--llm-total-timeout", opts.total_timeout_s),
        ("--llm-record-batch-s", opts.record_batch_s),
        ("--llm-scrape-interval", opts.scrape_interval_s),
    ):
        _positive_seconds(flag, seconds)
    _at_least("--llm-warmup", opts.warmup_s, 0)
    _at_least("--llm-backoff-max", opts.backoff_max_s, 0, " (0: no back-off)")
    _at_least("--llm-temperature", opts.temperature, 0)
    _at_least("--llm-burstiness", opts.burstiness, 0, " (1 = Poisson)")  # 0: evenly spaced
    for flag, count in (
        ("--llm-server-instances", opts.server_instances),
        ("--llm-server-max-num-seqs", opts.server_max_num_seqs),
        ("--llm-max-users", opts.max_users),
        ("--llm-debug-requests", opts.debug_requests),
    ):
        _at_least(flag, count, 0)
    if opts.ca_bundle and not os.path.isfile(opts.ca_bundle):
        raise InputError(f"--llm-ca-bundle {opts.ca_bundle}: no such file (a PEM of CA certs)")
    roofline_device(opts).check(PLUGIN_FLAGS)
    check_tp(opts.roofline_tp, flags=PLUGIN_FLAGS, unset=0)
    if opts.max_tokens:
        parse_distribution(opts.max_tokens, what="--llm-max-tokens")
    if opts.input_len:
        parse_distribution(opts.input_len, what="--llm-input-len")
