"""Exclusive run dirs: created atomically, locked for the life of the run that owns them.

A run owns its dir through an exclusive ``fcntl.flock`` on :data:`LOCK_FILE` inside it, taken
before any other file of the run is opened (``locust.log``, ``run.json``, the journal), so a
second run given the same dir is refused (:class:`RunDirBusy`, naming the dir and the holder's
pid) without touching a file of the first. The kernel drops the lock when the last process
holding it ends, crashed or not: a dead run's dir can then be read, reported or (with
``--llm-overwrite``) reused, and the lock file says which process held it last.

``locust-llm run`` takes the lock and hands it to the Locust master it starts (the open file
is inherited, its number in :data:`INHERITED_ENV`): the master's own claim of the same dir
adopts it instead of blocking on it, and the dir stays locked while either process lives.

A default name (``reports/<prefix><UTC time>``) is made with ``mkdir`` that fails on an
existing name, with a ``-2``, ``-3`` ... suffix on a collision, so two runs started in the same
second get different dirs (:func:`new_run_dir`).
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from locust_llm.errors import InputError

#: the lock file inside a run dir (its content: the holder's pid and start time)
LOCK_FILE = "run.lock"
#: environment variable naming the inherited descriptor of a parent's lock (``run`` -> master)
INHERITED_ENV = "LOCUST_LLM_RUN_DIR_LOCK_FD"
#: names tried for one default stamp before giving up (``-2`` ... ``-99``)
MAX_SUFFIX = 99
_A_FILE = "a file of that name is in the way"
_CANNOT = "cannot create the run dir, not writable"


class RunDirBusy(InputError):
    """The run dir is locked by another live run."""


@dataclass
class RunDirClaim:
    """A held lock on ``path``; :meth:`release` (or the process's end) lets it go."""

    path: Path
    fd: int
    _released: bool = field(default=False, repr=False)

    def child_env(self) -> dict[str, str]:
        """The variable that lets a child given :attr:`fd` (``pass_fds``) adopt this lock."""
        return {INHERITED_ENV: str(self.fd)}

    def release(self) -> None:
        if not self._released:
            self._released = True
            os.close(self.fd)  # this process's hold ends; an inheriting child keeps its own


def utc_stamp() -> str:
    """The UTC time of a default run dir's name, to the second."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def new_run_dir(parent: Path, prefix: str, *, flag: str = "--llm-run-dir") -> Path:
    """Create and return a fresh ``parent/<prefix><stamp>[-N]`` that no other run has: the
    first name whose ``mkdir`` succeeds (an existing name is skipped, never reused)."""
    stamp = utc_stamp()
    _make_parent(parent, flag)
    for n in range(1, MAX_SUFFIX + 1):
        path = parent / (f"{prefix}{stamp}" if n == 1 else f"{prefix}{stamp}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise InputError(f"{flag}: cannot create a run dir in {parent} ({_why(exc)})") from None
        return path
    raise InputError(f"{flag}: {MAX_SUFFIX} run dirs named {prefix}{stamp} already exist")


def lock_run_dir(run_dir: Path, *, flag: str = "--llm-run-dir") -> RunDirClaim:
    """Create ``run_dir`` if needed and lock it for this run: InputError naming ``flag`` when it
    cannot be a directory or is not writable, :class:`RunDirBusy` when a live run holds it
    (nothing in the dir is written then)."""
    _make_parent(run_dir, flag)
    if not run_dir.is_dir():
        raise InputError(f"{flag} {run_dir}: {_CANNOT} ({_A_FILE})")
    lock_path = run_dir / LOCK_FILE
    adopted = _inherited(lock_path)
    if adopted is not None:
        return RunDirClaim(run_dir, adopted)
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise InputError(f"{flag} {run_dir}: the run dir is not writable ({_why(exc)})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(fd)
        os.close(fd)
        raise RunDirBusy(
            f"run dir {run_dir} is in use by another run ({holder}); wait for it to end or "
            f"give another {flag}"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()} since {utc_stamp()}\n".encode(), 0)
    return RunDirClaim(run_dir, fd)


def holder(run_dir: Path) -> str:
    """What the lock file says of its last holder ("" when there is none)."""
    try:
        return (run_dir / LOCK_FILE).read_text().strip()
    except OSError:
        return ""


def is_locked(run_dir: Path) -> bool:
    """True while a live process holds ``run_dir``'s lock."""
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _make_parent(path: Path, flag: str) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise InputError(f"{flag} {path}: {_CANNOT} ({_A_FILE})") from None
    except OSError as exc:
        raise InputError(f"{flag} {path}: {_CANNOT} ({_why(exc)})") from None


def _inherited(lock_path: Path) -> int | None:
    """The descriptor a parent passed for this very lock file, else None."""
    raw = os.environ.get(INHERITED_ENV, "")
    if not raw.isdigit():
        return None
    fd = int(raw)
    try:
        mine, theirs = os.fstat(fd), os.stat(lock_path)
    except OSError:
        return None
    if (mine.st_dev, mine.st_ino) != (theirs.st_dev, theirs.st_ino):
        return None
    try:  # the same open file as the parent's: already held, so this succeeds at once
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return None
    os.set_inheritable(fd, False)
    return fd


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "pid unknown"


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__
