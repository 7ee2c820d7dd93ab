"""The run dir's name and the first fill of its run.json: command line without secrets (pure).

:func:`masked_command_line` replaces the API key and every extra header's value with ``***``
(by flag, by value however the flag was abbreviated, and any argument that looks like a bearer
token), and a URL's credentials (``http://***@host``), so run.json, logs and reports never hold a
secret; run.json's hosts lose their credentials the same way. Warning texts the report reads
have stable codes in :mod:`locust_llm.rundir.layout` (``CPU_WARNINGS``).
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path

from locust_llm import __version__
from locust_llm.client.redact import Redactor, masked_url, secrets_of
from locust_llm.options.config import ClientOptions
from locust_llm.options.table import OPTIONS, by_name
from locust_llm.rundir.layout import RunInfo
from locust_llm.telemetry.batch_limit import run_info_extra

#: flags whose values are secret (the spec's secret options); a header keeps its name
_SECRET_FLAGS = tuple(option.flag for option in OPTIONS if option.secret)
_HEADER_FLAGS = (by_name("header").flag,)


def _probed_host(options: ClientOptions, hosts: Sequence[str]) -> str:
    """The server asked for its batch limit: none when server telemetry is off (``none``)."""
    if not hosts or options.server_metrics.strip().lower() == "none":
        return ""
    return hosts[0]


def masked_command_line(argv: list[str], secrets: Iterable[str] = ()) -> list[str]:
    """``argv`` with the API key and every extra header's value replaced by ``***``: by flag
    (exact spelling) and by value (``secrets``: whatever the flag was abbreviated to)."""
    redact = Redactor(secrets)
    return [redact(arg) for arg in _masked_by_flag(argv)]


def _masked_by_flag(argv: list[str]) -> list[str]:
    out: list[str] = []
    mask_next: str | None = None
    for arg in argv:
        if mask_next is not None:
            out.append(_masked(mask_next, arg))
            mask_next = None
            continue
        flag, eq, value = arg.partition("=")
        if flag in _SECRET_FLAGS:
            if eq:
                out.append(f"{flag}={_masked(flag, value)}")
            else:
                out.append(arg)
                mask_next = flag
        elif "bearer " in arg.lower() or arg.lower().startswith("authorization:"):
            out.append("***")
        else:
            out.append(arg)
    return out


def _masked(flag: str, value: str) -> str:
    if flag in _HEADER_FLAGS and ":" in value:
        return value.split(":", 1)[0] + ": ***"  # keep the header's name, not its value
    return "***"


def versions() -> dict[str, str]:
    """Versions of locust-llm, Locust (from its installed metadata) and Python."""
    try:
        locust_version = metadata.version("locust")
    except metadata.PackageNotFoundError:
        locust_version = ""
    return {"locust-llm": __version__, "locust": locust_version, "python": sys.version.split()[0]}


def new_run_info(
    options: ClientOptions, run_dir: Path, hosts: list[str], argv: list[str]
) -> RunInfo:
    """run.json as a run starts (stages, workers and the end come later)."""
    roofline = {
        "model": options.roofline_model,
        **options.roofline_device().entry(options.roofline_tp),
    }
    return RunInfo(
        run_id=run_dir.name,
        command=masked_command_line(list(argv), secrets_of(options, hosts)),
        versions=versions(),
        host=masked_url(hosts[0]) if hosts else "",
        hosts=[masked_url(host) for host in hosts],
        model=options.model,
        start_wall_s=time.time(),
        mode="open" if options.open_loop else "closed",
        roofline={k: v for k, v in roofline.items() if v},
        server_instances=options.server_instances or max(len(hosts), 1),
        extra={
            "machine": socket.gethostname(),
            **run_info_extra(options.server_max_num_seqs, _probed_host(options, hosts)),
            **(
                {"max_num_batched_tokens": options.server_max_num_batched_tokens}
                if options.server_max_num_batched_tokens
                else {}
            ),
        },
    )
