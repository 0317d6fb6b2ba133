"""One model's server behind the gateway, and what a set of them holds in memory.

An engine is a server the gateway started itself (runtime/servers.start: own process group, own
log, loopback on a free port). Starting and stopping block, so the pool runs them in threads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from specctl.orchestrator.app import Resolved
from specctl.orchestrator.files import inside
from specctl.orchestrator.planning.plan import Plan
from specctl.orchestrator.runtime import servers
from specctl.orchestrator.runtime.servers import Started


def setting_of(plan: Plan) -> str:
    """The served setting as metrics and status label it: 'draft k=4', 'ngram k=8', 'off'."""
    return plan.short()


def footprint(plans: Iterable[tuple[Plan, bool]]) -> int:
    """Bytes a set of servers holds on its devices: each plan's own, with a model file that
    servers map and share (`shares`: the adapter says so) counted once."""
    seen: set[str] = set()
    total = 0
    for plan, shares in plans:
        total += plan.memory.device_bytes
        if not shares:
            continue
        for info, size in ((plan.target, plan.memory.target_bytes),
                           (plan.draft, plan.memory.draft_bytes)):
            if info is None or info.path is None:
                continue
            key = str(info.path.resolve())
            if key in seen:
                total -= size
            seen.add(key)
    return total


@dataclass(eq=False)
class Engine:
    """A server of one model (profile) in one setting. `ready` is set once it is healthy or
    its start failed (`error`)."""

    model: str
    resolved: Resolved
    log: Path
    slot: str = ""  # its key in the pool: the model, or "MODEL [SETTING]" for a route's
    started: Started | None = None
    error: str | None = None
    inflight: int = 0
    last_used: float = field(default_factory=time.monotonic)
    draining: bool = False  # a newer setting took over: it finishes what it has, then stops
    retired: bool = False  # stopped, or being stopped: never twice
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def plan(self) -> Plan:
        return self.resolved.plan

    @property
    def setting(self) -> str:
        return setting_of(self.plan)

    @property
    def shares(self) -> bool:
        return self.resolved.backend.shares_weights(self.plan)

    @property
    def alive(self) -> bool:
        return self.started is not None and self.started.server.alive

    @property
    def exit_code(self) -> int | None:
        return self.started.server.exit_code if self.started is not None else None

    def start(self, health_timeout: float, abort: Callable[[], bool]) -> None:
        """Blocking: serve the plan (its port already a free loopback one) until healthy."""
        self.started = servers.start(self.plan, self.resolved.backend, self.resolved.installed,
                                     self.log, f"gateway {self.model} ({self.setting})",
                                     health_timeout, abort=abort)

    def stop(self, grace: float) -> None:
        """Blocking: stop the whole server group."""
        if self.started is not None:
            self.started.stop(grace)


def engine_for(model: str, resolved: Resolved, logs: Path, slot: str = "",
               log_name: str = "") -> Engine:
    """A not yet started engine of `resolved`, on a free loopback port, logging under `logs`
    (`log_name`: the model's name, or a route server's)."""
    placed = replace(resolved, plan=resolved.plan.but(host="127.0.0.1",
                                                      port=servers.free_port()))
    log = inside(logs, log_name or model, ".log", "model name", prefix="gateway-")
    return Engine(model, placed, log, slot=slot or model)
