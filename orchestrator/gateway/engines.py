"""One server behind the gateway (an engine): its slot, its state and the moves between states;
what a set of engines holds in memory; how the pool starts and stops one (a `Runner`: the real
one runs runtime servers, gateway/owned.py; the pool's tests give it a fake).

States and the moves allowed between them (`Engine.move` is the one place that changes state):

    starting -> ready      healthy and set up: takes requests
    starting -> failed     did not start (exited, unhealthy, no room in the memory budget)
    starting -> retired    the gateway closed while it started
    ready    -> draining   a newer setting took its slot: it finishes its requests, takes no more
    ready    -> failed     it exited, or sent nothing within a bound (hung)
    ready    -> retired    stopped: idle past its keep-alive, evicted for memory, gateway closing
    draining -> failed     it exited or hung while finishing its requests
    draining -> retired    its last request finished (or the gateway closed)
    failed   -> retired    stopped and forgotten

A failed engine is retired at once (its process stopped); the next request for its slot starts
a new one. Retired is final.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from specctl.orchestrator.app import Resolved
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.errors import SpecctlError
from specctl.orchestrator.gateway.line import Line
from specctl.orchestrator.runtime import routed, servers
from specctl.orchestrator.runtime.servers import Running


class State(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    FAILED = "failed"
    RETIRED = "retired"


MOVES: dict[State, frozenset[State]] = {
    State.STARTING: frozenset({State.READY, State.FAILED, State.RETIRED}),
    State.READY: frozenset({State.DRAINING, State.FAILED, State.RETIRED}),
    State.DRAINING: frozenset({State.FAILED, State.RETIRED}),
    State.FAILED: frozenset({State.RETIRED}),
    State.RETIRED: frozenset(),
}


@dataclass(frozen=True)
class Slot:
    """Where the pool keeps an engine: a model's one server (`setting` None), or, where the
    model is routed by kind of request, the server of one of its route's settings."""

    model: str
    setting: str | None = None

    @property
    def routed(self) -> bool:
        return self.setting is not None

    def __str__(self) -> str:
        return self.model if self.setting is None else f"{self.model} [{self.setting}]"


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


class Handle(Protocol):
    """A started engine's process, as the pool sees it (runtime/servers.Started)."""

    @property
    def running(self) -> Running: ...

    @property
    def alive(self) -> bool: ...

    @property
    def exit_code(self) -> int | None: ...


class Runner(Protocol):
    """Starts and stops engines; both block (the pool calls them in threads)."""

    def start(self, engine: Engine, abort: Callable[[], bool]) -> Handle:
        """Serve the engine's plan until healthy; ServerError when it cannot."""
        ...

    def stop(self, engine: Engine, grace: float) -> None:
        """Stop the engine's process (whole group), if it has one."""
        ...


@dataclass(eq=False)
class Engine:
    """A server of one model in one setting, in one slot of the pool."""

    slot: Slot
    resolved: Resolved
    log: Path
    state: State = State.STARTING
    handle: Handle | None = None
    failure: SpecctlError | None = None  # why it failed
    waiting: str = ""  # while starting: what it waits for (room in the memory budget)
    inflight: int = 0  # requests holding one of its slots
    last_used: float = field(default_factory=time.monotonic)
    settled: asyncio.Event = field(default_factory=asyncio.Event)  # it left `starting`
    line: Line = field(init=False)  # requests waiting for a slot, in turn

    def __post_init__(self) -> None:
        self.line = Line(self.resolved.plan.parallel)

    def move(self, to: State) -> bool:
        """Change state, where `MOVES` allows it: True if it moved. A move that is not allowed
        (already failed, already retired, back to starting) changes nothing and returns False:
        of two parts of the pool that act on one engine, only the first acts."""
        if to not in MOVES[self.state]:
            return False
        self.state = to
        if to is not State.STARTING:
            self.settled.set()
        return True

    @property
    def model(self) -> str:
        return self.slot.model

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
    def usable(self) -> bool:
        """Takes requests now: ready and its process alive."""
        return self.state is State.READY and self.handle is not None and self.handle.alive

    @property
    def exit_code(self) -> int | None:
        return self.handle.exit_code if self.handle is not None else None


def engine_for(slot: Slot, resolved: Resolved, logs: Path) -> Engine:
    """A not yet started engine of `resolved` in `slot`, on a free loopback port, logging under
    `logs` (gateway-MODEL.log; a route's server: gateway-MODEL-SETTING.log)."""
    placed = replace(resolved, plan=resolved.plan.but(host="127.0.0.1",
                                                      port=servers.free_port()))
    log = routed.engine_log(logs, slot.model, placed.plan.short(), slot.routed)
    return Engine(slot, placed, log)
