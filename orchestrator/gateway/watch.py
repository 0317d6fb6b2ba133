"""What the gateway reads from a reply as it passes through, for metrics and the kept traffic:
the first token's time, the tokens generated and the prompt's (`usage`, else what the engine
reports beside it), the engine's own decode timing and draft counters, and when a stream is
whole. A stream (server-sent events) is read line by line; any other reply is kept (bounded)
and read at its end. Nothing here changes a byte of what the client gets.

Each API's stream (gateway/apis.py) is read in its own events: OpenAI's chat and completions
(`choices` deltas, usage's completion and prompt tokens, whole at `data: [DONE]`); Anthropic's
Messages (text in `content_block_delta`, usage's input tokens, cached ones included, in
`message_start` and output tokens in `message_delta`, whole at `message_stop`); OpenAI's
Responses (text in `response.*.delta`, usage in `response.completed`, which makes it whole, as
`response.failed` and `response.incomplete` do); fill-in-the-middle (text in each chunk's
`content`, whole at the chunk with `"stop": true`). Where an API's reply carries no usage,
the tokens are the engine's own count (its timing), else the chunks of text seen."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specctl.orchestrator.contract.stats import SpecStats
from specctl.orchestrator.gateway import apis

KEEP = 8 << 20  # of a non-streamed reply, what is read for its counts
LINE = 1 << 20  # a longer event line is passed through unread
# the events of a Responses stream that carry generated text, and those that end it
DELTAS = frozenset({"response.output_text.delta", "response.refusal.delta",
                    "response.function_call_arguments.delta", "response.reasoning_text.delta"})
ENDS = frozenset({"response.completed", "response.failed", "response.incomplete"})

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
    tokens: int = 0  # usage's completion (output) tokens, else 0
    prompt_tokens: int = 0  # usage's, else the engine's own count (`prompt`); 0: not said
    prompt: Count | None = None  # the adapter's prompt_tokens (a stream without usage)
    prefill: Timing | None = None  # the adapter's prefill_timing: (tokens prefilled, seconds)
    engine_prefill: tuple[int, float] | None = None
    events: str = apis.OPENAI  # the API's stream (gateway/apis.py): how it reads and ends
    chunks: int = 0
    timed: int = 0  # the tokens the engine's own timing counts
    done: bool = False  # the stream's last event was seen: the reply is whole
    engine_tps: float | None = None
    stats: SpecStats | None = None
    reply_id: str | None = None  # the reply's id, as its stream first said it
    seen: int = 0  # events read
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
            return  # `event:` lines name what the data says again (its `type`)
        payload = line[5:].strip()
        self.done = self.done or payload == b"[DONE]"
        if payload == b"[DONE]" or not payload:
            return
        try:
            event = json.loads(payload)
        except ValueError:
            return
        if isinstance(event, dict):
            self.seen += 1
            self._read(event, final=False)
            self.done = self.done or _ends(self.events, event)

    def _read(self, reply: Mapping[str, Any], final: bool) -> None:
        if not final and _has_content(self.events, reply):
            self.chunks += 1
            if self.first_at is None:
                self.first_at = self.clock()
        out, asked = _usage(reply)
        if out is not None:
            self.tokens = out
        if asked:
            self.prompt_tokens = asked
        elif not self.prompt_tokens and self.prompt is not None:
            self.prompt_tokens = self.prompt(reply) or 0
        timed = self.timing(reply)
        if timed is not None:
            self.timed, self.engine_tps = timed
        filled = self.prefill(reply) if self.prefill is not None else None
        if filled is not None:
            self.engine_prefill = filled
        stats = self.drafts(reply)
        if stats is not None:
            self.stats = stats
        if self.reply_id is None:
            self.reply_id = _id(reply)

    @property
    def generated(self) -> int:
        return self.tokens or self.chunks or self.timed


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _usage(reply: Mapping[str, Any]) -> tuple[int | None, int]:
    """(tokens generated, or None where not said; the prompt's tokens, 0 where not said) from a
    reply's usage: OpenAI's chat (completion and prompt tokens), Anthropic's (output and input
    tokens, its cached ones counted apart and added here) and Responses' (output and input
    tokens). Anthropic's stream says it in `message`, Responses' in `response`."""
    found = next((u for u in (reply.get("usage"), _inner(reply, "message", "usage"),
                              _inner(reply, "response", "usage")) if isinstance(u, Mapping)),
                 None)
    if found is None:
        return None, 0
    out = next((found[k] for k in ("completion_tokens", "output_tokens")
                if isinstance(found.get(k), int) and not isinstance(found[k], bool)), None)
    if _count(found.get("prompt_tokens")):
        return out, int(found["prompt_tokens"])
    parts = [found.get(k, 0) for k in ("input_tokens", "cache_read_input_tokens",
                                       "cache_creation_input_tokens")]
    counted = all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in parts)
    return out, sum(parts) if counted else 0


def _inner(reply: Mapping[str, Any], outer: str, name: str) -> Any:
    inside = reply.get(outer)
    return inside.get(name) if isinstance(inside, Mapping) else None


def _id(reply: Mapping[str, Any]) -> str | None:
    """The id a reply or stream event gives itself (a Responses stream's in its `response`)."""
    for found in (_inner(reply, "response", "id"), _inner(reply, "message", "id"),
                  reply.get("id")):
        if isinstance(found, str) and found:
            return found
    return None


def _ends(events: str, event: Mapping[str, Any]) -> bool:
    """Is `event` the last of its API's stream ([DONE] is read apart)?"""
    if events == apis.ANTHROPIC:
        return event.get("type") == "message_stop"
    if events == apis.RESPONSES:
        return event.get("type") in ENDS
    return events == apis.INFILL and event.get("stop") is True


def _has_content(events: str, event: Mapping[str, Any]) -> bool:
    """Does a stream event carry generated text (in its API's events)?"""
    if events == apis.ANTHROPIC:
        delta = event.get("delta") if event.get("type") == "content_block_delta" else None
        return isinstance(delta, Mapping) and any(
            delta.get(k) for k in ("text", "partial_json", "thinking"))
    if events == apis.RESPONSES:
        return event.get("type") in DELTAS and bool(event.get("delta"))
    if events == apis.INFILL:
        return isinstance(event.get("content"), str) and bool(event["content"])
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
