"""The gateway's servers: started on a model's first request, kept while used, stopped after
their keep-alive, evicted least recently used first when a start would pass the memory budget,
restarted on the next request after a crash, and swapped for a newly tuned setting (the new one
starts beside the old, takes the new requests, and the old one stops once its requests finish).

Everything here runs on the gateway's event loop; starting, stopping and planning block, so they
run in threads. Planning goes through one App, one resolution at a time.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specctl.orchestrator.app import App, Resolved
from specctl.orchestrator.config.profiles import Profile
from specctl.orchestrator.errors import ServerError, SpecctlError
from specctl.orchestrator.gateway.engines import Engine, engine_for, footprint
from specctl.orchestrator.gateway.metrics import Metrics
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
        self.engines: dict[str, Engine] = {}  # the current server of each model
        self.old: list[Engine] = []  # replaced by a newer setting: finishing their requests
        self.last_request = clock()
        self.closing = threading.Event()
        self._plan_lock = threading.Lock()  # App is one command's: one resolution at a time
        self._locks = {name: asyncio.Lock() for name in self.profiles}
        self._tasks: set[asyncio.Task[None]] = set()
        self._swapping: set[str] = set()
        self._tuned = tuned_signature(app.dirs.tuned)

    # -- planning ----------------------------------------------------------------------------
    def resolve(self, model: str) -> Resolved:
        """Blocking: the model's plan as `up` would serve it now (tuned results included)."""
        with self._plan_lock:
            return servable(self.app.resolve(self.profiles[model]))

    # -- requests ----------------------------------------------------------------------------
    async def acquire(self, model: str) -> Engine:
        """The model's ready server, counted busy until `release`; started if need be."""
        if model not in self.profiles:
            names = ", ".join(sorted(self.profiles)) or "none"
            raise Unknown(f"model {model!r} is not served here; /v1/models lists {names}")
        arrived = self.clock()
        self.last_request = arrived
        engine = await self._current(model)
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

    def release(self, engine: Engine) -> None:
        engine.inflight -= 1
        engine.last_used = self.last_request = self.clock()
        self.metrics.inflight.labels(engine.model).dec()
        if engine.inflight == 0 and (engine.draining or self._keep_alive(engine) == 0):
            self._spawn(self._retire(engine, "swap" if engine.draining else "keep-alive"))

    async def _current(self, model: str) -> Engine:
        """The model's current server (maybe still starting); one is started when there is
        none, or it failed or died."""
        async with self._locks[model]:
            engine = self.engines.get(model)
            if engine is not None and not (engine.ready.is_set() and not engine.alive):
                return engine
            if engine is not None:
                self.engines.pop(model, None)
            try:
                resolved = await asyncio.to_thread(self.resolve, model)
            except SpecctlError as exc:
                raise StartFailed(f"{model} could not be planned: {exc}") from None
            engine = engine_for(model, resolved, self.app.dirs.logs)
            self.engines[model] = engine
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
                self.engines[engine.model] = engine
                replacing = None
            if self.clock() > deadline:
                raise ServerError(f"no room for {engine.model} within the memory budget of "
                                  f"{in_gib(budget):.2f} GiB: the servers holding it are busy")
            await asyncio.sleep(0.2)

    def _forget(self, engine: Engine) -> None:
        if self.engines.get(engine.model) is engine:
            del self.engines[engine.model]
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
            for model, engine in list(self.engines.items()):
                if engine.ready.is_set() and engine.alive and model not in self._swapping:
                    self._spawn(self.swap(model, engine))

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
            if _same_launch(old, resolved):
                return
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
