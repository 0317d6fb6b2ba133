"""Servers this process starts and stops itself: bench and tune (one per configuration, for the
length of a block) and the gateway (on demand). Own process group, own log, stopped whole. Not
supervised: a crash here is a failed measurement, or the gateway's to notice."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_exponential

from specctl.adapters.base import Adapter
from specctl.orchestrator.contract.launch import Endpoint, Installed, Launch
from specctl.orchestrator.errors import ServerError
from specctl.orchestrator.planning.plan import Plan
from specctl.orchestrator.runtime import procs
from specctl.orchestrator.runtime.supervise import apply_setup, server_env


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
    proc: subprocess.Popen[bytes]

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the whole group, SIGKILL after `grace`, reap the leader."""
        procs.stop_group(self.proc.pid, grace=grace)
        if self.proc.poll() is None:
            self.proc.wait(timeout=5)


def start(plan: Plan, backend: Adapter, installed: Installed, log: Path, label: str,
          health_timeout: float = 300.0, environ: Mapping[str, str] | None = None,
          abort: Callable[[], bool] = lambda: False) -> Started:
    """Start `plan` as given (its host and port) with output to `log`; return once healthy and
    set up. A server that exits, says its start failed, is not healthy in time, or whose start
    `abort()` calls off (its owner is closing) is stopped (whole group) and raises ServerError
    with the log's last lines."""
    launch = backend.launch(plan, installed)
    log.parent.mkdir(parents=True, exist_ok=True)
    environ = os.environ if environ is None else environ
    proc = procs.spawn(launch.argv, server_env(launch, environ), str(log), label)
    try:
        def healthy() -> bool:
            if abort():
                raise ServerError(f"{label} server: start called off")
            if proc.poll() is not None:
                raise ServerError(f"{label} server exited ({proc.returncode}) while starting:\n"
                                  f"{procs.tail(str(log))}")
            status = procs.health(launch.health_url)
            if status in launch.health_failed:
                raise ServerError(f"{label} server answered {status} to its health check: its "
                                  f"start failed:\n{procs.tail(str(log))}")
            return status == 200

        try:
            Retrying(stop=stop_after_delay(health_timeout), retry=retry_if_result(lambda v: not v),
                     wait=wait_exponential(multiplier=0.05, max=0.25))(healthy)
        except RetryError:
            raise ServerError(f"{label} server not healthy after {health_timeout:.0f} s; see "
                              f"{log}") from None
        apply_setup(launch)
    except BaseException:
        Started(Running(plan, launch, Endpoint.of(launch, environ), log), proc).stop()
        raise
    return Started(Running(plan, launch, Endpoint.of(launch, environ), log), proc)


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
