"""Run state: one JSON file and one lock per profile, written atomically, readable by the user only.

A state file that cannot be parsed is reported and set aside (renamed `.corrupt`), never trusted:
`down` then falls back to what it can prove (the lock holder, the process group in the record).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
from filelock import FileLock, Timeout

from specctl.orchestrator.errors import ServerError, StateError
from specctl.orchestrator.files import write_atomic


def check_writable(folder: Path) -> None:
    """Fail early, in one line, when state cannot be written (disk full, read-only)."""
    probe = folder / ".write-check"
    write_atomic(probe, " " * 8192)  # room for a state file and some log lines
    probe.unlink(missing_ok=True)


@dataclass
class RunState:
    profile: str
    supervisor_pid: int
    supervisor_started: float  # psutil create_time, to tell a reused pid apart
    url: str
    port: int
    host: str
    log: str
    status: str = "starting"  # starting | running | restarting | failed | stopped
    server_pid: int | None = None
    server_pgid: int | None = None
    server_started: float | None = None
    started_at: float = field(default_factory=time.time)
    restarts: int = 0
    error: str | None = None
    spec: str = ""
    plan: dict[str, Any] = field(default_factory=dict)
    metrics_url: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def state_path(runs: Path, profile: str) -> Path:
    return runs / f"{profile}.json"


def lock_path(runs: Path, profile: str) -> Path:
    return runs / f"{profile}.lock"


def save(runs: Path, state: RunState) -> None:
    write_atomic(state_path(runs, state.profile), state.to_json())


def load(runs: Path, profile: str) -> RunState | None:
    """The recorded run, or None. A corrupt file is moved aside and reported."""
    path = state_path(runs, profile)
    try:
        data = json.loads(path.read_text())
        return RunState(**data)
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, TypeError, UnicodeDecodeError) as exc:
        aside = path.with_suffix(".json.corrupt")
        os.replace(path, aside)
        raise StateError(f"state file {path} was unreadable ({type(exc).__name__}); moved it to "
                         f"{aside.name}. Check for a leftover server with `ps`, then run "
                         "`specctl up` again") from None


@contextlib.contextmanager
def profile_lock(runs: Path, profile: str) -> Iterator[None]:
    """Held by a profile's supervisor for its whole life; a second one fails at once."""
    runs.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = FileLock(str(lock_path(runs, profile)))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise ServerError(f"profile {profile} is already up (another specctl holds its lock); "
                          f"`specctl down {profile}` first") from None
    try:
        yield
    finally:
        lock.release()


def remove(runs: Path, profile: str) -> None:
    state_path(runs, profile).unlink(missing_ok=True)


def all_profiles(runs: Path) -> list[str]:
    return sorted(p.stem for p in runs.glob("*.json")) if runs.is_dir() else []


def alive(pid: int | None, started: float | None) -> bool:
    """Is `pid` still the process we started (same create time), and not a zombie?"""
    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        if started is not None and abs(proc.create_time() - started) > 1.0:
            return False
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None
