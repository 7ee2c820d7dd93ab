"""Hardware check of the exporter on a real NVIDIA GPU: does NVML/GPM see compute and copies?

Starts ``locust-llm gpu-exporter --source nvml --port 0``, then on GPU 0 runs an idle phase, a
PyTorch bf16 matrix product and a large device-to-device copy, scraping ``/metrics`` every
``--interval`` seconds in a background thread. Prints, per phase, the median GPU utilization,
DRAM bandwidth utilization (GPM), SM and tensor activity and power, and checks that utilization
is near 1 during the product and DRAM bandwidth well above 0 during the copy. Needs torch with
CUDA. Run: ``.venv/bin/python bench/gpu_hardware_check.py [--seconds 8]``; exit 0 = checks pass.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
SHOWN = {
    "util": "nvml_gpu_utilization_ratio",
    "dram_bw": "nvml_dram_bandwidth_utilization_ratio",
    "sm_active": "nvml_sm_activity_ratio",
    "tensor": "nvml_tensor_activity_ratio",
    "mem_util": "nvml_memory_utilization_ratio",
    "power_w": "nvml_power_usage_watts",
}


def scrape(url: str) -> tuple[dict[str, float], dict[str, str]]:
    """GPU 0's readings (our names -> value) and its info labels."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    values, info = {}, {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("gpu") == "0":
                if s.name == "nvml_gpu_info":
                    info = dict(s.labels)
                else:
                    values[s.name] = s.value
            elif not s.labels:
                values[s.name] = s.value
    return values, info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each phase")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between scrapes")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("needs PyTorch with CUDA: pip install torch", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("no CUDA device visible to PyTorch", file=sys.stderr)
        return 2

    exporter = subprocess.Popen(
        [sys.executable, "-m", "locust_llm.gpu.cli", "--source", "nvml", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    samples: list[tuple[str, dict[str, float]]] = []
    phase = ["start"]
    stop = threading.Event()
    try:
        url = exporter.stdout.readline().strip()
        if not url:
            print("exporter did not start (see its error above)", file=sys.stderr)
            return 2
        _, info = scrape(url)  # also primes GPM: the next scrape has an interval

        def scraper() -> None:
            while not stop.wait(args.interval):
                values, _ = scrape(url)
                samples.append((phase[0], values))

        thread = threading.Thread(target=scraper, daemon=True)
        thread.start()
        dev = torch.device("cuda:0")
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        src = torch.empty(4 * 1024**3, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        torch.cuda.synchronize()
        for name, step in (
            ("idle", lambda: time.sleep(0.05)),
            ("matmul", lambda: torch.mm(a, b)),
            ("copy", lambda: dst.copy_(src)),
        ):
            time.sleep(args.interval * 2)  # let the previous phase drain out of the window
            phase[0] = name
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                for _ in range(10):
                    step()
                torch.cuda.synchronize()
            phase[0] = f"after-{name}"
        stop.set()
        thread.join(timeout=10)
    finally:
        stop.set()
        exporter.terminate()
        exporter.wait(timeout=10)

    print(f"date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}")
    print(
        f"gpu {info.get('name')} driver {info.get('driver_version')} "
        f"cuda {info.get('cuda_version')} torch {torch.__version__}"
    )
    medians: dict[str, dict[str, float]] = {}
    print("phase   n  " + " ".join(f"{k:>9s}" for k in SHOWN))
    for name in ("idle", "matmul", "copy"):
        rows = [v for p, v in samples if p == name]
        medians[name] = {
            k: statistics.median([r[m] for r in rows if m in r])
            if any(m in r for r in rows)
            else float("nan")
            for k, m in SHOWN.items()
        }
        print(f"{name:6s} {len(rows):2d}  " + " ".join(f"{medians[name][k]:9.3f}" for k in SHOWN))
    checks = {
        "utilization >= 0.9 during matmul": medians["matmul"]["util"] >= 0.9,
        "DRAM bandwidth utilization >= 0.3 during copy": medians["copy"]["dram_bw"] >= 0.3,
        "DRAM bandwidth during copy > during idle": (
            medians["copy"]["dram_bw"] > medians["idle"]["dram_bw"]
        ),
    }
    for what, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {what}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
