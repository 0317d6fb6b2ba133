"""The line of requests waiting for one engine's slots: first come, first served.

An engine takes as many requests at once as its plan has slots (`plan.parallel`: llama-server's
`-np`, vLLM's `--max-num-seqs`); the engine itself would queue the rest, unseen. Here they wait
in arrival order, where the gateway sees them (`/metrics` counts them, `status` shows them, the
route reads the load), within bounds: at most MAX_WAITING in line per engine and the pool's
`queue_wait` seconds each; past a bound, a clear 503 with Retry-After (`Busy`). An engine that
fails or stops while requests wait hands each its failure (`close`).
"""

from __future__ import annotations

import asyncio
from collections import deque

from specctl.orchestrator.errors import SpecctlError

MAX_WAITING = 256  # requests in line for one engine; the next is told to come back


class Busy(SpecctlError):
    """No slot within the bound (HTTP 503, Retry-After)."""


class Line:
    def __init__(self, slots: int) -> None:
        self.slots = max(slots, 1)
        self.busy = 0  # requests holding a slot
        self.waiting: deque[asyncio.Future[None]] = deque()
        self.closed: SpecctlError | None = None

    @property
    def load(self) -> int:
        """Requests holding a slot or waiting for one."""
        return self.busy + len(self.waiting)

    async def enter(self, wait: float, who: str) -> None:
        """Hold a slot: at once when one is free and no one waits before, else in turn; Busy
        past `wait` seconds or when the line is full; the engine's failure when it closes."""
        if self.closed is not None:
            raise self.closed
        if self.busy < self.slots and not self.waiting:
            self.busy += 1
            return
        if len(self.waiting) >= MAX_WAITING:
            raise Busy(f"{who} has {len(self.waiting)} requests waiting for its {self.slots} "
                       "slot(s); try again shortly")
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(turn)
        try:
            await asyncio.wait_for(asyncio.shield(turn), max(wait, 0.0))
        except TimeoutError:
            self._give_up(turn)
            raise Busy(f"{who} was busy with {self.busy} request(s) in its {self.slots} "
                       f"slot(s) for {wait:.0f} s; try again shortly") from None
        except asyncio.CancelledError:  # the client went away while it waited
            self._give_up(turn)
            raise
        finally:
            if turn in self.waiting:
                self.waiting.remove(turn)

    def _give_up(self, turn: asyncio.Future[None]) -> None:
        """A request leaves the line: a slot handed to it as it left is handed on."""
        if turn.done() and not turn.cancelled() and turn.exception() is None:
            self.leave()
        else:
            turn.cancel()

    def leave(self) -> None:
        """A slot freed: the first request in line (one still waiting) takes it."""
        while self.waiting:
            turn = self.waiting.popleft()
            if not turn.done():
                turn.set_result(None)  # the slot passes to it: busy stays the same
                return
        self.busy = max(self.busy - 1, 0)

    def close(self, why: SpecctlError) -> None:
        """The engine is gone: every request in line gets `why`; no one enters again."""
        self.closed = why
        while self.waiting:
            turn = self.waiting.popleft()
            if not turn.done():
                turn.set_exception(why)
