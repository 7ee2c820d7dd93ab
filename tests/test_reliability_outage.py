"""A 5 s server outage with 8 users: connection errors back off per user, the run recovers.

The simulator is SIGKILLed mid-stage and restarted on the same port 5 s later. Without a
back-off the 8 users made ~46,000 ``connect`` records in such an outage (and a request-count
stage's quota went in milliseconds); with it each user retries after 0.1, 0.2, 0.4 ... s
(jittered, capped at ``--llm-backoff-max``), so the outage is a handful of records per user.
The duration variant runs with Locust's web UI: during the outage its live stats say how many
users are backing off (``/llm/stats`` and ``/llm/metrics``), and after it, none.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from cluster_utils import LOCUST, Cluster, free_port, http_get, metric_value, read_run, wait_until

pytestmark = pytest.mark.slow

SIM_ARGS = ("--zero-cost", "--step-overhead-ms", "10", "--output-len", "fixed:20")
OUTAGE_S = 5.0


@pytest.mark.parametrize("stage", ["duration", "requests"])
def test_an_outage_backs_off_and_does_not_burn_the_stage(stage: str, tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        port = free_port()
        sim, sim_url = cluster.sim(*SIM_ARGS, port=port, name="sim-a")
        run_dir = tmp_path / "run"
        length = ["--llm-stage-duration", "14"] if stage == "duration" else [
            "--llm-stage-requests", "600"]  # fmt: skip
        web = f"http://127.0.0.1:{free_port()}"
        mode = ["--headless"] if stage == "requests" else [
            "--autostart", "--autoquit", "1", "--web-port", web.rsplit(":", 1)[1]]  # fmt: skip
        run = cluster.start("run", [
            LOCUST, "-f", "locustfiles/sweep.py", *mode, "--host", sim_url,
            "--llm-concurrency", "8", *length, "--llm-max-tokens", "20",
            "--llm-server-metrics", "none", "--stop-timeout", "5", "--llm-run-dir",
            str(run_dir), "--llm-connect-timeout", "2", "--llm-backoff-max", "2",
        ])  # fmt: skip
        wait_until(lambda: (run_dir / "requests.arrows").is_file(), 30, "the run started")
        time.sleep(2.0)
        sim.send(signal.SIGKILL)
        sim.popen.wait(5)
        down_at = time.time()
        waiting = []  # (users backing off in /llm/stats, the same in /llm/metrics)
        while time.time() < down_at + OUTAGE_S:
            if stage == "duration":
                live = json.loads(http_get(web + "/llm/stats"))["backoff"]["users_waiting"]
                waiting.append((live, metric_value(http_get(web + "/llm/metrics"),
                                                   "locust_llm_users_backing_off")))  # fmt: skip
            time.sleep(0.25)
        cluster.sim(*SIM_ARGS, port=port, name="sim-b")
        up_at = time.time()
        if stage == "duration":  # the live stats showed the outage, and then its end
            assert max(w for w, _ in waiting) >= 4, waiting
            assert max(m for _, m in waiting) >= 4, waiting
            wait_until(lambda: json.loads(http_get(web + "/llm/stats"))["backoff"][
                "users_waiting"] == 0, 6, "no user backing off after the outage")  # fmt: skip
        assert run.wait(90) in (0, 1), run.text()[-3000:]

        info, requests = read_run(run_dir)
        connect = requests[requests["error_kind"] == "connect"]
        # each user: about log2(2 s / 0.1 s) + outage / 2 s retries, far from thousands
        assert 8 <= len(connect) <= 8 * 12, len(connect)
        assert connect["start_wall_s"].min() >= down_at - 0.5
        assert connect["start_wall_s"].max() <= up_at + 2.5  # the cap: back within 2 s
        assert info["extra"]["backoffs"] >= len(connect) - 8
        after = requests[requests["start_wall_s"] > up_at + 2.5]
        assert len(after) > 0 and after["ok"].all()  # recovered
        if stage == "requests":  # the quota went to real requests, not to the outage
            assert (requests["error_kind"] != "cancelled").sum() >= 600
            failed = requests[~requests["ok"] & (requests["error_kind"] != "cancelled")]
            broken = failed[failed["error_kind"] != "connect"]
            # besides the connect errors only the 8 streams cut by the kill failed
            assert set(broken["error_kind"]) <= {"stream_broken"} and len(broken) <= 8
            assert requests["ok"].sum() >= 600 - len(connect) - 8
        assert "back off" in run.text()
        json.dumps(info)
