"""The gateway's servers: started on a model's first request, kept while used, stopped after
their keep-alive, evicted least recently used first when a start would pass the memory budget,
restarted on the next request after a crash, and swapped for a newly tuned setting (the new one
starts beside the old, takes the new requests, and the old one stops once its requests finish).

Everything here runs on the gateway's event loop; starting, stopping and planning block, so they
run in threads. Planning goes through one App, one resolution at a time.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specctl.orchestrator.app import App, Resolved
from specctl.orchestrator.config.profiles import Profile
from specctl.orchestrator.errors import ServerError, SpecctlError
from specctl.orchestrator.gateway.engines import Engine, engine_for, footprint
from specctl.orchestrator.gateway.live import Live
from specctl.orchestrator.gateway.metrics import Metrics
from specctl.orchestrator.measure.route import Route
from specctl.orchestrator.planning.plan import Plan
from specctl.orchestrator.sizes import in_gib

Say = Callable[[str], None]


class Unknown(SpecctlError):
    """No such model behind the gateway (HTTP 404)."""


class NotReady(SpecctlError):
    """The model's server is not ready within the request's bound (HTTP 503, Retry-After)."""


class StartFailed(ServerError):
    """The model's server could not start (HTTP 502); the next request tries again."""


@dataclass(frozen=True)
class Options:
    budget: int | None = None  # bytes the resident servers may hold; None: the plans' budget
    start_wait: float = 120.0  # a request waits this long for its server, then gets a 503
    health_timeout: float = 300.0
    grace: float = 10.0  # SIGTERM, then SIGKILL of a server's group
    tick: float = 0.5  # how often keep-alives, crashes and tuned results are checked


def tuned_signature(folder: Path) -> tuple[tuple[str, int, int], ...]:
    """The saved tuning results as (name, mtime, size): a change means `tune` saved."""
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        try:
            st = path.stat()
        except OSError:
            continue
        found.append((path.name, st.st_mtime_ns, st.st_size))
    return tuple(found)


@dataclass(frozen=True)
class Routing:
    """A model's speculation per request: its route (None: one server serves every request)
    and why, and the plan as written that the route's servers derive from."""

    route: Route | None
    why: str
    written: Resolved | None = None


def slot_of(model: str, setting: str) -> str:
    """The pool's key of a route's server."""
    return f"{model} [{setting}]"


def usable(engine: Engine) -> bool:
    return engine.ready.is_set() and engine.alive and not engine.draining


def servable(resolved: Resolved) -> Resolved:
    """`resolved`, when it can run here as planned: the gateway provides nothing itself."""
    if not resolved.needs.empty:
        name = resolved.plan.profile
        raise ServerError(f"{name} needs what `up` provides first (the backend built, models "
                          f"fetched): run `specctl up -p {name}` once, then `specctl down "
                          f"{name}`")
    return resolved


class Pool:
    def __init__(self, app: App, profiles: Mapping[str, Profile], options: Options,
                 metrics: Metrics, say: Say, clock: Callable[[], float] = time.monotonic) -> None:
        self.app, self.profiles, self.options = app, dict(profiles), options
        self.metrics, self.say, self.clock = metrics, say, clock
        self.engines: dict[str, Engine] = {}  # the current server of each slot (model, or
        # a route's server of a model)
        self.routings: dict[str, Routing] = {}
        self.live = Live()
        self._slots: dict[str, tuple[str, Plan, Resolved]] = {}  # a route server's slot
        self.old: list[Engine] = []  # replaced by a newer setting: finishing their requests
        self.last_request = clock()
        self.closing = threading.Event()
        self._plan_lock = threading.Lock()  # App is one command's: one resolution at a time
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._swapping: set[str] = set()
        self._tuned = tuned_signature(app.dirs.tuned)

    # -- planning ----------------------------------------------------------------------------
    def resolve(self, model: str) -> Resolved:
        """Blocking: the model's plan as `up` would serve it now (tuned results included)."""
        with self._plan_lock:
            return servable(self.app.resolve(self.profiles[model]))

    def route_of(self, model: str) -> Routing:
        """Blocking: the model's route as the saved tune says now (measure/route.py)."""
        profile = self.profiles[model]
        if not profile.gateway.route:
            return Routing(None, "not routed: [gateway] route = false")
        with self._plan_lock:
            try:
                written = servable(self.app.resolve(profile, use_tuned=False))
                route, why = self.app.route(written)
            except SpecctlError as exc:
                return Routing(None, f"not routed: {exc}")
        if route is None:
            return Routing(None, f"not routed: {why}")
        if self.options.budget is not None and route.need > self.options.budget:
            return Routing(None, f"routing refused: {route.memory()}, over the gateway's "
                           f"--memory of {in_gib(self.options.budget):.2f} GiB: the best single "
                           "setting serves")
        return Routing(route, why, written)

    async def routing(self, model: str) -> Routing:
        found = self.routings.get(model)
        if found is None:
            found = await asyncio.to_thread(self.route_of, model)
            if model in self.routings:  # another request got there first
                return self.routings[model]
            self._routed(model, found)
        return found

    def _routed(self, model: str, found: Routing) -> None:
        self.routings[model] = found
        self.live.reset(model, dict(found.route.baseline_tps) if found.route else {})
        self.say(f"{model}: {found.why}")

    # -- requests ----------------------------------------------------------------------------
    async def acquire(self, model: str, kind: str | None = None) -> Engine:
        """The model's ready server, counted busy until `release`; started if need be. With a
        request's `kind` and a route, its kind's server (one that is down or starting hands
        its requests to another of the route's that is up)."""
        if model not in self.profiles:
            names = ", ".join(sorted(self.profiles)) or "none"
            raise Unknown(f"model {model!r} is not served here; /v1/models lists {names}")
        arrived = self.clock()
        self.last_request = arrived
        routing = await self.routing(model) if kind is not None else None
        slot = model
        if routing is not None and routing.route is not None and routing.written is not None:
            setting, plan = self._member(model, kind or "chat", routing.route)
            slot = slot_of(model, setting)
            self._slots[slot] = (model, plan, routing.written)
        engine = await self._current(slot)
        if slot != model and not usable(engine):
            engine = next((e for e in self.engines.values()
                           if e.model == model and e.slot != model and usable(e)), engine)
        left = self.options.start_wait - (self.clock() - arrived)
        try:
            if not engine.ready.is_set():
                await asyncio.wait_for(asyncio.shield(engine.ready.wait()), max(left, 0.0))
        except TimeoutError:
            raise NotReady(f"{model} is still starting after {self.options.start_wait:.0f} s; "
                           "try again shortly") from None
        if engine.error is not None:
            raise StartFailed(f"{model} could not start: {engine.error}")
        engine.inflight += 1
        engine.last_used = self.clock()
        self.metrics.inflight.labels(model).inc()
        self.metrics.queue.labels(model).observe(self.clock() - arrived)
        return engine

    def _member(self, model: str, kind: str, route: Route) -> tuple[str, Plan]:
        """The setting and plan for a request of `kind`: its winner's, or no draft where the
        live table saw it slower than the baseline."""
        if self.live.demoted(model, kind):
            return "off", route.off
        member = route.member_for(kind)
        return member.setting, member.plan

    def release(self, engine: Engine) -> None:
        engine.inflight -= 1
        engine.last_used = self.last_request = self.clock()
        self.metrics.inflight.labels(engine.model).dec()
        if engine.inflight == 0 and (engine.draining or self._keep_alive(engine) == 0):
            self._spawn(self._retire(engine, "swap" if engine.draining else "keep-alive"))

    async def _current(self, slot: str) -> Engine:
        """The slot's current server (maybe still starting); one is started when there is
        none, or it failed or died."""
        async with self._locks.setdefault(slot, asyncio.Lock()):
            engine = self.engines.get(slot)
            if engine is not None and not (engine.ready.is_set() and not engine.alive):
                return engine
            if engine is not None:
                self.engines.pop(slot, None)
            member = self._slots.get(slot)
            if member is None:
                try:
                    resolved = await asyncio.to_thread(self.resolve, slot)
                except SpecctlError as exc:
                    raise StartFailed(f"{slot} could not be planned: {exc}") from None
                engine = engine_for(slot, resolved, self.app.dirs.logs)
            else:
                model, plan, written = member
                name = re.sub(r"[^A-Za-z0-9.]+", "-", f"{model} {plan.short()}")
                engine = engine_for(model, replace(written, plan=plan), self.app.dirs.logs,
                                    slot=slot, log_name=name)
            self.engines[slot] = engine
            self._spawn(self._start(engine))
            return engine

    # -- starting and stopping ---------------------------------------------------------------
    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _start(self, engine: Engine, replacing: Engine | None = None) -> None:
        """Start `engine` (making room first); on failure, say why and leave it unready-failed
        (`current` drops it at the next request)."""
        try:
            await self._make_room(engine, replacing)
            self.say(f"starting {engine.model} ({engine.setting}) on port {engine.plan.port}")
            await asyncio.to_thread(engine.start, self.options.health_timeout,
                                    self.closing.is_set)
        except SpecctlError as exc:
            engine.error = str(exc)
            self.say(f"{engine.model} ({engine.setting}) did not start: {exc}")
        else:
            self.metrics.starts.labels(engine.model, engine.setting).inc()
            self.metrics.resident.labels(engine.model, engine.setting).inc()
            self.say(f"{engine.model} ({engine.setting}) is ready")
        finally:
            engine.ready.set()
            self._gauge()

    def resident(self) -> list[Engine]:
        """Servers up or starting (the current ones and those finishing their requests)."""
        return [e for e in [*self.engines.values(), *self.old]
                if not (e.ready.is_set() and not e.alive)]

    def budget_for(self, engines: list[Engine]) -> int:
        if self.options.budget is not None:
            return self.options.budget
        return min(e.plan.memory.budget.limit for e in engines)

    async def _make_room(self, engine: Engine, replacing: Engine | None) -> None:
        """Stop idle servers, least recently used first, until `engine` fits beside the rest;
        a busy server is waited for, within the start bound."""
        alone = footprint([(engine.plan, engine.shares)])
        budget = self.budget_for([engine])
        if alone > budget:
            raise ServerError(f"{engine.model} needs {in_gib(alone):.2f} GiB, more than the "
                              f"gateway's memory budget of {in_gib(budget):.2f} GiB")
        deadline = self.clock() + self.options.start_wait
        while True:
            others = [e for e in self.resident() if e is not engine]
            everyone = [*others, engine]
            need = footprint([(e.plan, e.shares) for e in everyone])
            budget = self.budget_for(everyone)
            if need <= budget:
                return
            idle = [e for e in others if e.inflight == 0 and e.ready.is_set()
                    and e is not replacing]
            if idle:
                victim = min(idle, key=lambda e: e.last_used)
                self.say(f"stopping {victim.model} ({victim.setting}), the least recently used, "
                         f"to make room for {engine.model}: {in_gib(need):.2f} GiB would pass "
                         f"the budget of {in_gib(budget):.2f} GiB")
                await self._retire(victim, "memory")
                continue
            if replacing is not None:  # no room beside the old setting: it finishes first
                replacing.draining = True
                self._forget(replacing)
                self.old.append(replacing)
                self.engines[engine.slot] = engine
                replacing = None
            if self.clock() > deadline:
                raise ServerError(f"no room for {engine.model} within the memory budget of "
                                  f"{in_gib(budget):.2f} GiB: the servers holding it are busy")
            await asyncio.sleep(0.2)

    def _forget(self, engine: Engine) -> None:
        if self.engines.get(engine.slot) is engine:
            del self.engines[engine.slot]
        if engine in self.old:
            self.old.remove(engine)

    async def _retire(self, engine: Engine, reason: str) -> None:
        """Stop a server (whole group) and forget it."""
        self._forget(engine)
        if engine.retired:
            return
        engine.retired = True
        was_up = engine.alive
        await asyncio.to_thread(engine.stop, self.options.grace)
        if engine.started is not None and engine.error is None:
            self.metrics.resident.labels(engine.model, engine.setting).dec()
            self.metrics.stops.labels(engine.model, engine.setting, reason).inc()
        if was_up:
            self.say(f"stopped {engine.model} ({engine.setting}): {reason}")
        self._gauge()

    def _keep_alive(self, engine: Engine) -> int:
        return self.profiles[engine.model].gateway.keep_alive

    def _gauge(self) -> None:
        up = self.resident()
        self.metrics.memory.set(footprint([(e.plan, e.shares) for e in up]))
        if up:
            self.metrics.budget.set(self.budget_for(up))

    # -- the clock ---------------------------------------------------------------------------
    async def tick(self) -> None:
        """Crashed servers forgotten, idle ones past their keep-alive stopped, finished old
        settings stopped, newly tuned settings swapped in."""
        now = self.clock()
        for engine in [*self.engines.values(), *self.old]:
            if not engine.ready.is_set() or engine.error is not None:
                continue
            if not engine.alive:
                self.say(f"{engine.model} ({engine.setting}) exited with code "
                         f"{engine.exit_code}; the next request starts it again")
                await self._retire(engine, "died")
            elif engine.inflight == 0 and engine.draining:
                await self._retire(engine, "swap")
            elif engine.inflight == 0 and 0 <= self._keep_alive(engine) < now - engine.last_used:
                await self._retire(engine, "keep-alive")
        seen = tuned_signature(self.app.dirs.tuned)
        if seen != self._tuned:
            self._tuned = seen
            for model in list(self.routings):
                self._spawn(self.reroute(model))
            for slot, engine in list(self.engines.items()):
                if engine.ready.is_set() and engine.alive and slot == engine.model and \
                        slot not in self._swapping:
                    self._spawn(self.swap(slot, engine))

    async def reroute(self, model: str) -> None:
        """A new tune: the model's route again; servers no longer in it (the model's single
        one, when it is now routed) finish their requests and stop."""
        found = await asyncio.to_thread(self.route_of, model)
        before = self.routings.get(model)
        if before is not None and found.route == before.route:
            return
        self._routed(model, found)
        keep = {slot_of(model, m.setting) for m in found.route.members} if found.route else set()
        for engine in list(self.engines.values()):
            routed_away = engine.slot == model and found.route is not None
            if engine.model == model and (routed_away or (engine.slot != model
                                          and engine.slot not in keep)):
                engine.draining = True
                self._forget(engine)
                self.old.append(engine)

    async def swap(self, model: str, old: Engine) -> None:
        """Serve the model's plan as it resolves now, when it differs from `old`'s: start it
        beside `old`, send new requests to it once ready, let `old` finish and stop."""
        self._swapping.add(model)
        try:
            try:
                resolved = await asyncio.to_thread(self.resolve, model)
            except SpecctlError as exc:
                self.say(f"{model}: tuned result not served: {exc}")
                return
            routing = self.routings.get(model)
            if _same_launch(old, resolved) or (routing is not None and routing.route):
                return  # the same, or now routed (reroute drains it)
            new = engine_for(model, resolved, self.app.dirs.logs)
            self.say(f"{model}: new setting {new.setting} (was {old.setting}); starting it")
            await self._start(new, replacing=old)
            if new.error is not None:
                if self.engines.get(model) is new:  # the old one had already stepped aside
                    del self.engines[model]
                return
            if not old.draining:
                old.draining = True
                self._forget(old)
                self.old.append(old)
            self.engines[model] = new
            self.metrics.swaps.labels(model).inc()
            self.say(f"{model}: swapped to {new.setting}; {old.setting} stops once its "
                     f"{old.inflight} request(s) finish")
        finally:
            self._swapping.discard(model)

    async def close(self) -> None:
        """Stop every server (the gateway is stopping)."""
        self.closing.set()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for engine in [*self.engines.values(), *self.old]:
            await self._retire(engine, "shutdown")


def _same_launch(old: Engine, resolved: Resolved) -> bool:
    """Would `resolved` run the same server as `old` (same argv at `old`'s address)?"""
    if old.started is None:
        return False
    at = resolved.plan.but(host=old.plan.host, port=old.plan.port)
    return resolved.backend.launch(at, resolved.installed).argv == old.started.running.launch.argv
