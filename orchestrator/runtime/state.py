"""Run state: one JSON file and one lock per profile, written atomically, readable by the user only.

A state file is validated on every read by the model it was written with; one that fails is
reported and set aside (renamed `.corrupt`), never trusted: `down` then falls back to what it
can prove (supervisors found by their command line). The processes it records carry their
identity (create time, command line), checked before any signal (runtime/procs.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from filelock import FileLock, Timeout
from pydantic import BaseModel, ConfigDict, Field

from specctl.orchestrator.errors import NameRefusedError, ServerError
from specctl.orchestrator.files import (
    NAME_PATTERN,
    check_name,
    inside,
    private_dir,
    read_back,
    write_atomic,
)
from specctl.orchestrator.runtime.procs import PORT_FIX


def check_writable(folder: Path) -> None:
    """Fail early, in one line, when state cannot be written (disk full, read-only)."""
    probe = folder / ".write-check"
    write_atomic(probe, " " * 8192)  # room for a state file and some log lines
    probe.unlink(missing_ok=True)


class RunState(BaseModel):
    """One run as its supervisor records it; the same model checks what is read back."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, defer_build=True)

    profile: str = Field(pattern=NAME_PATTERN)
    supervisor_pid: int = Field(gt=0)
    supervisor_started: float = Field(ge=0)  # psutil create_time, to tell a reused pid apart
    url: str
    port: int = Field(ge=1, le=65535)
    host: str
    log: str
    status: Literal["starting", "running", "restarting", "failed", "stopped"] = "starting"
    server_pid: int | None = Field(None, gt=0)
    server_pgid: int | None = Field(None, gt=0)
    server_started: float | None = Field(None, ge=0)
    started_at: float = Field(default_factory=time.time, ge=0)
    restarts: int = Field(0, ge=0)
    error: str | None = None
    spec: str = ""
    plan: dict[str, Any] = Field(default_factory=dict)
    metrics_url: str | None = None
    supervisor_cmdline: list[str] = Field(default_factory=list)  # identity, with the times
    server_cmdline: list[str] = Field(default_factory=list)

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"


def state_path(runs: Path, profile: str) -> Path:
    return inside(runs, profile, ".json", "profile name")


def lock_path(runs: Path, profile: str) -> Path:
    return inside(runs, profile, ".lock", "profile name")


def save(runs: Path, state: RunState) -> None:
    write_atomic(state_path(runs, state.profile), state.to_json())


def _parse(profile: str, text: str) -> RunState:
    run = RunState.model_validate_json(text)
    if run.profile != profile:
        raise ValueError(f"it records profile {run.profile}")
    return run


def load(runs: Path, profile: str) -> RunState | None:
    """The recorded run, or None. One that fails validation is moved aside and reported."""
    return read_back(state_path(runs, profile), lambda text: _parse(profile, text),
                     "state file", "Check for a leftover server with `ps`, then run "
                     "`specctl up` again")


@contextlib.contextmanager
def profile_lock(runs: Path, profile: str) -> Iterator[None]:
    """Held by a profile's supervisor for its whole life; a second one fails at once."""
    private_dir(runs)
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


@contextlib.contextmanager
def port_lock(runs: Path, port: int) -> Iterator[None]:
    """Held by a supervisor for its whole life: one run per port. Two `up`s of two profiles on
    one port at the same moment both find it free; the second to take this lock fails at once,
    in one line, before it starts anything."""
    folder = runs / "ports"
    private_dir(folder)
    lock = FileLock(str(inside(folder, str(port), ".lock", "port")))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise ServerError(f"port {port} is in use by another specctl run (starting or serving; "
                          f"`specctl status`): stop it or {PORT_FIX}") from None
    try:
        yield
    finally:
        lock.release()


def remove(runs: Path, profile: str) -> None:
    state_path(runs, profile).unlink(missing_ok=True)


def _is_name(stem: str) -> bool:
    try:
        check_name(stem)
    except NameRefusedError:
        return False
    return ".handoff-" not in stem


def all_profiles(runs: Path) -> list[str]:
    """The runs recorded in `runs` (files whose names are not run names are not runs)."""
    if not runs.is_dir():
        return []
    return sorted(p.stem for p in runs.glob("*.json") if _is_name(p.stem))
