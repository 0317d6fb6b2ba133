"""What `up` hands its detached supervisor: the launch resolved in the parent, so what was printed
is what runs and the child never plans again. A file in the runs dir, mode 0600, validated on
read like any other input from disk, and removed once read. The launch is the contract's `Launch`
model itself, written whole; one missing a field was not written by `up`."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from specctl.orchestrator.contract.launch import Launch
from specctl.orchestrator.errors import StateError
from specctl.orchestrator.files import (
    NAME_PATTERN,
    inside,
    read_text,
    remove_own,
    write_atomic,
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Ready(_Strict):
    """A launch ready to supervise: what runs, where, and the record `status` shows."""

    name: str = Field(pattern=NAME_PATTERN)
    host: str
    port: int = Field(ge=1, le=65535)
    spec: str
    launch_: Launch = Field(alias="launch")
    files: list[str] = Field(default_factory=list)  # model files that must still be there
    plan: dict[str, Any] = Field(default_factory=dict)

    @field_validator("launch_", mode="before")
    @classmethod
    def _whole(cls, value: Any) -> Any:
        """`up` writes every field of the launch: a file that lacks one is not its."""
        if isinstance(value, dict) and (missing := sorted(set(Launch.model_fields) - set(value))):
            raise ValueError(f"the launch has no {', '.join(missing)}")
        return value

    @classmethod
    def of(cls, name: str, host: str, port: int, spec: str, launch: Launch, files: list[str],
           plan: dict[str, Any]) -> Ready:
        return cls.model_validate({"name": name, "host": host, "port": port, "spec": spec,
                                   "launch": launch, "files": files, "plan": plan})

    def launch(self) -> Launch:
        return self.launch_


_HANDOFF = re.compile(NAME_PATTERN.strip("^$") + r"\.handoff-[0-9]{1,10}\.json")


def path_for(runs: Path, name: str, writer: int) -> Path:
    """One file per `up` (its pid): two `up`s of one profile at once must not take each
    other's launch; the second then meets the first's lock and says so."""
    return inside(runs, name, f".handoff-{writer}.json", "profile name")


def write(runs: Path, ready: Ready) -> Path:
    path = path_for(runs, ready.name, os.getpid())
    write_atomic(path, ready.model_dump_json(by_alias=True, indent=1) + "\n")
    return path


def take(path: Path, runs: Path) -> Ready:
    """Read, validate and then remove the handoff file `up` wrote in `runs`. Anything else
    (another folder, a link, a FIFO, another user's file, one that fails validation) is a
    one-line error and is left where it is: `--handoff` never deletes what it was not given by
    `up`."""
    again = "run `specctl up` again"
    if not _HANDOFF.fullmatch(path.name) or \
            os.path.realpath(path.parent) != os.path.realpath(runs):
        raise StateError(f"--handoff takes the launch file `up` wrote in {runs}, not {path}; "
                         f"{again}")
    try:
        text = read_text(path, owned=True)
    except (OSError, StateError) as exc:
        raise StateError(f"cannot read the launch handed over by `up` ({path}: "
                         f"{getattr(exc, 'strerror', None) or exc}); {again}") from None
    try:
        ready = Ready.model_validate_json(text)
    except (ValueError, ValidationError, RecursionError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise StateError(f"the launch handed over by `up` ({path.name}) is not valid ({first}); "
                         f"{again}") from None
    remove_own(path, runs)
    return ready

