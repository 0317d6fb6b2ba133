"""What the gateway reads from a reply as it passes through, for metrics and the kept traffic:
the first token's time, the tokens generated and the prompt's (`usage`, else what the engine
reports beside it), the engine's own decode timing and draft counters. A stream (server-sent
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

Timing = Callable[[Mapping[str, Any]], tuple[int, float] | None]  # (tokens, tokens/s or s)
Drafts = Callable[[Mapping[str, Any]], SpecStats | None]
Count = Callable[[Mapping[str, Any]], int | None]


@dataclass
class Watch:
    stream: bool
    timing: Timing
    drafts: Drafts
    clock: Callable[[], float] = time.monotonic
    first_at: float | None = None
    tokens: int = 0  # usage's completion_tokens, else content chunks seen
    prompt_tokens: int = 0  # usage's, else the engine's own count (`prompt`); 0: not said
    prompt: Count | None = None  # the adapter's prompt_tokens (a stream without usage)
    prefill: Timing | None = None  # the adapter's prefill_timing: (tokens prefilled, seconds)
    engine_prefill: tuple[int, float] | None = None
    chunks: int = 0
    done: bool = False  # a stream's `data: [DONE]` was seen: the reply is whole
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
        self.done = self.done or payload == b"[DONE]"
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
        if isinstance(usage, Mapping) and _count(usage.get("prompt_tokens")):
            self.prompt_tokens = usage["prompt_tokens"]
        elif not self.prompt_tokens and self.prompt is not None:
            self.prompt_tokens = self.prompt(reply) or 0
        timed = self.timing(reply)
        if timed is not None:
            self.engine_tps = timed[1]
        filled = self.prefill(reply) if self.prefill is not None else None
        if filled is not None:
            self.engine_prefill = filled
        stats = self.drafts(reply)
        if stats is not None:
            self.stats = stats

    @property
    def generated(self) -> int:
        return self.tokens or self.chunks


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


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
