"""Servers this process starts and stops itself: bench and tune (one per configuration, for the
length of a block) and the gateway (on demand). A runtime/server.Server each (own process group,
own log, leashed to this process, stopped whole). Not supervised: a crash here is a failed
measurement, or the gateway's to notice."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.launch import Endpoint, Installed, Launch
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.errors import ServerError
from specctl.orchestrator.runtime.server import NotHealthy, Server, server_env


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Running:
    plan: Plan
    launch: Launch
    endpoint: Endpoint
    log: Path


@dataclass(frozen=True)
class Started:
    """A server this process started (own process group, own log), healthy."""

    running: Running
    server: Server

    @property
    def alive(self) -> bool:
        return self.server.alive

    @property
    def exit_code(self) -> int | None:
        return self.server.exit_code

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the whole group, SIGKILL after `grace`, reap the leader."""
        self.server.stop(grace)


def spawn(launch: Launch, log: Path, label: str, environ: Mapping[str, str] | None = None,
          grace: float = 10.0) -> Server:
    """Start `launch` (not waiting for it), output to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    env = server_env(launch, os.environ if environ is None else environ)
    return Server.spawn(launch.argv, env, str(log), label, grace)


def ready(server: Server, launch: Launch, label: str, health_timeout: float,
          abort: Callable[[], bool] = lambda: False) -> None:
    """Wait until `server` is healthy and set up; else stop it (whole group) and raise
    ServerError with the log's last lines."""
    try:
        try:
            server.wait_healthy(launch.health_url, launch.health_failed, health_timeout, abort)
        except NotHealthy as exc:
            if exc.called_off:
                raise ServerError(f"{label} server: {exc}") from None
            raise ServerError(f"{label} server {exc}:\n{server.tail()}") from None
        server.setup(launch.setup)
    except BaseException:
        server.stop()
        raise


def start(plan: Plan, backend: Adapter, installed: Installed, log: Path, label: str,
          health_timeout: float = 300.0, environ: Mapping[str, str] | None = None,
          abort: Callable[[], bool] = lambda: False) -> Started:
    """Start `plan` as given (its host and port) with output to `log`; return once healthy and
    set up. A server that exits, says its start failed, is not healthy in time, or whose start
    `abort()` calls off (its owner is closing) is stopped (whole group) and raises ServerError
    with the log's last lines."""
    launch = backend.launch(plan, installed)
    environ = os.environ if environ is None else environ
    server = spawn(launch, log, label, environ)
    ready(server, launch, label, health_timeout, abort)
    return Started(Running(plan, launch, Endpoint.of(launch, environ), log), server)


@contextmanager
def ephemeral(plan: Plan, backend: Adapter, installed: Installed, logs: Path, label: str,
              health_timeout: float = 300.0) -> Iterator[Running]:
    """Serve `plan` on a free loopback port until the block ends."""
    plan = plan.but(host="127.0.0.1", port=free_port())
    started = start(plan, backend, installed, logs / f"{plan.profile}.{label}.log", label,
                    health_timeout)
    try:
        yield started.running
    finally:
        started.stop()
