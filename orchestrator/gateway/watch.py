"""What the gateway reads from a reply as it passes through, for metrics: the first token's
time, the tokens, the engine's own decode timing and draft counters. A stream (server-sent
events) is read line by line; any other reply is kept (bounded) and read at its end. Nothing
here changes a byte of what the client gets."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specctl.orchestrator.contract.stats import SpecStats

KEEP = 8 << 20  # of a non-streamed reply, what is read for its counts
LINE = 1 << 20  # a longer event line is passed through unread

Timing = Callable[[Mapping[str, Any]], tuple[int, float] | None]
Drafts = Callable[[Mapping[str, Any]], SpecStats | None]


@dataclass
class Watch:
    stream: bool
    timing: Timing
    drafts: Drafts
    clock: Callable[[], float] = time.monotonic
    first_at: float | None = None
    tokens: int = 0  # usage's completion_tokens, else content chunks seen
    chunks: int = 0
    engine_tps: float | None = None
    stats: SpecStats | None = None
    _pending: bytes = b""
    _kept: list[bytes] = field(default_factory=list)
    _kept_bytes: int = 0

    def feed(self, chunk: bytes) -> None:
        if not self.stream:
            if self.first_at is None and chunk:
                self.first_at = self.clock()
            if self._kept_bytes < KEEP:
                self._kept.append(chunk)
                self._kept_bytes += len(chunk)
            return
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        if len(self._pending) > LINE:
            self._pending = b""
        for line in lines:
            self._event(line.strip())

    def finish(self) -> None:
        if self.stream:
            self._event(self._pending.strip())
            return
        try:
            reply = json.loads(b"".join(self._kept))
        except ValueError:
            return
        if isinstance(reply, dict):
            self._read(reply, final=True)

    def _event(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        payload = line[5:].strip()
        if payload == b"[DONE]" or not payload:
            return
        try:
            event = json.loads(payload)
        except ValueError:
            return
        if isinstance(event, dict):
            self._read(event, final=False)

    def _read(self, reply: Mapping[str, Any], final: bool) -> None:
        if not final and _has_content(reply):
            self.chunks += 1
            if self.first_at is None:
                self.first_at = self.clock()
        usage = reply.get("usage")
        if isinstance(usage, Mapping) and isinstance(usage.get("completion_tokens"), int):
            self.tokens = usage["completion_tokens"]
        timed = self.timing(reply)
        if timed is not None:
            self.engine_tps = timed[1]
        stats = self.drafts(reply)
        if stats is not None:
            self.stats = stats

    @property
    def generated(self) -> int:
        return self.tokens or self.chunks


def _has_content(event: Mapping[str, Any]) -> bool:
    """Does a stream event carry generated text (a chat delta or a completion's text)?"""
    for choice in event.get("choices") or ():
        if not isinstance(choice, Mapping):
            continue
        delta = choice.get("delta")
        if isinstance(delta, Mapping) and (delta.get("content") or delta.get("reasoning_content")
                                           or delta.get("tool_calls")):
            return True
        if choice.get("text"):
            return True
    return False
