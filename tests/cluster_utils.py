"""Process helpers for the cluster tests: the compose topology as plain processes on this machine.

A :class:`Cluster` owns everything a test starts (simulators, the GPU exporter, Prometheus,
nginx, a Locust master and workers, network namespaces) and tears it all down in ``close()``
(process groups get SIGTERM, then SIGKILL; namespaces are deleted), so a failing test leaves
nothing behind. Servers listen on 127.0.0.1 (or a namespace address the test created) on ports
found by binding port 0; a server started with ``--port 0`` is read back from the URL it prints
as its first stdout line. Locust runs only as subprocesses (never imported here).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
LOCUST = str(BIN / "locust")
LOCUST_LLM = str(BIN / "locust-llm")

#: A locustfile added to the real one (``-f sweep.py,COUNTER``): it counts the Locust request
#: events of its process and prints them when the process quits, so a test can compare each
#: worker's Locust-counted requests with its records.
COUNTER_LOCUSTFILE = '''"""Test helper: prints this process's Locust request count when it quits."""
from locust import events

_count = {"n": 0}


@events.request.add_listener
def _count_request(**_kw):
    _count["n"] += 1


@events.quitting.add_listener
def _print_count(environment, **_kw):
    client_id = getattr(environment.runner, "client_id", "master")
    print(f"LLM-TEST-COUNT {client_id} {_count['n']}", flush=True)
'''
COUNT_LINE = re.compile(r"^LLM-TEST-COUNT (\S+) (\d+)$", re.M)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (bind port 0, read it, close)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def http_get(url: str, timeout_s: float = 5.0) -> str:
    """The body of ``url`` as text (raises OSError on failure)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:  # it holds the answer's socket open until closed
        exc.close()
        raise


def metric_value(text: str, name: str) -> float:
    """Sum of every sample of ``name`` in Prometheus text (0.0 when there is none)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_until(check: Callable[[], T], timeout_s: float, what: str, interval_s: float = 0.1) -> T:
    """Call ``check()`` until it returns something truthy; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except (OSError, ValueError) as exc:
            last_error = exc
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} ({last_error})")


class Proc:
    """One started process (its own process group); output in ``log`` (and ``out`` if split)."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes], log: Path, out: Path) -> None:
        self.name = name
        self.popen = popen
        self.log = log
        self.out = out

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def send(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> int:
        """Signal the group, wait up to ``timeout_s``, then SIGKILL it; returns the exit code."""
        if self.alive():
            self.send(sig)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.send(signal.SIGKILL)
                self.popen.wait(5)
        else:  # leftovers of the group (children) go too
            self.send(signal.SIGKILL)
        return int(self.popen.returncode)

    def wait(self, timeout_s: float) -> int:
        """Wait for a normal exit; AssertionError (with the log tail) when it takes too long."""
        try:
            return int(self.popen.wait(timeout_s))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still running after {timeout_s} s:\n"
                                 f"{self.text()[-3000:]}") from None  # fmt: skip

    def text(self) -> str:
        parts = [self.log.read_text(errors="replace")] if self.log.exists() else []
        if self.out != self.log and self.out.exists():
            parts.insert(0, self.out.read_text(errors="replace"))
        return "\n".join(parts)

    def first_line(self, timeout_s: float = 20.0) -> str:
        """The first stdout line (a server's URL); AssertionError if the process dies first."""

        def line() -> str:
            if not self.alive():
                raise AssertionError(f"{self.name} exited {self.popen.returncode}:\n{self.text()}")
            text = self.out.read_text(errors="replace") if self.out.exists() else ""
            return text.split("\n", 1)[0].strip() if "\n" in text else ""

        return str(wait_until(line, timeout_s, f"{self.name}'s first stdout line"))


class Netns:
    """A network namespace joined to the root namespace by a veth pair (a /30 link).

    Root side ``host_addr`` (10.203.S.4i+1), namespace side ``addr`` (10.203.S.4i+2), and a
    default route via the root side, so the namespace reaches every root-namespace address.
    """

    def __init__(self, index: int) -> None:
        tag = os.getpid() % 100000
        self.name = f"lltest{tag}n{index}"
        self.veth_root = f"llr{tag}n{index}"[:15]
        self.veth_ns = f"lln{tag}n{index}"[:15]
        subnet = 200 + tag % 50
        self.host_addr = f"10.{subnet}.{index}.1"
        self.addr = f"10.{subnet}.{index}.2"
        self.created = False

    def create(self) -> Netns:
        ns = ["ip", "netns", "exec", self.name]
        steps = [
            ["ip", "netns", "add", self.name],
            ["ip", "link", "add", self.veth_root, "type", "veth", "peer", "name", self.veth_ns],
            ["ip", "link", "set", self.veth_ns, "netns", self.name],
            ["ip", "addr", "add", f"{self.host_addr}/30", "dev", self.veth_root],
            ["ip", "link", "set", self.veth_root, "up"],
            [*ns, "ip", "addr", "add", f"{self.addr}/30", "dev", self.veth_ns],
            [*ns, "ip", "link", "set", self.veth_ns, "up"],
            [*ns, "ip", "link", "set", "lo", "up"],
            [*ns, "ip", "route", "add", "default", "via", self.host_addr],
        ]
        for i, step in enumerate(steps):
            done = subprocess.run(step, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                self.created = i > 0
                self.delete()
                raise OSError(f"{' '.join(step)}: {done.stderr.strip()}")
        self.created = True
        return self

    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def traffic_bytes(self) -> int:
        """Bytes received + sent on the root side of this namespace's link so far."""
        stats = Path("/sys/class/net") / self.veth_root / "statistics"
        return sum(int((stats / name).read_text()) for name in ("rx_bytes", "tx_bytes"))

    def delete(self) -> None:
        if not self.created:
            return
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self.veth_root], capture_output=True, check=False)
        self.created = False


def netns_supported() -> str:
    """'' when this process may create network namespaces, else the reason it may not."""
    probe = f"lltestprobe{os.getpid() % 100000}"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True,
                          check=False)  # fmt: skip
    if done.returncode != 0:
        return f"'ip netns add' is not permitted here: {done.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return ""


class Cluster:
    """Starts the pieces of a cluster as processes under ``tmp``; ``close()`` stops them all."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[Proc] = []
        self.namespaces: list[Netns] = []
        self.counter_file = tmp / "llm_count.py"
        self.counter_file.write_text(COUNTER_LOCUSTFILE)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop(timeout_s=5)
        for ns in reversed(self.namespaces):
            ns.delete()

    # ---- generic --------------------------------------------------------------------------
    def start(
        self, name: str, cmd: Sequence[str], *, cwd: Path | None = None,
        env: dict[str, str] | None = None, netns: Netns | None = None, split_stdout: bool = False,
    ) -> Proc:  # fmt: skip
        """Start ``cmd`` in its own process group; stdout (+ stderr unless split) to files."""
        log = self.tmp / f"{name}.log"
        out = self.tmp / f"{name}.out" if split_stdout else log
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        prefix = netns.prefix() if netns else []
        with contextlib.ExitStack() as files:
            log_f = files.enter_context(open(log, "wb"))
            out_f = files.enter_context(open(out, "wb")) if split_stdout else log_f
            popen = subprocess.Popen(
                [*prefix, *cmd], cwd=cwd or ROOT, env=full_env, stdin=subprocess.DEVNULL,
                stdout=out_f, stderr=log_f if split_stdout else subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        proc = Proc(name, popen, log, out)
        self.procs.append(proc)
        return proc

    def netns(self, index: int) -> Netns:
        ns = Netns(index)
        self.namespaces.append(ns)
        return ns.create()

    # ---- the pieces ---------------------------------------------------------------------------
    def sim(self, *args: str, name: str = "sim", bind: str = "127.0.0.1", port: int = 0
            ) -> tuple[Proc, str]:  # fmt: skip
        """The simulator (``locust-llm sim``); returns the process and its base URL."""
        cmd = [LOCUST_LLM, "sim", "--bind", bind, "--port", str(port), *args]
        proc = self.start(name, cmd, split_stdout=True)
        url = proc.first_line()
        wait_until(lambda: http_get(url + "/v1/models", 2), 10, f"{name} /v1/models")
        return proc, url

    def exporter(self, *args: str, name: str = "exporter") -> tuple[Proc, str]:
        """The GPU exporter on the fake source; returns the process and its /metrics URL."""
        cmd = [LOCUST_LLM, "gpu-exporter", "--source", "fake", "--port", "0", *args]
        proc = self.start(name, cmd, split_stdout=True)
        url = proc.first_line().rstrip("/")
        return proc, url if url.endswith("/metrics") else url + "/metrics"

    def prometheus(self, jobs: dict[str, list[str]], interval_s: float = 0.5) -> str:
        """A real Prometheus scraping ``jobs`` (job -> ["host:port/path", ...]); returns its URL."""
        port = free_port()
        every = f"{round(interval_s * 1000)}ms"
        lines = ["global:", f"  scrape_interval: {every}", f"  scrape_timeout: {every}",
                 "scrape_configs:"]  # fmt: skip
        for job, targets in jobs.items():
            for i, target in enumerate(targets):
                hostport, _, path = target.partition("/")
                lines += [f"  - job_name: {job}-{i}", f"    metrics_path: /{path or 'metrics'}",
                          "    static_configs:", f"      - targets: ['{hostport}']"]  # fmt: skip
        config = self.tmp / "prometheus.yml"
        config.write_text("\n".join(lines) + "\n")
        cmd = ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={self.tmp / 'tsdb'}",
               f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]  # fmt: skip
        proc = self.start("prometheus", cmd)
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert proc.alive(), f"prometheus exited:\n{proc.text()[-2000:]}"
            return "Ready" in http_get(url + "/-/ready", 2)

        wait_until(ready, 30, "prometheus ready")
        return url

    def prometheus_up(self, url: str, expected: int, timeout_s: float = 20.0) -> None:
        """Wait until Prometheus has scraped ``expected`` targets successfully."""

        def all_up() -> bool:
            data = json.loads(http_get(url + "/api/v1/query?query=up", 2))
            return sum(float(r["value"][1]) for r in data["data"]["result"]) >= expected

        wait_until(all_up, timeout_s, f"{expected} prometheus targets up")

    def nginx(self, upstreams: Sequence[str]) -> str:
        """nginx as a round-robin load balancer over ``upstreams`` (base URLs); returns its URL."""
        port = free_port()
        prefix = self.tmp / "nginx"
        (prefix / "logs").mkdir(parents=True, exist_ok=True)
        servers = "\n".join(f"    server {u.split('://', 1)[-1].rstrip('/')};" for u in upstreams)
        conf = f"""
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {prefix}/body;
  proxy_temp_path {prefix}/proxy;
  fastcgi_temp_path {prefix}/fastcgi;
  uwsgi_temp_path {prefix}/uwsgi;
  scgi_temp_path {prefix}/scgi;
  upstream sims {{
{servers}
    keepalive 16;
  }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://sims;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 60s;
    }}
  }}
}}
"""
        (prefix / "nginx.conf").write_text(conf)
        self.start("nginx", ["nginx", "-p", str(prefix), "-c", str(prefix / "nginx.conf"),
                             "-g", "daemon off;"])  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: http_get(url + "/v1/models", 2), 10, "nginx in front of the sims")
        return url

    def master(
        self, host: str, args: Sequence[str], *, bind: str = "127.0.0.1", port: int | None = None,
        workers: int = 2, locustfile: str = "locustfiles/sweep.py", name: str = "master",
    ) -> tuple[Proc, int]:  # fmt: skip
        """A headless Locust master expecting ``workers``; returns it and its bind port."""
        port = port or free_port(bind)
        cmd = [LOCUST, "-f", f"{locustfile},{self.counter_file}", "--master", "--headless",
               "--expect-workers", str(workers), "--master-bind-host", bind,
               "--master-bind-port", str(port), "--host", host, *args]  # fmt: skip
        return self.start(name, cmd), port

    def worker(
        self, index: int, master_host: str, master_port: int, *, netns: Netns | None = None,
        name: str = "",
    ) -> Proc:  # fmt: skip
        """A Locust worker in its own cwd/TMPDIR, fetching the locustfiles from the master."""
        name = name or f"worker{index}"
        home = self.tmp / name
        home.mkdir(exist_ok=True)
        cmd = [LOCUST, "-f", "-", "--worker", "--master-host", master_host,
               "--master-port", str(master_port)]  # fmt: skip
        return self.start(name, cmd, cwd=home, netns=netns,
                          env={"TMPDIR": str(home), "HOME": str(home)})  # fmt: skip

    def run(self, name: str, host: str, args: Sequence[str], *, workers: int = 2,
            timeout_s: float = 90) -> tuple[Path, list[Proc]]:  # fmt: skip
        """A whole headless run on loopback: master + ``workers``; returns its run dir, workers."""
        run_dir = self.tmp / name
        master, port = self.master(host, [*args, "--llm-run-dir", str(run_dir)],
                                   workers=workers, name=f"{name}-master")  # fmt: skip
        procs = [self.worker(i, "127.0.0.1", port, name=f"{name}-worker{i}")
                 for i in range(1, workers + 1)]  # fmt: skip
        code = master.wait(timeout_s)
        assert code == 0, master.text()[-3000:]
        for proc in procs:
            proc.wait(20)
        return run_dir, procs

    def report(self, run_dir: Path, *args: str, timeout_s: float = 60
               ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """``locust-llm report RUN_DIR ARGS`` (output merged into stdout)."""
        return subprocess.run(
            [LOCUST_LLM, "report", str(run_dir), *args], cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, timeout=timeout_s, check=False,
        )  # fmt: skip


def locust_counts(*procs: Proc) -> dict[str, int]:
    """worker id -> Locust-counted requests, from the counter lines the workers printed."""
    counts: dict[str, int] = {}
    for proc in procs:
        for worker, n in COUNT_LINE.findall(proc.text()):
            counts[worker] = int(n)
    return counts


def read_trace(path: Path) -> list[dict[str, object]]:
    """The simulator's trace (one JSON object per finished request)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_run(run_dir: Path) -> tuple[dict[str, object], object]:
    """run.json (as a dict) and requests.parquet (as a DataFrame) of a run dir."""
    import pandas as pd

    info = json.loads((run_dir / "run.json").read_text())
    return info, pd.read_parquet(run_dir / "requests.parquet")
