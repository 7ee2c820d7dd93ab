"""ClientOptions: the ``--llm-*`` options as one frozen, typed object, built once at the edge.

Locust hands every listener an untyped ``argparse.Namespace``; :func:`from_namespace` reads it
once, checks what needs checking (headers, extra body JSON, then every value through
:func:`locust_llm.client.validate.check_options`) and returns a :class:`ClientOptions` that the
rest of the client reads. Pure: no Locust, no gevent.
Defaults and help texts live with the flags in :mod:`locust_llm.client.options`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from locust_llm.errors import InputError

#: The output cap when neither the options nor the data set give one.
DEFAULT_MAX_TOKENS = 256


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientOptions:
    """Everything the client reads from the command line (``--llm-X`` is field ``X``).

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
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 120.0
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
    record_batch_s: float = 1.0
    debug_requests: int = 3
    transport: str = "auto"  # --llm-transport: auto, kernel, ghc (client/kernel_transport.py)
    # stages
    concurrency: str = ""
    stage_requests: str = ""
    stage_duration: str = ""
    warmup_s: float = 0.0
    soak: str = ""
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

    def request_headers(self) -> dict[str, str]:
        """The HTTP headers of every request: JSON in, SSE out, the API key, the extras."""
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        api_key = self.api_key or os.environ.get("OPENAI_API_KEY", "")
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        headers.update(self.headers)
        return headers


def from_namespace(opts: Any) -> ClientOptions:
    """Read Locust's parsed options (or :func:`locust_llm.client.options.defaults`) once."""
    if opts is None:
        from locust_llm.client.options import defaults

        opts = defaults()
    from locust_llm.client.validate import check_options

    burstiness = _number(opts.llm_burstiness, "--llm-burstiness")
    options = ClientOptions(
        model=str(opts.llm_model or ""),
        api_key=str(opts.llm_api_key or ""),
        insecure=bool(opts.llm_insecure),
        ca_bundle=str(getattr(opts, "llm_ca_bundle", "") or ""),
        max_tokens=str(opts.llm_max_tokens or ""),
        max_tokens_field=str(opts.llm_max_tokens_field),
        input_len=str(opts.llm_input_len or ""),
        dataset=str(opts.llm_dataset),
        tokenizer=str(opts.llm_tokenizer or ""),
        chat_template=str(opts.llm_chat_template or ""),
        temperature=float(opts.llm_temperature),
        ignore_eos=bool(opts.llm_ignore_eos),
        no_stream=bool(opts.llm_no_stream),
        extra_body=parse_extra_body(opts.llm_extra_body),
        headers=parse_headers(opts.llm_header or []),
        connect_timeout_s=float(opts.llm_connect_timeout),
        read_timeout_s=float(opts.llm_read_timeout),
        total_timeout_s=float(opts.llm_total_timeout),
        backoff_max_s=float(getattr(opts, "llm_backoff_max", 5.0)),
        run_dir=str(opts.llm_run_dir or ""),
        overwrite=bool(getattr(opts, "llm_overwrite", False)),
        seed=int(opts.llm_seed),
        share_prompts=bool(opts.llm_share_prompts),
        request_id_header=not opts.llm_no_request_id,
        hosts=split_hosts(opts.llm_hosts or ""),
        server_instances=int(opts.llm_server_instances or 0),
        server_max_num_seqs=int(opts.llm_server_max_num_seqs or 0),
        record_batch_s=float(opts.llm_record_batch_s),
        debug_requests=int(opts.llm_debug_requests),
        transport=str(getattr(opts, "llm_transport", "auto") or "auto"),
        concurrency=str(opts.llm_concurrency or ""),
        stage_requests=str(opts.llm_stage_requests or ""),
        stage_duration=str(opts.llm_stage_duration or ""),
        warmup_s=float(opts.llm_warmup),
        soak=str(opts.llm_soak or ""),
        rate=str(opts.llm_rate or ""),
        burstiness=burstiness,
        max_users=int(opts.llm_max_users or 0),
        gpu_metrics=tuple(opts.llm_gpu_metrics or ()),
        server_metrics=str(opts.llm_server_metrics or ""),
        scrape_interval_s=float(opts.llm_scrape_interval),
        roofline_model=str(opts.llm_roofline_model or ""),
        roofline_gpu=str(opts.llm_roofline_gpu or ""),
        roofline_bandwidth=str(getattr(opts, "llm_roofline_bandwidth", "") or ""),
        roofline_flops=str(getattr(opts, "llm_roofline_flops", "") or ""),
        roofline_memory=str(getattr(opts, "llm_roofline_memory", "") or ""),
        roofline_tp=int(getattr(opts, "llm_roofline_tp", 0) or 0),
        headless=bool(getattr(opts, "headless", False)),
        csv_prefix=str(getattr(opts, "csv_prefix", None) or ""),
        locustfile=str(getattr(opts, "locustfile", None) or ""),
    )
    check_options(options)
    return options


def _number(value: Any, flag: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InputError(f"{flag} {value!r}: expected a number") from None


def split_hosts(text: str) -> tuple[str, ...]:
    """``"http://a:1/, http://b:2"`` -> base URLs without trailing slashes."""
    return tuple(h.strip().rstrip("/") for h in text.split(",") if h.strip())


def parse_headers(values: list[str]) -> tuple[tuple[str, str], ...]:
    """``--llm-header 'Name: value'`` (repeatable) -> (name, value) pairs."""
    out = []
    for header in values:
        name, sep, value = header.partition(":")
        if not sep or not name.strip():
            raise InputError(f"--llm-header {header!r}: expected 'Name: value'")
        out.append((name.strip(), value.strip()))
    return tuple(out)


def parse_extra_body(text: str | None) -> dict[str, Any]:
    """``--llm-extra-body`` JSON -> a dict merged into every request body."""
    if not text:
        return {}
    try:
        extra = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"--llm-extra-body is not JSON: {exc}") from None
    if not isinstance(extra, dict):
        raise InputError("--llm-extra-body must be a JSON object")
    return extra
