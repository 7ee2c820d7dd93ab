"""Benchmark: CPU cost of the telemetry scraper on the Locust master (target < 2% of one core).

Three targets like a real run (a locust-llm GPU exporter with 8 GPUs, a dcgm-exporter with 8
GPUs, a vLLM-style /metrics with histograms) are served as static texts by a separate server
process, so only the scraper's own CPU is measured. Each measurement runs in a fresh child
process: ``threads`` (plain Python) or ``gevent`` (monkey-patched, as on a Locust master). The
child's CPU time (user + sys, ``resource.getrusage``) over the steady-state window is divided by
the wall time.

    .venv/bin/python bench/bench_telemetry.py --duration 30 --repeats 3
"""

from __future__ import annotations

import argparse
import http.server
import json
import statistics
import subprocess
import sys
import threading
import time


def exporter_text(vocabulary: str, gpus: int = 8) -> str:
    """A static exporter page: ~40 gauges per GPU, like the real ones."""
    lines = []
    names = (
        [f"nvml_metric_{i}_ratio" for i in range(35)]
        + ["nvml_gpu_utilization_ratio", "nvml_memory_used_bytes", "nvml_memory_total_bytes"]
        + ["nvml_power_usage_watts", "nvml_dram_bandwidth_utilization_ratio"]
        if vocabulary == "ours"
        else [f"DCGM_FI_DEV_FIELD_{i}" for i in range(35)]
        + ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"]
        + ["DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_DRAM_ACTIVE"]
    )
    for name in names:
        lines += [f"# HELP {name} bench", f"# TYPE {name} gauge"]
        for gpu in range(gpus):
            lines.append(f'{name}{{gpu="{gpu}",UUID="GPU-{gpu:08d}",modelName="H100"}} {gpu + 1.5}')
    return "\n".join(lines) + "\n"


def vllm_text() -> str:
    """A vLLM-like page: scheduler gauges, counters and 12 histograms of 30 buckets."""
    label = 'model_name="meta-llama/Llama-3.1-8B-Instruct",engine="0"'
    lines = [
        f"vllm:num_requests_running{{{label}}} 12",
        f"vllm:num_requests_waiting{{{label}}} 3",
        f"vllm:kv_cache_usage_perc{{{label}}} 0.41",
        f"vllm:num_preemptions_total{{{label}}} 5",
    ]
    for h in range(12):
        name = f"vllm:histogram_{h}_seconds"
        lines += [f"# HELP {name} bench", f"# TYPE {name} histogram"]
        for b in range(30):
            lines.append(f'{name}_bucket{{{label},le="{0.001 * 2**b}"}} {b * 10}')
        lines += [f'{name}_bucket{{{label},le="+Inf"}} 300', f"{name}_count{{{label}}} 300"]
        lines.append(f"{name}_sum{{{label}}} 12.5")
    return "\n".join(lines) + "\n"


def serve(texts: list[str]) -> None:
    """Serve each text on its own 127.0.0.1 port; print the URLs as JSON; run until killed."""
    urls = []
    for text in texts:
        body = text.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            payload = body

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(self.payload)))
                self.end_headers()
                self.wfile.write(self.payload)

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        urls.append(f"http://127.0.0.1:{server.server_address[1]}/metrics")
    print(json.dumps(urls), flush=True)
    sys.stdin.read()  # until the parent closes our stdin


def child(mode: str, urls: list[str], duration: float, interval: float) -> None:
    """One measurement; prints JSON with cpu_s, wall_s and rows."""
    if mode == "gevent":
        import gevent.monkey

        gevent.monkey.patch_all()
    import resource

    from locust_llm.telemetry.scraper import TelemetryScraper

    scraper = TelemetryScraper(urls, interval)
    scraper.scrape_once()  # warm imports and parsers outside the window
    before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    scraper.start()
    time.sleep(duration)
    scraper.stop()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    ups = [r for r in scraper.samples() if r[2] == "scrape_up"]
    result = {
        "cpu_s": cpu,
        "wall_s": wall,
        "scrapes": len(ups) - len(urls),
        "failed": sum(r[4] == 0 for r in ups),
        "rows": len(scraper.samples()),
        "missed_ticks": scraper.missed_ticks,
    }
    print(json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", default="threads,gevent")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--urls", default="[]", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve([exporter_text("ours"), exporter_text("dcgm"), vllm_text()])
        return
    if args.child:
        child(args.child, json.loads(args.urls), args.duration, args.interval)
        return

    server = subprocess.Popen(
        [sys.executable, __file__, "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        urls = json.loads(server.stdout.readline())
        sizes = [len(t) for t in (exporter_text("ours"), exporter_text("dcgm"), vllm_text())]
        print(f"targets: {len(urls)}, page sizes {sizes} bytes, interval {args.interval} s")
        for mode in args.modes.split(","):
            shares = []
            command = [sys.executable, __file__, "--child", mode, "--urls", json.dumps(urls)]
            command += ["--duration", str(args.duration), "--interval", str(args.interval)]
            for _ in range(args.repeats):
                out = subprocess.run(
                    command,
                    capture_output=True,
                    text=True,
                    timeout=args.duration + 60,
                    check=True,
                )
                result = json.loads(out.stdout.strip().splitlines()[-1])
                share = 100.0 * result["cpu_s"] / result["wall_s"]
                shares.append(share)
                print(f"  {mode}: {share:.3f}% of a core  {result}")
            print(f"{mode}: median {statistics.median(shares):.3f}% of one core")
    finally:
        server.stdin.close()
        server.wait(10)
        server.stdout.close()


if __name__ == "__main__":
    main()
