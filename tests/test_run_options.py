"""``locust-llm run`` reaches every ``--llm-*`` option: through a flag of its own, as the option
itself, through ``LOCUST_LLM_*`` variables, or after ``--``; and ``run --help`` says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cluster_utils import Cluster

from locust_llm.cli import build_parser
from locust_llm.client.options import OPTIONS, env_var
from locust_llm.launch.sweep import SWEEP_FLAG_FOR, run_llm_args

CLI = [str(Path(sys.executable).parent / "locust-llm")]
#: A value each plugin option accepts (strings for the rest).
SAMPLE = {"store_true": None, "append": "X-A: b"}
#: the device options are checked by `run` before it starts anything: real values
DEVICE_SAMPLE = {
    "roofline-gpu": "l4",
    "roofline-bandwidth": "40GB/s",
    "roofline-flops": "1.2TFLOPS",
    "roofline-memory": "64GiB",
    "roofline-tp": "2",
}
CUSTOM = ("roofline-bandwidth", "roofline-flops", "roofline-memory")


def _parse(argv: list[str]) -> list[str]:
    """The Locust arguments ``locust-llm run --host http://h ARGV`` would start the master with."""
    if "--" in argv:
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1 :]
    else:
        rest = []
    args = build_parser(only="run").parse_args(["run", "--host", "http://h", *argv])
    args.passthrough = rest
    return run_llm_args(args)


@pytest.mark.parametrize("flag", [f for f, *_ in OPTIONS])
def test_every_llm_option_reaches_locust(flag: str) -> None:
    extra = next(e for f, _, _, e in OPTIONS if f == flag)
    value = SAMPLE.get(extra.get("action", ""), "7")
    value = DEVICE_SAMPLE.get(flag, value)
    if flag in SWEEP_FLAG_FOR:  # run's own flag stands for it
        own = "--" + SWEEP_FLAG_FOR[flag].replace("_", "-")
        if flag in ("api-key", "run-dir"):
            return  # the API key goes by environment (never on a command line); --out is run's
        argv = [own] if value is None else [own, value]
        if flag == "rate":
            argv += ["--stage-duration", "5"]  # open-loop stages are timed
        if flag in CUSTOM:  # a custom device needs all three
            argv = [a for f in CUSTOM for a in (f"--{SWEEP_FLAG_FOR[f]}", DEVICE_SAMPLE[f])]
    else:
        argv = [f"--llm-{flag}"] if value is None else [f"--llm-{flag}", value]
    out = _parse(argv)
    assert f"--llm-{flag}" in out
    if value is not None:
        assert out[out.index(f"--llm-{flag}") + 1] == value


def test_repeatable_options_pass_every_value_and_passthrough_goes_last() -> None:
    out = _parse(["--llm-header", "A: 1", "--llm-header", "B: 2", "--llm-seed", "3", "--",
                  "--csv", "stats"])  # fmt: skip
    assert out[-2:] == ["--csv", "stats"]
    assert [out[i + 1] for i, a in enumerate(out) if a == "--llm-header"] == ["A: 1", "B: 2"]
    assert out[out.index("--llm-seed") + 1] == "3"
    assert "--llm-tokenizer" not in out  # options not given stay out (Locust's defaults apply)


def test_run_flags_default_to_their_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env_var("max-tokens"), "33")
    monkeypatch.setenv(env_var("concurrency"), "2,3")
    out = _parse([])
    assert out[out.index("--llm-max-tokens") + 1] == "33"
    assert out[out.index("--llm-concurrency") + 1] == "2,3"
    out = _parse(["--max-tokens", "5"])
    assert out[out.index("--llm-max-tokens") + 1] == "5"  # the flag wins


def test_run_help_explains_options_and_environment() -> None:
    text = subprocess.run([*CLI, "run", "--help"], capture_output=True, text=True, timeout=60,
                          check=True).stdout  # fmt: skip
    assert "--llm-tokenizer" in text and "--llm-server-max-num-seqs" in text
    assert "LOCUST_LLM_<NAME> sets --llm-<name>" in text
    assert "after a lone --" in text


def test_passthrough_is_refused_for_other_commands() -> None:
    done = subprocess.run([*CLI, "report", "x", "--", "--csv", "y"], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2
    assert "arguments after -- (--csv y) are for: run" in done.stderr


@pytest.mark.slow
def test_run_against_the_simulator_applies_options_env_and_passthrough(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        _, url = cluster.sim("--output-len", "fixed:8")
        run_dir = tmp_path / "run"
        env = {**os.environ, env_var("record-batch-s"): "0.25", env_var("max-tokens"): "6"}
        done = subprocess.run(
            [*CLI, "run", "--host", url, "--concurrency", "1", "--stage-requests", "3",
             "--workers", "1", "--out", str(run_dir), "--quiet", "--llm-seed", "11",
             "--llm-server-max-num-seqs", "5", "--llm-header", "X-Test: yes", "--",
             "--csv", str(tmp_path / "stats")],
            capture_output=True, text=True, timeout=180, check=False, env=env,
        )  # fmt: skip
        assert done.returncode in (0, 3), done.stdout + done.stderr
    info = json.loads((run_dir / "run.json").read_text())
    assert info["extra"]["max_num_seqs"] == 5
    assert info["extra"]["max_num_seqs_source"] == "--llm-server-max-num-seqs"
    command = " ".join(info["command"]) if isinstance(info["command"], list) else info["command"]
    assert "--llm-seed 11" in command and "--llm-max-tokens 6" in command
    assert (tmp_path / "stats_stats.csv").is_file()  # Locust's own --csv, passed after --
