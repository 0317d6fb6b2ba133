"""A request body of each API the gateway passes on, read as the conversation it carries: for the
router (measure/route/classify.facts: the kind, the prompt's characters, the answer asked for)
and for the kept traffic (measure/traffic/store: the messages it keeps).

`chat` (OpenAI chat completions) and `completions` (text completions) are read where they are
used, as they always were. The others become a `Conversation`:

- `messages` (Anthropic Messages): `system` (a string or text blocks) and each message's text
  blocks are its turns. A tool_use block (its name and input) and a tool_result block (its
  text) are text the engine prefills, counted in `chars`, but no turn: the kind is read from the
  last user turn with text (an agent's tool results answer an ask made before them), and the
  kept traffic drops tool calls and results as it does chat's. `max_tokens`; `stop_sequences`
  is kept as `stop`.
- `responses` (OpenAI Responses): `instructions` is the system turn; `input` a string (one user
  turn) or items: messages (a string, or input_text and output_text parts; developer is system)
  are turns, function calls and their outputs are counted, not turns. `max_output_tokens`.
- `infill` (fill-in-the-middle: an editor's code around the cursor, `input_prefix`,
  `input_suffix`, `prompt` and `input_extra` chunks): of kind `code`, counted whole.
  `n_predict` (else `max_tokens`). Not kept: it is no conversation, and replayed as one (the
  replay sends chat requests) it would measure another request.

Any other format (embeddings, a path an adapter adds) is an empty conversation: kind `chat`, no
characters, not kept. Bodies come from outside: every shape is tolerated (the gateway's schema
checked the fields the engines need; what is not text is left out)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CHAT, COMPLETIONS, MESSAGES, RESPONSES, INFILL = (
    "chat", "completions", "messages", "responses", "infill")
_SAMPLING = ("temperature", "top_p", "seed", "n")  # kept under the same names as chat's
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


@dataclass(frozen=True)
class Conversation:
    """What a request asks, in chat's words: its text turns (role, text), every character the
    engine prefills, the answer's length it asks for, the kind its API fixes (None: the
    classifier reads the turns) and its sampling parameters by chat's names."""

    turns: tuple[tuple[str, str], ...] = ()
    chars: int = 0
    max_tokens: int | None = None
    kind: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    kept: bool = True

    def as_chat(self) -> dict[str, Any] | None:
        """The chat request the kept traffic stores for it; None: not kept."""
        if not self.kept or not self.turns:
            return None
        chat: dict[str, Any] = {"messages": [{"role": r, "content": t} for r, t in self.turns],
                                **self.params}
        if self.max_tokens is not None:
            chat["max_tokens"] = self.max_tokens
        return chat

    def ask(self) -> str | None:
        """The text of its last user turn (the request's ask), None without one."""
        return next((t for r, t in reversed(self.turns) if r == "user"), None)


def conversation(fmt: str, body: Mapping[str, Any]) -> Conversation:
    """`body` of format `fmt` read as a Conversation (chat and completions: empty, read where
    they are used)."""
    if fmt == MESSAGES:
        return _messages(body)
    if fmt == RESPONSES:
        return _responses(body)
    if fmt == INFILL:
        return _infill(body)
    return Conversation(kept=False)


def _messages(body: Mapping[str, Any]) -> Conversation:
    turns: list[tuple[str, str]] = []
    extra = 0
    system = body.get("system")
    text = system if isinstance(system, str) else _texts(system, "text")
    if text:
        turns.append(("system", text))
    for message in _list(body.get("messages")):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            continue
        content = message.get("content")
        text = content if isinstance(content, str) else _texts(content, "text")
        extra += sum(_tool_chars(b) for b in _list(content) if isinstance(b, dict))
        if text:
            turns.append((role, text))
    params = _sampling(body)
    stop = body.get("stop_sequences")
    if isinstance(stop, list):
        params["stop"] = stop
    return Conversation(tuple(turns), _chars(turns) + extra, _positive(body.get("max_tokens")),
                        params=params)


def _tool_chars(block: Mapping[str, Any]) -> int:
    """The characters of a tool_use (name and input) or tool_result (its text) block."""
    if block.get("type") == "tool_use":
        return len(str(block.get("name", ""))) + len(_json(block.get("input")))
    if block.get("type") == "tool_result":
        content = block.get("content")
        return len(content) if isinstance(content, str) else len(_texts(content, "text"))
    return 0


def _responses(body: Mapping[str, Any]) -> Conversation:
    turns: list[tuple[str, str]] = []
    extra = 0
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        turns.append(("system", instructions))
    found = body.get("input")
    if isinstance(found, str) and found:
        turns.append(("user", found))
    for item in _list(found):
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") in _ROLES:
            content = item.get("content")
            text = content if isinstance(content, str) else _texts(
                content, "input_text", "output_text")
            if text:
                turns.append((_ROLES[item["role"]], text))
        elif kind == "function_call":
            extra += len(str(item.get("name", ""))) + len(str(item.get("arguments", "")))
        elif kind == "function_call_output":
            output = item.get("output")
            extra += len(output) if isinstance(output, str) else len(_texts(output,
                                                                             "input_text"))
    return Conversation(tuple(turns), _chars(turns) + extra,
                        _positive(body.get("max_output_tokens")), params=_sampling(body))


def _infill(body: Mapping[str, Any]) -> Conversation:
    parts = [body.get(k) for k in ("input_prefix", "input_suffix", "prompt")]
    parts += [c.get("text") for c in _list(body.get("input_extra")) if isinstance(c, dict)]
    chars = sum(len(p) for p in parts if isinstance(p, str))
    asked = _positive(body.get("n_predict"))
    return Conversation((), chars, asked if asked is not None else _positive(
        body.get("max_tokens")), kind="code", kept=False)


def _texts(content: Any, *types: str) -> str:
    """The text of the parts of `content` whose type is one of `types`, joined as chat's are."""
    return "\n\n".join(p["text"] for p in _list(content) if isinstance(p, dict)
                       and p.get("type") in types and isinstance(p.get("text"), str))


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _chars(turns: list[tuple[str, str]]) -> int:
    return sum(len(text) for _role, text in turns)


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return ""


def _positive(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None


def _sampling(body: Mapping[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in _SAMPLING if body.get(k) is not None}
