"""The gateway's servers (engines, gateway/engines.py): started on a slot's first request, kept
while used, stopped after their keep-alive, evicted least recently used first when a start
would pass the memory budget (gateway/room.py), failed and stopped when they die or hang (the
next request starts the slot anew), and replaced when a saved tune changes what a slot serves
(`retune`: the new server starts beside the old, takes the new requests once ready, and the
old one drains).

Each slot's current engine is in `current`; every engine not yet retired (current, starting
beside one it replaces, draining) is in `engines`. Everything here runs on the gateway's event
loop; starting and stopping block, so they run in threads through the `Runner`. Nothing here
plans: a model's plan and route come from gateway/plans.py, resolved at start and when the
saved tune changes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from specctl.orchestrator.app import Resolved
from specctl.orchestrator.config.profiles import Profile
from specctl.orchestrator.errors import ServerError, SpecctlError
from specctl.orchestrator.gateway.busy import Recent
from specctl.orchestrator.gateway.engines import Engine, Runner, Slot, State, engine_for
from specctl.orchestrator.gateway.metrics import Metrics
from specctl.orchestrator.gateway.plans import Plans, Routing, Served, tuned_signature
from specctl.orchestrator.gateway.room import NoRoom, Room
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.measure.route.classify import Facts


class Unknown(SpecctlError):
    """No such model behind the gateway (HTTP 404)."""


class NotReady(SpecctlError):
    """The model's server is not ready within the request's bound (HTTP 503, Retry-After)."""


class StartFailed(ServerError):
    """The model's server could not start (HTTP 502); the next request tries again."""


class Moved(SpecctlError):
    """The engine a request waited for stopped taking requests (a newer one took its slot):
    the request is placed again."""


MAX_MOVES = 4  # times a waiting request is placed again when its engine is replaced


@dataclass(frozen=True)
class PoolSettings:
    budget: int | None = None  # bytes the resident servers may hold; None: the plans' budget
    start_wait: float = 120.0  # a request waits this long for its server, then gets a 503
    queue_wait: float = 300.0  # ... and this long in line for one of its slots (gateway/line)
    grace: float = 10.0  # SIGTERM, then SIGKILL of a server's group
    tick: float = 0.5  # how often keep-alives, crashes and tuned results are checked


class Pool:
    def __init__(self, plans: Plans, options: PoolSettings, metrics: Metrics, say: Say,
                 runner: Runner, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.plans, self.options, self.metrics = plans, options, metrics
        self.say, self.runner, self.clock = say, runner, clock
        self.current: dict[Slot, Engine] = {}  # the engine each slot's requests go to
        self.engines: list[Engine] = []  # every engine not yet retired
        self.room = Room(self, sleep)
        self.last_request = clock()
        self.recent = Recent(clock)  # the load a routed request is decided at
        self.closing = threading.Event()
        self._locks: dict[Slot, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._tuned = tuned_signature(plans.app.dirs.tuned)
        for model, served in plans.served.items():
            self._routed(model, served.routing)

    @property
    def profiles(self) -> dict[str, Profile]:
        return self.plans.profiles

    @property
    def start_wait(self) -> float:
        return self.options.start_wait

    def _routed(self, model: str, routing: Routing) -> None:
        self.say(f"{model}: {routing.why}")

    # -- requests ----------------------------------------------------------------------------
    async def acquire(self, model: str, facts: Facts | None = None,
                      load: int | None = None) -> Engine:
        """The ready server for a request to `model` (`facts`: its kind, prompt characters
        and max_tokens, for the route; `load`: the model's requests with it, at its arrival),
        counted busy until `release`; started if need be. A routed request whose server is
        down or starting goes to another of the model's route that is up."""
        if model not in self.plans.served:
            names = ", ".join(sorted(self.plans.served)) or "none"
            raise Unknown(f"model {model!r} is not served here; /v1/models lists {names}")
        arrived = self.last_request = self.clock()
        load = self.load(model) + 1 if load is None else load
        for _ in range(MAX_MOVES):
            engine = await self._place(model, facts, arrived, load)
            self.metrics.queued.labels(model).inc()
            try:
                await engine.line.enter(self.options.queue_wait - (self.clock() - arrived),
                                        f"{model} ({engine.setting})")
            except Moved:
                continue
            finally:
                self.metrics.queued.labels(model).dec()
            engine.inflight += 1
            engine.last_used = self.clock()
            self.metrics.inflight.labels(model).inc()
            self.metrics.queue.labels(model).observe(self.clock() - arrived)
            return engine
        raise NotReady(f"{model}'s servers kept changing while the request waited; try again")

    async def _place(self, model: str, facts: Facts | None, arrived: float,
                     load: int) -> Engine:
        """The engine a request goes to, ready (started if need be)."""
        served = self.plans.served[model]
        slot, _choice = served.slot_for(facts, load, lambda line: self.say(f"{model}: {line}"))
        engine = await self._current(slot, served)
        if slot.routed and not engine.usable:
            engine = next((e for s, e in self.current.items()
                           if s.model == model and s.routed and e.usable), engine)
        await self._settled(engine, self.options.start_wait - (self.clock() - arrived))
        return engine

    async def warm(self) -> None:
        """Start every model's servers now (each member of a route), not on a first request:
        `up` serves through the gateway and is up once they are (`warmed`)."""
        for model, served in self.plans.served.items():
            route = served.routing.route
            slots = [Slot(model, m.setting) for m in route.members] if route is not None and \
                served.learned is not None else [Slot(model)]
            for slot in slots:
                await self._current(slot, served)

    def warmed(self) -> str | None:
        """None while a warmed server starts; '' once all are up; else why one failed."""
        if any(e.state is State.STARTING for e in self.engines):
            return None
        failed = [e for e in self.engines if e.failure is not None]
        return "; ".join(f"{e.model} ({e.setting}): {e.failure}" for e in failed)

    def load(self, model: str) -> int:
        """The model's requests in its servers' slots and in line for them."""
        return sum(e.line.load for e in self.engines if e.model == model)

    def load_line(self, model: str) -> str:
        """The load in words: '3 in the slots of 4, 1 waiting' ('' with no server up)."""
        up = [e for e in self.engines if e.model == model]
        if not up:
            return ""
        busy, slots = sum(e.line.busy for e in up), sum(e.line.slots for e in up)
        waiting = sum(len(e.line.waiting) for e in up)
        return f"{busy} in the slots of {slots}" + (f", {waiting} waiting" if waiting else "")

    async def _settled(self, engine: Engine, left: float) -> None:
        """Wait (up to `left` s) until `engine` takes requests, or say why it does not."""
        try:
            if not engine.settled.is_set():
                await asyncio.wait_for(asyncio.shield(engine.settled.wait()), max(left, 0.0))
        except TimeoutError:
            if engine.waiting:
                raise NoRoom(engine.waiting, 503) from None
            raise NotReady(f"{engine.model} is still starting after "
                           f"{self.options.start_wait:.0f} s; try again shortly") from None
        if isinstance(engine.failure, NoRoom):
            raise engine.failure
        if engine.failure is not None:
            raise StartFailed(f"{engine.model} could not start: {engine.failure}")
        if engine.state is not State.READY:
            raise StartFailed(f"{engine.model}'s server stopped before it could take the "
                              "request; the next request starts it again")

    def release(self, engine: Engine) -> None:
        engine.line.leave()
        engine.inflight -= 1
        engine.last_used = self.last_request = self.clock()
        self.metrics.inflight.labels(engine.model).dec()
        if engine.inflight == 0 and (engine.state is State.DRAINING or
                                     self._keep_alive(engine) == 0):
            self.spawn(self.retire(engine, "swap" if engine.state is State.DRAINING
                                   else "keep-alive"))

    def fail(self, engine: Engine, why: str, reason: str = "hung") -> None:
        """The engine died or hung: failed now, stopped now (`reason` counts the stop); the
        next request starts its slot anew."""
        if engine.move(State.FAILED):
            engine.failure = ServerError(why)
            engine.line.close(StartFailed(f"{engine.model}'s server {why}; the next request "
                                          "starts it again"))
            self.say(f"{engine.model} ({engine.setting}) {why}; the next request starts it "
                     "again")
            self.spawn(self.retire(engine, reason))

    async def _current(self, slot: Slot, served: Served) -> Engine:
        """The slot's current engine (maybe still starting); one is started when there is
        none (never started, failed, retired)."""
        async with self._locks.setdefault(slot, asyncio.Lock()):
            engine = self.current.get(slot)
            if engine is not None and engine.state is State.READY and not engine.usable:
                self.fail(engine, f"exited with code {engine.exit_code}", "died")  # since the
            if engine is not None and engine.state in (State.STARTING, State.READY):  # tick
                return engine
            resolved = served.plan_for(slot)
            if resolved is None:  # cannot happen: the slot came from `served`
                raise StartFailed(f"{slot} is not served")
            return self._begin(slot, resolved)

    def _begin(self, slot: Slot, resolved: Resolved, replacing: Engine | None = None
               ) -> Engine:
        engine = engine_for(slot, resolved, self.plans.app.dirs.logs)
        self.engines.append(engine)
        if replacing is None:
            self.current[slot] = engine
            self.spawn(self.start(engine))
        return engine

    # -- starting and stopping ---------------------------------------------------------------
    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def start(self, engine: Engine, replacing: Engine | None = None) -> None:
        """Start `engine` (making room first); on failure, say why and retire it."""
        try:
            await self.room.make(engine, replacing)
            engine.waiting = ""
            self.say(f"starting {engine.model} ({engine.setting}) on port {engine.plan.port}")
            engine.handle = await asyncio.to_thread(self.runner.start, engine,
                                                    self.closing.is_set)
        except SpecctlError as exc:
            engine.failure, engine.waiting = exc, ""
            engine.move(State.FAILED)
            self.say(f"{engine.model} ({engine.setting}) did not start: {exc}")
            await self.retire(engine, "failed")
            return
        if engine.move(State.READY):
            self.metrics.starts.labels(engine.model, engine.setting).inc()
            self.metrics.resident.labels(engine.model, engine.setting).inc()
            self.say(f"{engine.model} ({engine.setting}) is ready")
        else:  # retired while it started (the gateway is closing)
            await asyncio.to_thread(self.runner.stop, engine, self.options.grace)
        self.gauge()

    async def retire(self, engine: Engine, reason: str) -> None:
        """Stop an engine (whole group) and forget it."""
        was = engine.state
        if not engine.move(State.RETIRED):
            return
        engine.line.close(Moved(f"{engine.model} ({engine.setting}) stopped: {reason}"))
        if self.current.get(engine.slot) is engine:
            del self.current[engine.slot]
        if engine in self.engines:
            self.engines.remove(engine)
        up = engine.handle is not None and engine.handle.alive
        await asyncio.to_thread(self.runner.stop, engine, self.options.grace)
        if engine.handle is not None and was is not State.STARTING:
            self.metrics.resident.labels(engine.model, engine.setting).dec()
            self.metrics.stops.labels(engine.model, engine.setting, reason).inc()
        if up:
            self.say(f"stopped {engine.model} ({engine.setting}): {reason}")
        self.gauge()

    def drain(self, engine: Engine) -> None:
        """Its slot is served by another now: it finishes its requests, then stops."""
        if self.current.get(engine.slot) is engine:
            del self.current[engine.slot]
        engine.line.close(Moved(f"{engine.model}: {engine.setting} is replaced"))
        if engine.move(State.DRAINING) and engine.inflight == 0:
            self.spawn(self.retire(engine, "swap"))

    def resident(self) -> list[Engine]:
        """Servers up or starting (current, beside one they replace, draining)."""
        return [e for e in self.engines if e.state in (State.STARTING, State.READY,
                                                       State.DRAINING)]

    def budget_for(self, engines: list[Engine]) -> int:
        if self.options.budget is not None:
            return self.options.budget
        return min(e.plan.memory.budget.limit for e in engines)

    def _keep_alive(self, engine: Engine) -> int:
        return self.profiles[engine.model].gateway.keep_alive

    def gauge(self) -> None:
        self.room.gauge(self.resident())

    # -- the clock ---------------------------------------------------------------------------
    async def tick(self) -> None:
        """Dead servers failed, idle ones past their keep-alive stopped, drained ones stopped,
        a changed saved tune taken in."""
        now = self.clock()
        for engine in list(self.engines):
            if engine.state not in (State.READY, State.DRAINING):
                continue
            if engine.handle is not None and not engine.handle.alive:
                self.fail(engine, f"exited with code {engine.exit_code}", "died")
            elif engine.inflight == 0 and engine.state is State.DRAINING:
                await self.retire(engine, "swap")
            elif engine.inflight == 0 and 0 <= self._keep_alive(engine) < now - engine.last_used:
                await self.retire(engine, "keep-alive")
        seen = tuned_signature(self.plans.app.dirs.tuned)
        if seen != self._tuned:
            self._tuned = seen
            self.spawn(self.retune())

    async def retune(self) -> None:
        """The one way a saved tune enters: each model planned again; each of its slots kept
        (the same server), replaced (a new plan: the new server starts beside the old one and
        takes over once ready) or drained (no longer served: routed away, or now routed)."""
        for model in list(self.plans.served):
            before = self.plans.served[model]
            served = await asyncio.to_thread(self.plans.refresh, model)
            if served.routing.route != before.routing.route:  # live figures start anew
                self._routed(model, served.routing)
            elif served.routing.why != before.routing.why:  # e.g. the new tune does not plan
                self.say(f"{model}: {served.routing.why}")
            for slot, engine in list(self.current.items()):
                if slot.model != model:
                    continue
                want = served.plan_for(slot)
                if want is None:
                    self.drain(engine)
                elif not _same_launch(engine, want):
                    self.spawn(self.replace(engine, want))

    async def replace(self, old: Engine, want: Resolved) -> None:
        """Serve `want` in `old`'s slot: start it beside `old`, send new requests to it once
        ready, let `old` finish and stop."""
        await old.settled.wait()
        if old.state is not State.READY or self.current.get(old.slot) is not old:
            return  # failed or replaced meanwhile: the next request starts the new plan
        new = self._begin(old.slot, want, replacing=old)
        self.say(f"{old.model}: new setting {new.setting} (was {old.setting}); starting it")
        await self.start(new, replacing=old)
        if new.state is not State.READY:
            return
        current = self.current.get(old.slot)
        if current is not None and current is not new:
            self.drain(current)
        self.current[old.slot] = new
        self.metrics.swaps.labels(old.model).inc()
        self.say(f"{old.model}: swapped to {new.setting}; {old.setting} stops once its "
                 f"{old.inflight} request(s) finish")

    async def close(self) -> None:
        """Stop every server (the gateway is stopping)."""
        self.closing.set()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for engine in list(self.engines):
            await self.retire(engine, "shutdown")


def _same_launch(old: Engine, resolved: Resolved) -> bool:
    """Would `resolved` run the same server as `old` (same argv at `old`'s address)?"""
    if old.handle is None:
        return old.resolved.plan == resolved.plan.but(host=old.plan.host, port=old.plan.port)
    at = resolved.plan.but(host=old.plan.host, port=old.plan.port)
    return resolved.backend.launch(at, resolved.installed).argv == old.handle.running.launch.argv
