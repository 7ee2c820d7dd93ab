"""scripts/bootstrap.sh: one progress line per step, nothing on stderr unless a step fails.

Run for real in this checkout with ``--dry-run`` (which only reads ``command -v`` and the
install stamp), in a PATH without the test's system packages (each package named once), and
with an interpreter that fails (the failing step's log shown on stderr, its exit code kept).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from conftest import ROOT

SCRIPT = ROOT / "scripts" / "bootstrap.sh"
#: what the script itself runs besides the package managers
TOOLS = ("bash", "dirname", "id", "sort", "tail", "date", "mkdir", "env", "touch", "python3")


def _bootstrap(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(
        ["bash", str(cwd / "scripts" / "bootstrap.sh"), *args], cwd=cwd, capture_output=True,
        text=True, timeout=120, env={**os.environ, **(env or {})}, check=False,
    )  # fmt: skip


def _bare_path(tmp_path: Path) -> str:
    """A PATH holding only the tools the script needs (no prometheus, chromium, nginx ...)."""
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        (bare / tool).symlink_to(found)
    return str(bare)


def test_a_second_run_is_quiet_and_says_what_it_kept() -> None:
    result = _bootstrap("--test", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines and all(line.startswith("bootstrap: ") for line in lines), lines


def test_missing_system_packages_are_named_once(tmp_path: Path) -> None:
    result = _bootstrap("--test", "--dry-run", env={"PATH": _bare_path(tmp_path)})
    assert result.returncode == 0, result.stderr
    install = [line for line in result.stdout.splitlines() if "apt-get install" in line]
    assert len(install) == 1, result.stdout
    packages = install[0].split("--no-install-recommends")[1].split()
    assert sorted(packages) == sorted(set(packages))
    assert {"prometheus", "chromium", "chromium-driver", "nginx", "iproute2"} <= set(packages)


def test_a_failing_step_shows_its_log_on_stderr_and_keeps_its_exit_code(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy(SCRIPT, tmp_path / "scripts" / "bootstrap.sh")
    failing = tmp_path / "python-that-fails"
    failing.write_text("#!/bin/sh\necho 'no venv module here' >&2\nexit 7\n")
    failing.chmod(0o755)
    result = _bootstrap(cwd=tmp_path, env={"PYTHON": str(failing)})
    assert result.returncode == 7
    assert result.stdout == "bootstrap: creating .venv ...\n"
    assert "bootstrap: creating .venv failed (exit 7)" in result.stderr
    assert "no venv module here" in result.stderr
    assert "no venv module here" in (tmp_path / ".venv" / "bootstrap.log").read_text()


def test_an_unknown_argument_is_one_line() -> None:
    result = _bootstrap("--tests")
    assert result.returncode == 2
    assert result.stderr == "bootstrap: unknown argument '--tests' (expected --test, --dry-run)\n"


def _fake(bin_dir: Path, name: str, script: str) -> None:
    tool = bin_dir / name
    tool.write_text(f"#!/bin/sh\n{script}\n")
    tool.chmod(0o755)


def test_the_set_up_says_which_compose_it_has_under_both_spellings(tmp_path: Path) -> None:
    """Compose is spelled docker-compose (v1, Debian's, what the set-up installs for the tests)
    or `docker compose` (v2, Docker's plugin, what docs/cluster.md shows): the set-up prints
    the version of each it finds."""
    path = _bare_path(tmp_path)
    bin_dir = Path(path)
    missing = _bootstrap("--test", "--dry-run", env={"PATH": path})
    said = [line for line in missing.stdout.splitlines() if line.startswith("bootstrap: compose:")]
    assert said == [
        "bootstrap: compose: docker-compose not installed yet (would be installed above); "
        "docker compose not available (the docs' 'docker compose' commands run as "
        "'docker-compose' too)"
    ]
    _fake(bin_dir, "docker-compose", 'test "$*" = "version --short" && echo 1.29.2')
    _fake(bin_dir, "docker", 'test "$*" = "compose version --short" && echo 2.24.6')
    both = _bootstrap("--test", "--dry-run", env={"PATH": path})
    assert both.returncode == 0, both.stderr
    assert (
        "bootstrap: compose: docker-compose 1.29.2 (found); docker compose 2.24.6 (the docs' "
        "'docker compose' commands run as 'docker-compose' too)"
    ) in both.stdout.splitlines()
