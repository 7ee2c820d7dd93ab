"""``locust-llm gpu-exporter`` (also ``locust-llm-gpu-exporter``): serve GPU and host metrics.

Builds the registered source ``--source`` names (:mod:`locust_llm.gpu.registry`: ``nvml``,
``fake``, ``replay``; an unknown name is an error listing them), adds host CPU and memory,
registers one :class:`GpuCollector` on a fresh registry and serves ``/metrics`` until
interrupted. The first
stdout line is the URL (flushed), so scripts can start it on ``--port 0`` and read the port.
Without an NVIDIA driver ``--source nvml`` is a one-line error (exit 2) naming ``--source fake``.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from locust_llm.errors import InputError
from locust_llm.gpu import registry as sources
from locust_llm.gpu.source import GpuSource

DEFAULT_PORT = 9400


def configure_gpu_exporter_parser(parser: argparse.ArgumentParser) -> None:
    """Add the exporter's flags to ``parser``."""
    parser.add_argument(
        "--source",
        default="nvml",
        metavar="NAME",
        help="where readings come from: "
        + "; ".join(f"{e.name}: {e.summary}" for e in sources.registered_sources())
        + " (default: nvml)",
    )
    parser.add_argument(
        "--bind",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; 0.0.0.0 in containers)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port to listen on (default {DEFAULT_PORT}; 0 = any free port)",
    )
    parser.add_argument(
        "--fake-gpus",
        type=int,
        default=1,
        metavar="N",
        help="--source fake: number of fake GPUs (default 1)",
    )
    parser.add_argument(
        "--fake-profile",
        default="idle:5,compute:10,copy:5",
        metavar="PHASE:S,...",
        help="--source fake: looping phases idle/compute/copy with seconds "
        "(default idle:5,compute:10,copy:5)",
    )
    parser.add_argument(
        "--fake-no-gpm",
        action="store_true",
        help="--source fake: act like a pre-Hopper GPU (no GPM metrics)",
    )
    parser.add_argument(
        "--replay-file",
        metavar="CSV",
        help="--source replay: recorded timeline (see docs/gpu-exporter.md)",
    )
    parser.add_argument(
        "--replay-loop",
        action="store_true",
        help="--source replay: repeat the timeline instead of holding its end",
    )
    parser.add_argument(
        "--no-host", action="store_true", help="leave out host CPU and memory metrics"
    )
    parser.add_argument(
        "--once", action="store_true", help="print one scrape in Prometheus text format and exit"
    )


def build_source(args: argparse.Namespace, *, nvml: Any = None) -> GpuSource:
    """The registered source ``args.source`` names (:mod:`locust_llm.gpu.registry`); ``nvml``
    replaces ``pynvml`` (tests)."""
    if args.port < 0 or args.port > 65535:
        raise InputError(f"--port: expected 0..65535, got {args.port}")
    return sources.build_source(args.source, args, nvml=nvml)


def run_gpu_exporter(args: argparse.Namespace, *, nvml: Any = None) -> int:
    """Serve until SIGINT/SIGTERM (or print one scrape with ``--once``); returns the exit code."""
    from prometheus_client import CollectorRegistry, generate_latest, start_http_server

    from locust_llm.gpu.collector import GpuCollector
    from locust_llm.gpu.host import WithHost

    source = build_source(args, nvml=nvml)
    try:
        registry = CollectorRegistry()
        registry.register(GpuCollector(source if args.no_host else WithHost(source)))
        if args.once:
            sys.stdout.write(generate_latest(registry).decode())
            sys.stdout.flush()
            return 0
        try:
            server, thread = start_http_server(args.port, addr=args.bind, registry=registry)
        except OSError as exc:
            raise InputError(f"--bind {args.bind} --port {args.port}: {exc.strerror}") from exc
        host = args.bind if ":" not in args.bind else f"[{args.bind}]"
        print(f"http://{host}:{server.server_port}/metrics", flush=True)
        stop = threading.Event()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        return 0
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()


def console_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``locust-llm-gpu-exporter`` console script and of ``python -m``.

    The exporter stands alone (a sidecar imports nothing of the load test): it parses its own
    arguments, with the same exit codes as ``locust-llm gpu-exporter`` (2 for bad input).
    """
    parser = argparse.ArgumentParser(
        prog="locust-llm-gpu-exporter", description="serve GPU and host metrics for Prometheus"
    )
    configure_gpu_exporter_parser(parser)
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return run_gpu_exporter(args)
    except InputError as exc:
        print(f"locust-llm-gpu-exporter: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(console_main())
