"""The container files, checked by real tools without a container engine.

``docker-compose config -q`` (Debian's docker-compose, the Python implementation) validates and
interpolates docker-compose.yml without talking to an engine (DOCKER_HOST points nowhere here to
prove it); ``promtool check config`` validates deploy/prometheus/prometheus.yml and
``promtool check rules`` parses every PromQL expression of the Grafana dashboard.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "locust-llm.json"
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed (bash scripts/bootstrap.sh --test installs it)"
    return path


def _compose(*args: str, env: dict[str, str] | None = None, file: Path = COMPOSE
             ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(
        [_tool("docker-compose"), "-f", str(file), *args], cwd=ROOT, capture_output=True,
        text=True, timeout=60, check=False, env={**os.environ, **NO_ENGINE, **(env or {})},
    )  # fmt: skip


def _volume(spec: str | dict) -> tuple[str, str]:
    """(source, target) of a volume in either of compose's syntaxes."""
    if isinstance(spec, dict):
        return str(spec.get("source", "")), str(spec["target"])
    source, _, rest = spec.partition(":")
    return source, rest.split(":", 1)[0]


def _config(*args: str, env: dict[str, str] | None = None) -> dict:
    done = _compose(*args, "config", env=env)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_compose_file_is_valid_without_an_engine() -> None:
    done = _compose("config", "-q")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""


def test_compose_check_catches_a_broken_file(tmp_path: Path) -> None:
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("    ports:\n", "    portz:\n", 1))
    done = _compose("config", "-q", file=broken)
    assert done.returncode != 0 and "portz" in done.stderr


def test_services_profiles_and_gpu_reservation() -> None:
    services = _config()["services"]
    assert set(services) == {"target", "master", "worker", "gpu-exporter", "prometheus", "grafana"}
    # only the exporter needs a GPU host: `up` starts it with --profile gpu only
    assert {n: s.get("profiles") for n, s in services.items() if s.get("profiles")} == {
        "gpu-exporter": ["gpu"]
    }
    devices = services["gpu-exporter"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    worker = services["worker"]
    assert "container_name" not in worker and "ports" not in worker  # --scale worker=N works
    assert "--master-host=master" in worker["command"]
    master = services["master"]
    assert any(p["target"] == 8089 for p in master["ports"])
    assert any(_volume(v)[1] == "/app/reports" for v in master["volumes"])


def test_target_host_and_headless_come_from_the_environment() -> None:
    default = _config()["services"]["master"]["environment"]
    assert default["LOCUST_HOST"] == "http://target:8000"
    assert default["LOCUST_HEADLESS"] == "false"
    custom = _config(env={"TARGET_HOST": "http://10.1.2.3:8000", "HEADLESS": "true",
                          "WORKERS": "4"})["services"]["master"]["environment"]  # fmt: skip
    assert custom["LOCUST_HOST"] == "http://10.1.2.3:8000"
    assert custom["LOCUST_HEADLESS"] == "true" and custom["LOCUST_EXPECT_WORKERS"] == "4"
    assert custom["LOCUST_LLM_RUN_DIR"].startswith("/app/reports/")


def test_prometheus_config_passes_promtool_and_scrapes_the_three_sources() -> None:
    config = ROOT / "deploy" / "prometheus" / "prometheus.yml"
    done = subprocess.run([_tool("promtool"), "check", "config", str(config)],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = {j["job_name"]: j for j in yaml.safe_load(config.read_text())["scrape_configs"]}
    assert jobs["gpu-exporter"]["static_configs"][0]["targets"] == ["gpu-exporter:9400"]
    assert jobs["target"]["static_configs"][0]["targets"] == ["target:8000"]
    assert jobs["locust-master"]["metrics_path"] == "/llm/metrics"
    # the compose file mounts exactly this file
    volumes = _config()["services"]["prometheus"]["volumes"]
    assert any(Path(_volume(v)[0]) == config for v in volumes)


def _dashboard_exprs() -> dict[str, list[str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return {p["title"]: [t["expr"] for t in p["targets"]] for p in dashboard["panels"]}


def test_dashboard_covers_the_signals_and_uses_the_provisioned_datasource() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    uids = {p["datasource"]["uid"] for p in dashboard["panels"]}
    provisioned = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/"
                                  "prometheus.yml").read_text())["datasources"]  # fmt: skip
    assert uids == {provisioned[0]["uid"]}
    exprs = " ".join(e for es in _dashboard_exprs().values() for e in es)
    for needle in ("time_to_first_token", "tpot", "generation_tokens_total", "requests_total",
                   "failures_total", "nvml_gpu_utilization_ratio", "nvml_memory_used_bytes",
                   "dram_bandwidth_utilization_ratio", "kv_cache_usage"):  # fmt: skip
        assert needle in exprs, needle
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    rules = []
    for i, exprs in enumerate(_dashboard_exprs().values()):
        for j, expr in enumerate(exprs):
            rules.append({"record": f"panel{i}_query{j}",
                          "expr": re.sub(r"\$__rate_interval", "1m", expr)})  # fmt: skip
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run([_tool("promtool"), "check", "rules", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout


@pytest.mark.parametrize("path", sorted((ROOT / "deploy").rglob("*.y*ml")), ids=lambda p: p.name)
def test_every_deploy_yaml_parses(path: Path) -> None:
    assert yaml.safe_load(path.read_text()) is not None
