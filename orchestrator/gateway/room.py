"""Room in the memory budget for a server about to start: idle servers stop, least recently used
first, until it fits beside the rest; a busy one is waited for, within the start bound. A server
that cannot fit is refused in words that say so, with the figures (`NoRoom`): 507 when it
needs more than the whole budget, 503 (and Retry-After) while busy servers hold the room."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from specctl.orchestrator.errors import ServerError
from specctl.orchestrator.gateway.engines import Engine, Slot, State, footprint
from specctl.orchestrator.sizes import in_gib


class NoRoom(ServerError):
    """No room within the memory budget for a server (HTTP `status`: 507 or 503)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def held(engines: list[Engine]) -> int:
    return footprint([(e.plan, e.shares) for e in engines])


class Holder(Protocol):
    """What room is made in (the pool)."""

    current: dict[Slot, Engine]
    metrics: Any

    @property
    def start_wait(self) -> float: ...

    def clock(self) -> float: ...

    def say(self, line: str) -> None: ...

    def resident(self) -> list[Engine]: ...

    def budget_for(self, engines: list[Engine]) -> int: ...

    async def retire(self, engine: Engine, reason: str) -> None: ...

    def drain(self, engine: Engine) -> None: ...


class Room:
    def __init__(self, pool: Holder, sleep: Callable[[float], Awaitable[None]]) -> None:
        self.pool, self.sleep = pool, sleep

    async def make(self, engine: Engine, replacing: Engine | None) -> None:
        """Stop idle servers until `engine` fits; with `replacing` (the server it takes over
        from) and no room beside it, that one drains first and `engine` takes its slot now."""
        pool = self.pool
        alone, budget = held([engine]), pool.budget_for([engine])
        if alone > budget:
            raise NoRoom(f"no room within the memory budget: {engine.model} "
                         f"({engine.setting}) needs {in_gib(alone):.2f} GiB, more than the "
                         f"whole budget of {in_gib(budget):.2f} GiB (--memory, or a smaller "
                         "context in the profile)", 507)
        deadline = pool.clock() + pool.start_wait
        while True:
            others = [e for e in pool.resident() if e is not engine]
            need, budget = held([*others, engine]), pool.budget_for([*others, engine])
            if need <= budget:
                return
            idle = [e for e in others if e.inflight == 0 and e.state is State.READY
                    and e is not replacing]
            if idle:
                victim = min(idle, key=lambda e: e.last_used)
                pool.say(f"stopping {victim.model} ({victim.setting}), the least recently used, "
                         f"to make room for {engine.model}: {in_gib(need):.2f} GiB would pass "
                         f"the budget of {in_gib(budget):.2f} GiB")
                await pool.retire(victim, "memory")
                continue
            if replacing is not None:  # no room beside the old setting: it finishes first
                pool.drain(replacing)
                pool.current[engine.slot] = engine
                replacing = None
            busy = held([e for e in others if e.state is not State.STARTING])
            engine.waiting = (f"no room within the memory budget: {engine.model} "
                              f"({engine.setting}) needs {in_gib(held([engine])):.2f} GiB beside "
                              f"{in_gib(busy):.2f} GiB held by servers busy with requests; the "
                              f"budget is {in_gib(budget):.2f} GiB; try again shortly")
            if pool.clock() > deadline:
                raise NoRoom(engine.waiting, 503)
            await self.sleep(0.2)

    def gauge(self, up: list[Engine]) -> None:
        metrics = self.pool.metrics
        metrics.memory.set(held(up))
        if up:
            metrics.budget.set(self.pool.budget_for(up))
