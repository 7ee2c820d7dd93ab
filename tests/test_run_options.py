"""``locust-llm run`` reaches every ``--llm-*`` option: through a flag of its own, as the option
itself, through ``LOCUST_LLM_*`` variables, or after ``--``; and ``run --help`` says so."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cluster_utils import Cluster

from locust_llm.cli import build_parser, main
from locust_llm.launch.run_options import secret_env
from locust_llm.launch.sweep import SWEEP_FLAG_FOR, run_llm_args
from locust_llm.options.table import OPTIONS, env_var

CLI = [str(Path(sys.executable).parent / "locust-llm")]
#: A value each plugin option accepts (strings for the rest).
SAMPLE = {"switch": None, "list": "X-A: b"}
#: the device options are checked by `run` before it starts anything: real values
DEVICE_SAMPLE = {
    "roofline-gpu": "l4",
    "roofline-bandwidth": "40GB/s",
    "roofline-flops": "1.2TFLOPS",
    "roofline-memory": "64GiB",
    "roofline-tp": "2",
}
CUSTOM = ("roofline-bandwidth", "roofline-flops", "roofline-memory")


def _args(argv: list[str]) -> argparse.Namespace:
    """``locust-llm run --host http://h ARGV``, parsed."""
    if "--" in argv:
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1 :]
    else:
        rest = []
    args = build_parser(only="run").parse_args(["run", "--host", "http://h", *argv])
    args.passthrough = rest
    return args


def _parse(argv: list[str]) -> list[str]:
    """The Locust arguments ``locust-llm run --host http://h ARGV`` would start the master with."""
    return run_llm_args(_args(argv))


@pytest.mark.parametrize("spelling", ["run", "llm"])
@pytest.mark.parametrize("flag", [o.name for o in OPTIONS])
def test_every_llm_option_reaches_locust(flag: str, spelling: str) -> None:
    """Every option, by run's own flag where it has one, and always as ``--llm-<name>``."""
    kind = next(o.kind for o in OPTIONS if o.name == flag)
    value = SAMPLE.get(kind, "7")
    value = DEVICE_SAMPLE.get(flag, value)

    def spelled(name: str) -> str:
        own = SWEEP_FLAG_FOR.get(name)
        return f"--{own.replace('_', '-')}" if own and spelling == "run" else f"--llm-{name}"

    argv = [spelled(flag)] if value is None else [spelled(flag), value]
    if flag == "rate":
        argv += ["--stage-duration", "5"]  # open-loop stages are timed
    if flag in CUSTOM:  # a custom device needs all three
        argv = [a for f in CUSTOM for a in (spelled(f), DEVICE_SAMPLE[f])]
    if flag == "api-key":  # by environment, never on a command line
        args = _args(argv)
        assert secret_env(args) == {env_var("api-key"): "7"}
        assert "7" not in run_llm_args(args)
        return
    if flag == "run-dir":  # the run dir is run's (--out), not handed on as given
        assert _args(argv).out == "7"
        return
    out = _parse(argv)
    assert f"--llm-{flag}" in out
    if value is not None:
        assert out[out.index(f"--llm-{flag}") + 1] == value


@pytest.mark.parametrize(
    "argv",
    [
        ["--llm-api-key", "sk-SECRET9", "--bogus"],
        ["--api-key=sk-SECRET9", "--llm-seed", "1", "--nope", "x"],
        ["--llm-api-k", "sk-SECRET9", "--workers", "sk-SECRET9"],
        ["--llm-api-kye", "sk-SECRET9"],  # a misspelt flag: its value is not shown either
        ["--llm-header=X-Key: sk-SECRET9", "--concurrency"],
    ],
)
def test_a_refused_run_never_shows_a_secret(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["run", "--host", "http://h", *argv])
    assert done.value.code == 2
    out, err = capsys.readouterr()
    assert "error:" in err
    assert "sk-SECRET9" not in out + err


def test_run_accepts_the_api_key_under_both_spellings() -> None:
    for flag in ("--api-key", "--llm-api-key"):
        assert _args([flag, "K1"]).api_key == "K1"
    assert secret_env(_args([])) == {}


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


def _help_entries(text: str) -> dict[str, str]:
    """``--flag`` -> its help (the lines up to the next flag), from an argparse help text."""
    entries: dict[str, str] = {}
    flag = ""
    for line in text.split("\n\n", 1)[1].splitlines():
        words = line.split()
        if line.startswith("  -") and words:
            flag = words[0].rstrip(",")
            entries[flag] = " ".join(words[1:])
        elif flag and line.startswith(" " * 10):
            entries[flag] += " " + " ".join(words)
        else:
            flag = ""
    return entries


def test_run_help_lists_every_llm_option_with_its_default() -> None:
    """Every --llm-* option of the spec is in `run --help` (Locust's own --help prints before
    the locustfile registers them); those handed to Locust as they are say their default, from
    the spec, and nothing sends the reader to `locust --help`."""
    text = subprocess.run([*CLI, "run", "--help"], capture_output=True, text=True, timeout=60,
                          check=True).stdout  # fmt: skip
    assert "locust --help" not in text
    entries = _help_entries(text)
    for option in OPTIONS:
        spelled = option.flag if not option.run_flag else f"--{option.run_flag}"
        assert spelled in entries, option.flag
        assert option.flag in text, option.flag
    assert "(default 120.0)" in entries["--llm-read-timeout"]
    assert "(default auto)" in entries["--llm-transport"]
    assert "(default 3)" in entries["--llm-debug-requests"]
    assert "default" not in entries["--llm-tokenizer"]  # no default to show
    demo = subprocess.run([*CLI, "demo", "--help"], capture_output=True, text=True, timeout=60,
                          check=True).stdout  # fmt: skip
    assert "The demo takes no other --llm-* option" in " ".join(demo.split())


@pytest.mark.parametrize(
    ("argv", "usage", "said"),
    [
        (["run", "--concurency", "4"], "usage: locust-llm run ",
         "locust-llm run: error: unknown option --concurency; did you mean --concurrency?"),
        (["run", "--host", "http://h", "--llm-sed=3"], "usage: locust-llm run ",
         "locust-llm run: error: unknown option --llm-sed; did you mean --llm-seed?"),
        (["demo", "--stage-reqeusts", "3"], "usage: locust-llm demo ",
         "locust-llm demo: error: unknown option --stage-reqeusts; did you mean "
         "--stage-requests?"),
        (["report", "x", "--sloo", "ttft=1"], "usage: locust-llm report ",
         "locust-llm report: error: unknown option --sloo; did you mean --slo?"),
        (["run", "--csv", "x"], "usage: locust-llm run ",
         "locust-llm run: error: unknown option --csv (locust-llm run --help lists them; "
         "Locust's own options go after a lone --)"),
        (["rn", "--host", "http://h"], "usage: locust-llm [-h]",
         "locust-llm: error: unknown command 'rn'; did you mean run?"),
        (["frobnicate"], "usage: locust-llm [-h]",
         "locust-llm: error: unknown command 'frobnicate' (one of demo, run, report, roofline, "
         "sim, virtual, gpu-exporter, options)"),
    ],
)  # fmt: skip
def test_a_typo_gets_the_subcommand_s_usage_and_the_closest_name(
    argv: list[str], usage: str, said: str
) -> None:
    done = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(usage), done.stderr
    assert done.stderr.splitlines()[-1] == said


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
             "--llm-server-max-num-seqs", "5", "--llm-header", "X-Test: yes",
             "--llm-api-key", "sk-runkey-1", "--",
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
    assert "sk-runkey-1" not in done.stdout + done.stderr  # the key went by environment
    for path in run_dir.rglob("*"):
        assert path.is_dir() or b"sk-runkey-1" not in path.read_bytes(), path
