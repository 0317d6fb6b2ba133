"""How long the gateway waits on an engine, and its shutdown as the relay sees it.

Bounds (each a `specctl gateway` setting): the first byte of an engine's reply (`first_byte`,
from sending the request: the headers, and for a stream its first chunk; a non-streamed reply
comes whole when it is done, so this bounds the whole of it) and each next chunk of a stream
(`chunk`). An engine that sends nothing within a bound is hung: the client gets 504 (in a
stream, its API's error events: gateway/ends.py) and the pool fails the engine (stopped now,
started anew by the next request). The start bound is the pool's (`--start-wait`).

An engine known hung sooner is failed sooner: a wait on an engine is watched by the hang check
(gateway/hung.py: an engine silent for seconds whose health endpoint does not answer), which
calls the wait off with the same Hung.

Every wait on an engine or for one runs in a cancel scope registered here; a graceful shutdown
(SIGTERM) cancels them all at once: a request waiting for its engine gets 503, an open stream
its API's error events.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio

from specctl.orchestrator.gateway.engines import Engine
from specctl.orchestrator.gateway.hung import HangCheck

T = TypeVar("T")


class Hung(Exception):
    """The engine sent nothing within a bound."""


class ShuttingDown(Exception):
    """The gateway is stopping: the wait was called off."""


@dataclass(frozen=True)
class Timeouts:
    first_byte: float = 600.0  # the openai client's own default timeout
    chunk: float = 60.0


class Bounds:
    def __init__(self, timeouts: Timeouts = Timeouts(), hang: HangCheck | None = None) -> None:
        self.timeouts, self.hang = timeouts, hang
        self.stopping = False
        self._scopes: set[anyio.CancelScope] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def stop(self) -> None:
        """Shut down: every wait now in progress is called off (ShuttingDown), and every
        later one at once."""
        self.stopping = True
        for scope in list(self._scopes):
            scope.cancel()

    async def within(self, work: Callable[[], Awaitable[T]], deadline: float | None,
                     hung: str = "", engine: Engine | None = None) -> T:
        """`work()`'s result; Hung(`hung`) past `deadline` (anyio's clock; None: no bound),
        or as soon as the hang check finds `engine` (the one waited on) hung; ShuttingDown
        once the gateway stops."""
        if self.stopping:
            raise ShuttingDown
        with anyio.CancelScope(deadline=math.inf if deadline is None else deadline) as scope:
            self._scopes.add(scope)
            try:
                with self._watched(engine, scope):
                    found = await work()
                if self.hang is not None and engine is not None:
                    self.hang.heard(engine)
                return found
            finally:
                self._scopes.discard(scope)
        if self.stopping:
            raise ShuttingDown
        found_hung = self.hang.verdicts.get(engine) if self.hang is not None and \
            engine is not None else None
        raise Hung(found_hung or hung)

    def _watched(self, engine: Engine | None,
                 scope: anyio.CancelScope) -> contextlib.AbstractContextManager[None]:
        if self.hang is None or engine is None:
            return contextlib.nullcontext()
        return self.hang.waiting(engine, scope, self._spawn)

    def _spawn(self, work: Callable[[], Awaitable[None]]) -> None:
        task = asyncio.ensure_future(work())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
