"""What a gateway owns, written where the next one finds it: one state file per gateway
(`gateway-PORT.json` in the state dir) naming the gateway (pid, create time, command line) and
each engine it started (pid and process group of the engine's leash, create time, command
line), with the routes `specctl status` shows. Rewritten as engines start and stop; removed at
a clean stop.

Engines die with their gateway (runtime/leash.py). Should one outlive it anyway (its leash was
stopped, or killed alone), the next gateway on this state dir reaps it: at its start it reads
every gateway's file, and for each gateway that is no longer running it stops the recorded
engines, each only while its pid still has the recorded create time and command line
(`procs.ours`), never a bare pid. `specctl status` reads every file and shows the gateways
still running; a file whose gateway is gone is left for the next gateway to reap.

`Engines` is the pool's real Runner: runtime servers, recorded here between spawn and stop.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from specctl.orchestrator.contract.launch import Endpoint
from specctl.orchestrator.errors import StateError
from specctl.orchestrator.files import inside, read_back, write_atomic
from specctl.orchestrator.gateway.engines import Engine
from specctl.orchestrator.gateway.live import Routed
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.runtime import procs, servers
from specctl.orchestrator.runtime.server import Server

PREFIX = "gateway-"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


class Owned(_Strict):
    """One engine a gateway started: its leash is its process group's leader."""

    model: str = Field(max_length=64)
    setting: str = Field(max_length=200)
    port: int = Field(ge=1, le=65535)
    pid: int = Field(ge=1)
    pgid: int = Field(ge=1)
    started: float = Field(ge=0)
    cmdline: list[str] = Field(max_length=4096)


class Gateway(_Strict):
    """A gateway's state file (read back by the next gateway and by `specctl status`)."""

    pid: int = Field(ge=1)
    started: float = Field(ge=0)
    cmdline: list[str] = Field(max_length=4096)
    url: str = Field(max_length=300)
    engines: list[Owned] = Field(default_factory=list, max_length=256)
    routes: dict[str, Routed] = Field(default_factory=dict, max_length=256)

    def running(self) -> bool:
        return procs.ours(self.pid, self.started, self.cmdline) is not None


def path_for(state: Path, port: int) -> Path:
    return inside(state, str(port), ".json", "port", prefix=PREFIX)


def _load(path: Path) -> Gateway | None:
    return read_back(path, lambda text: Gateway.model_validate_json(text, strict=True),
                     "gateway state", "It is written again while its gateway runs.")


def recorded(state: Path, say: Say) -> list[tuple[Path, Gateway]]:
    """Every gateway state file in `state` (one that fails validation set aside, said)."""
    found = []
    for path in sorted(state.glob(f"{PREFIX}*.json")) if state.is_dir() else ():
        try:
            loaded = _load(path)
        except StateError as exc:
            say(str(exc))
            continue
        if loaded is not None:
            found.append((path, loaded))
    return found


def running(state: Path, say: Say) -> list[Gateway]:
    """The gateways on this state dir that are running now (`specctl status`)."""
    return [g for _, g in recorded(state, say) if g.running()]


def reap(state: Path, grace: float, say: Say) -> int:
    """Stop the engines that gateways no longer running left behind (each checked against its
    recorded identity) and remove their files. The number of engines stopped."""
    stopped = 0
    for path, gone in recorded(state, say):
        if gone.running():
            continue
        for engine in gone.engines:
            leader = procs.ours(engine.pid, engine.started, engine.cmdline)
            if procs.stop_recorded_group(engine.pgid, leader, grace):
                say(f"stopped {engine.model} ({engine.setting}, pid {engine.pid}), left running "
                    f"by a gateway that is gone (pid {gone.pid})")
                stopped += 1
        path.unlink(missing_ok=True)
    return stopped


class Ledger:
    """This gateway's state file, kept current (engines start and stop in worker threads)."""

    def __init__(self, path: Path, url: str) -> None:
        started, cmdline = procs.identity(os.getpid()) or (0.0, [])
        self.path, self._lock = path, threading.Lock()
        self._gateway = Gateway(pid=os.getpid(), started=started, cmdline=cmdline, url=url)
        self._engines: dict[int, Owned] = {}
        self._routes: dict[str, Any] = {}

    def add(self, engine: Engine, server: Server) -> None:
        started, cmdline = server.identity()
        with self._lock:
            self._engines[id(engine)] = Owned(
                model=engine.model, setting=engine.setting, port=engine.plan.port,
                pid=server.pid, pgid=server.pid, started=started or 0.0, cmdline=cmdline)
            self._write()

    def remove(self, engine: Engine) -> None:
        with self._lock:
            if self._engines.pop(id(engine), None) is not None:
                self._write()

    def routes(self, routes: dict[str, Any]) -> None:
        with self._lock:
            if routes != self._routes:
                self._routes = routes
                self._write()

    def write(self) -> None:
        """The first write, at the start: one that fails stops the gateway in one line."""
        with self._lock:
            write_atomic(self.path, self._text())

    def _write(self) -> None:
        with contextlib.suppress(OSError, StateError):  # for status and the next gateway:
            write_atomic(self.path, self._text())  # serving goes on without it

    def _text(self) -> str:
        return self._gateway.model_copy(update={
            "engines": list(self._engines.values()),
            "routes": {m: Routed.model_validate(r) for m, r in self._routes.items()},
        }).model_dump_json(indent=1)

    def close(self) -> None:
        """Remove the file, if it is still this gateway's (another that raced for the port and
        won may have written it since)."""
        with contextlib.suppress(StateError):
            found = _load(self.path)
            if found is not None and found.pid == self._gateway.pid:
                self.path.unlink(missing_ok=True)


class Engines:
    """The pool's Runner: each engine a runtime server on its loopback port, recorded in the
    ledger from its spawn until it is stopped."""

    def __init__(self, ledger: Ledger | None, health_timeout: float, grace: float) -> None:
        self.ledger, self.health_timeout, self.grace = ledger, health_timeout, grace

    def start(self, engine: Engine, abort: Callable[[], bool]) -> servers.Started:
        plan = engine.plan
        launch = engine.resolved.launch()
        label = f"gateway {engine.model} ({engine.setting})"
        server = servers.spawn(launch, engine.log, label, grace=self.grace)
        if self.ledger is not None:
            self.ledger.add(engine, server)
        try:
            servers.ready(server, launch, label, self.health_timeout, abort)
        except BaseException:
            if self.ledger is not None:
                self.ledger.remove(engine)
            raise
        running = servers.Running(plan, launch, Endpoint.of(launch, os.environ), engine.log)
        return servers.Started(running, server)

    def stop(self, engine: Engine, grace: float) -> None:
        if isinstance(engine.handle, servers.Started):
            engine.handle.stop(grace)
        if self.ledger is not None:
            self.ledger.remove(engine)
