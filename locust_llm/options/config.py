"""ClientOptions: the ``--llm-*`` options as one frozen, typed object, built once at the edge.

Locust hands every listener an untyped ``argparse.Namespace``; :func:`from_namespace` reads it
once through the option spec (:data:`locust_llm.options.table.OPTIONS`: each entry's reader
fills its field), runs every entry's check and the checks that span options
(:func:`check_options`), and returns a :class:`ClientOptions` that the rest of the client reads.
Pure: no Locust, no gevent. Defaults, help texts and checks live with the flags in
:mod:`locust_llm.options.table`; ``tests/test_options.py`` fails when a field and its entry
drift apart.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from locust_llm.options.table import OPTIONS, READ_TIMEOUT_DEFAULT_S, defaults
from locust_llm.roofline.devices import PLUGIN_FLAGS, DeviceArgs, check_tp

#: the longest SSE line or event read (``--llm-max-event-bytes``): an OpenAI chunk is a few
#: hundred bytes, a few KiB with top-20 logprobs, so 1 MiB leaves hundreds of times that; one
#: such line per user in flight stays small next to a worker's own ~100 MiB (docs/reliability.md)
MAX_EVENT_BYTES_DEFAULT = 1 << 20
#: the largest non-streamed body read (``--llm-max-body-bytes``): a long answer with logprobs or
#: a batch of embeddings is a few MiB; 64 MiB leaves room for them while a worker still holds
#: one such body (read, joined, parsed: a few times its size) per user in flight
MAX_BODY_BYTES_DEFAULT = 64 << 20

#: ClientOptions fields that hold Locust's own options; every other field is an ``--llm-*`` one
LOCUST_FIELDS = ("headless", "csv_prefix", "locustfile")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientOptions:
    """Everything the client reads from the command line: one field per ``--llm-*`` option
    (``--llm-X`` is field ``X`` unless its spec entry names another, e.g. ``read_timeout_s``).

    Lengths (``max_tokens``, ``input_len``) stay distribution strings such as ``uniform:128,512``
    ("" = not given); times are seconds; ``headers`` are the extra ``--llm-header`` pairs.
    """

    model: str = ""
    api_key: str = field(default="", repr=False)  # never printed, recorded or logged
    insecure: bool = False
    ca_bundle: str = ""  # PEM file of the CAs to trust (https)
    max_tokens: str = ""
    max_tokens_field: str = "max_tokens"
    input_len: str = ""
    dataset: str = "random"
    tokenizer: str = ""
    chat_template: str = ""  # --llm-chat-template (default: the one beside the tokenizer)
    temperature: float = 0.0
    ignore_eos: bool = False
    no_stream: bool = False
    max_event_bytes: int = MAX_EVENT_BYTES_DEFAULT  # the longest SSE line / event read
    max_body_bytes: int = MAX_BODY_BYTES_DEFAULT  # the largest non-streamed body read
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    connect_timeout_s: float = 10.0
    read_timeout_s: float = READ_TIMEOUT_DEFAULT_S
    total_timeout_s: float = 600.0
    backoff_max_s: float = 5.0  # cap of the per-user wait after connection errors
    run_dir: str = ""
    overwrite: bool = False  # reuse a run dir that holds an earlier run
    seed: int = 0
    share_prompts: bool = False  # the same prompt streams on every worker (prefix caching)
    request_id_header: bool = True  # send X-Request-Id (the record's UUID4)
    hosts: tuple[str, ...] = ()  # --llm-hosts (empty: the user class's / Locust's host)
    server_instances: int = 0
    server_max_num_seqs: int = 0
    server_max_num_batched_tokens: int = 0
    record_batch_s: float = 1.0
    debug_requests: int = 3
    transport: str = "auto"  # --llm-transport: auto, kernel, ghc (client/kernel_transport.py)
    preconnect: bool = False  # --llm-preconnect: each user's connections opened before its first
    # stages
    concurrency: str = ""
    stage_requests: str = ""
    stage_duration: str = ""
    warmup_s: float = 0.0
    soak: str = ""
    find_capacity: str = ""  # --llm-find-capacity: "" (fixed stages) or users
    capacity_slo: str = ""
    capacity_search: str = ""
    rate: str = ""
    burstiness: float = 1.0
    max_users: int = 0
    # telemetry and report context
    gpu_metrics: tuple[str, ...] = ()
    server_metrics: str = ""
    scrape_interval_s: float = 1.0
    roofline_model: str = ""
    roofline_gpu: str = ""
    roofline_bandwidth: str = ""  # a device by hand (with flops and memory), instead of gpu
    roofline_flops: str = ""
    roofline_memory: str = ""
    roofline_tp: int = 0  # tensor-parallel degree; 0: not given
    # Locust's own options the client reads
    headless: bool = False
    csv_prefix: str = ""
    locustfile: str = ""

    @property
    def stream(self) -> bool:
        return not self.no_stream

    @property
    def open_loop(self) -> bool:
        return bool(self.rate)

    @property
    def bearer_key(self) -> str:
        """The API key requests send: ``--llm-api-key``, else ``$OPENAI_API_KEY`` ("" = none)."""
        return self.api_key or os.environ.get("OPENAI_API_KEY", "")

    def roofline_device(self) -> DeviceArgs:
        """The device the ``--llm-roofline-*`` options describe (run.json's roofline entry)."""
        return DeviceArgs(
            self.roofline_gpu, self.roofline_bandwidth, self.roofline_flops, self.roofline_memory
        )

    def request_headers(self) -> dict[str, str]:
        """The HTTP headers of every request: JSON in, SSE out, the API key, the extras."""
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        api_key = self.bearer_key
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        headers.update(self.headers)
        return headers


def from_namespace(opts: Any) -> ClientOptions:
    """Read Locust's parsed options (None: every default) once, through the option spec, and
    check them (:func:`check_options`)."""
    if opts is None:
        opts = defaults()
    options = ClientOptions(
        **{option.field_name: option.value_of(opts) for option in OPTIONS},
        headless=bool(getattr(opts, "headless", False)),
        csv_prefix=str(getattr(opts, "csv_prefix", None) or ""),
        locustfile=str(getattr(opts, "locustfile", None) or ""),
    )
    check_options(options)
    return options


def check_options(options: ClientOptions) -> None:
    """Raise InputError for the first option value the load test cannot run with: each entry's
    own check, then the device the ``--llm-roofline-*`` options describe together."""
    for option in OPTIONS:
        if option.check is not None:
            option.check(option.flag, getattr(options, option.field_name))
    options.roofline_device().check(PLUGIN_FLAGS)
    check_tp(options.roofline_tp, flags=PLUGIN_FLAGS, unset=0)
