"""A hung engine known in seconds, not at the end of a bound. While requests wait on an engine
(for a reply's first byte, or between a stream's chunks: gateway/bounds.py) and it has sent none
of them a byte for QUIET seconds, the gateway asks its health endpoint (its launch's
`health_url`); one that does not answer within ANSWER seconds, nor sends a byte meanwhile, is
hung: every wait on it is called off (`Hung`: the client gets 504, or its API's error event in
a stream) and the pool fails it (stopped now, started anew by the next request). An engine
that answers is busy, not hung (a long prompt's prefill sends nothing for a while): it is asked
again after QUIET more seconds, and the bounds still bound it.

The answer is not asked where it cannot tell: an engine holding more requests than it serves at
once (`plan.parallel`) may have every thread that answers HTTP waiting for a slot (llama-server
keeps about n_parallel + 2: behind 32 streams on one slot its /health took 24 s), and an engine
without an HTTP health endpoint. There the bounds alone decide.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Awaitable, Callable, Iterator

import anyio
import httpx

from specctl.orchestrator.gateway.engines import Engine

# a stream's chunks come tens of milliseconds apart: an engine silent for this long while
# requests wait on it is asked whether it is alive (one small GET per QUIET s of silence)
QUIET = 2.0
# an engine answers its health check in milliseconds, busy or not (llama-server: 0.02-0.05 s
# while six streams ran on two loaded cores); 3 s allows a loaded machine 60 times that, and
# tells a hung engine within about QUIET + ANSWER = 5 s instead of the first-byte bound's 10 min
ANSWER = 3.0

Probe = Callable[[Engine], Awaitable[bool | None]]
"""Did the engine answer its health check within ANSWER s (None: it cannot tell)?"""


def prober(client: Callable[[], httpx.AsyncClient | None]) -> Probe:
    """The probe through the gateway's HTTP client (`client()`: None before it starts)."""

    async def probe(engine: Engine) -> bool | None:
        http, handle = client(), engine.handle
        if http is None or handle is None or engine.inflight > engine.plan.parallel:
            return None
        url = handle.running.launch.health_url
        if not url.startswith(("http://", "https://")):
            return None
        try:
            await http.get(url, headers=handle.running.endpoint.headers(), timeout=ANSWER)
        except httpx.HTTPError:  # no answer in time, or no connection: not answering
            return False
        return True

    return probe


class HangCheck:
    """The engines requests wait on, and what each last sent: one watcher per engine waited on
    asks its health when it falls silent, and calls off every wait on one that is hung."""

    def __init__(self, probe: Probe, quiet: float = QUIET) -> None:
        self.probe, self.quiet = probe, quiet
        self._waits: dict[Engine, set[anyio.CancelScope]] = {}
        self._heard: dict[Engine, float] = {}
        self._watchers: dict[Engine, anyio.CancelScope] = {}
        self.verdicts: weakref.WeakKeyDictionary[Engine, str] = weakref.WeakKeyDictionary()

    def heard(self, engine: Engine) -> None:
        """The engine sent something (headers, a chunk) to one of its requests."""
        self._heard[engine] = anyio.current_time()

    @contextlib.contextmanager
    def waiting(self, engine: Engine, scope: anyio.CancelScope,
                spawn: Callable[[Callable[[], Awaitable[None]]], None]) -> Iterator[None]:
        """A wait on `engine` in `scope`, called off (cancelled) if the engine is found hung;
        `spawn` starts the engine's watcher when it is the first wait on it."""
        waits = self._waits.setdefault(engine, set())
        if not waits:
            self._heard[engine] = anyio.current_time()  # silence counts from now
            spawn(lambda: self._watch(engine))
        waits.add(scope)
        try:
            yield
        finally:
            waits.discard(scope)
            if not waits:
                del self._waits[engine]
                self._heard.pop(engine, None)
                watcher = self._watchers.pop(engine, None)
                if watcher is not None:
                    watcher.cancel()

    async def _watch(self, engine: Engine) -> None:
        with anyio.CancelScope() as scope:
            if engine not in self._waits:
                return  # its waits ended before it started
            self._watchers[engine] = scope
            while engine in self._waits:
                last = self._heard[engine]
                if anyio.current_time() < last + self.quiet:
                    await anyio.sleep(last + self.quiet - anyio.current_time())
                    continue
                answered = await self.probe(engine)
                if engine not in self._waits:
                    return
                if answered is False and self._heard[engine] == last:  # silent meanwhile too
                    self._hung(engine)
                    return
                self._heard[engine] = max(self._heard[engine], anyio.current_time())

    def _hung(self, engine: Engine) -> None:
        self.verdicts[engine] = (f"sent nothing for {self.quiet:g} s and did not answer its "
                                 f"health check within {ANSWER:g} s: it is hung")
        for scope in list(self._waits.get(engine, ())):
            scope.cancel()
