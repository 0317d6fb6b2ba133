"""Short-lived servers for bench and tune: one per configuration, own process group, own log,
stopped (whole group) on exit. Not supervised: a crash here is a failed measurement."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
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


@contextmanager
def ephemeral(plan: Plan, backend: Adapter, installed: Installed, logs: Path, label: str,
              health_timeout: float = 300.0) -> Iterator[Running]:
    """Serve `plan` on a free loopback port until the block ends."""
    plan = plan.but(host="127.0.0.1", port=free_port())
    launch = backend.launch(plan, installed)
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{plan.profile}.{label}.log"
    env = server_env(launch, os.environ)
    proc = procs.spawn(launch.argv, env, str(log), label)
    try:
        def healthy() -> bool:
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
        yield Running(plan, launch, Endpoint.of(launch, os.environ), log)
    finally:
        procs.stop_group(proc.pid, grace=10)
        if proc.poll() is None:
            proc.wait(timeout=5)
