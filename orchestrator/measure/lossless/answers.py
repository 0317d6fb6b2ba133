"""A structured answer as a client reads it, and what differs between two (measure/lossless/
structured.py compares them).

An answer is its tool calls (each one's name and its arguments as the server wrote them: OpenAI
`tool_calls`, Anthropic Messages' `tool_use` blocks and their `input`) and its text (a JSON
schema's answer, or what a model says instead of a call), the calls' ids aside (a server draws
them afresh). Where the server reports them (a chat completion's `logprobs`), its tokens too,
each with the likeliest tokens the model weighed there: `tie` reads from them whether two
answers part where the target nearly chose the other's token (a near-tie, which numerics can
flip), or where it did not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specctl.orchestrator import sanitise
from specctl.orchestrator.errors import ServerError

SHOWN = 60  # characters of a value shown where answers differ
KEPT = 2000  # characters of a differing answer the report keeps
TIE = 0.5  # nats: a token this close to the target's own choice is one numerics can flip to.
# Measured on SmolLM2-135M Q4_1 (its own draft, n-gram, p-min, the floor), the structured
# answers that left the baseline's did so at near-ties 0.04, 0.08 and 0.30 nats apart; a
# relayed fault leaves the tokens alone, and a leaking draft picks tokens the target gives less.


@dataclass(frozen=True)
class Step:
    """One token of an answer: its text, its log-probability, the likeliest there."""

    token: str
    logprob: float
    top: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """One tool call as compared: its name and its arguments as the server wrote them."""

    name: str
    arguments: str


@dataclass(frozen=True)
class Answer:
    """A structured answer as a client reads it: its tool calls and its text (and its tokens,
    which do not count in comparing: only what the client reads does)."""

    calls: tuple[Call, ...] = ()
    text: str = ""
    steps: tuple[Step, ...] = field(default=(), compare=False)

    def shape(self) -> str:
        """What the answer is: "tool call", "JSON answer", "unfinished JSON answer" (cut by its
        length) or "text answer"."""
        if self.calls:
            return "tool call"
        try:
            json.loads(self.text)
        except ValueError:
            return "unfinished JSON answer" if self.text.lstrip()[:1] in ("{", "[") else \
                "text answer"
        return "JSON answer"

    def to_json(self) -> str:
        """The answer as a report keeps it (where it differs): calls and text, cut."""
        return _json({"calls": [[c.name, c.arguments] for c in self.calls],
                      "text": self.text})[:KEPT]


def read(api: str, reply: Mapping[str, Any]) -> Answer:
    """The answer of a `chat/completions` or `messages` reply; ServerError when it is neither."""
    try:
        if api == "messages":
            blocks = list(reply["content"])
            return Answer(tuple(Call(str(b["name"]), _json(b.get("input")))
                                for b in blocks if b.get("type") == "tool_use"),
                          "".join(str(b.get("text", "")) for b in blocks
                                  if b.get("type") == "text"))
        choice = reply["choices"][0]
        message = choice["message"]
        calls = message.get("tool_calls") or []
        return Answer(tuple(Call(str(c["function"]["name"]), str(c["function"]["arguments"]))
                            for c in calls), str(message.get("content") or ""),
                      _steps(choice.get("logprobs")))
    except (KeyError, IndexError, TypeError, AttributeError, ValueError):
        raise ServerError(f"an answer that is not a {api} reply: "
                          f"{sanitise.line(json.dumps(reply)[:200])}") from None


def _steps(logprobs: object) -> tuple[Step, ...]:
    """A chat completion's tokens from its `logprobs` (none where it has none)."""
    content = logprobs.get("content") if isinstance(logprobs, Mapping) else None
    if not isinstance(content, list):
        return ()
    return tuple(Step(str(t["token"]), float(t["logprob"]),
                      {str(o["token"]): float(o["logprob"]) for o in t.get("top_logprobs") or []})
                 for t in content)


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def tie(base: Answer, other: Answer) -> str | None:
    """Where `other`'s tokens first leave `base`'s, whether the target nearly chose `other`'s
    token there (within TIE nats of its own, among the likeliest the baseline reported), and
    the answers part no earlier (what the shared tokens wrote is the same in both): what
    numerics can flip, in words. None where it is not, or where the tokens do not say (none
    reported, the same tokens read otherwise, an answer that is no slice of its tokens' text)."""
    at = next((i for i, (a, b) in enumerate(zip(base.steps, other.steps, strict=False))
               if a.token != b.token), None)
    if at is None:
        return None
    mine, theirs = other.steps[at].token, base.steps[at]
    if mine not in theirs.top or theirs.logprob - theirs.top[mine] > TIE:
        return None
    parting = _parting(base, other)
    if parting is None or parting < len("".join(s.token for s in base.steps[:at])):
        return None
    return (f"at token {at} the target nearly chose it: {_quoted(mine)} "
            f"{theirs.logprob - theirs.top[mine]:.2f} nats below {_quoted(theirs.token)}")


def _parting(base: Answer, other: Answer) -> int | None:
    """Where, in the text of the baseline's tokens, its answer and `other`'s begin to differ:
    the first differing call's name or arguments, else the text, found there verbatim (None:
    not found, or a call more or fewer)."""
    raw = "".join(s.token for s in base.steps)
    if len(base.calls) != len(other.calls):
        return None
    for a, b in zip(base.calls, other.calls, strict=True):
        if a.name != b.name:
            return _found(raw, a.name, 0)
        if a.arguments != b.arguments:
            return _found(raw, a.arguments, _first(a.arguments, b.arguments))
    return _found(raw, base.text, _first(base.text, other.text))


def _found(raw: str, part: str, offset: int) -> int | None:
    where = raw.find(part) if part else -1
    return None if where < 0 else where + offset


def _first(base: str, other: str) -> int:
    """The first character where `other` leaves `base`."""
    return next((i for i, (x, y) in enumerate(zip(base, other, strict=False)) if x != y),
                min(len(base), len(other)))


def difference(base: Answer, other: Answer) -> str | None:
    """What differs between the baseline's answer and another's, in words; None: identical."""
    if base == other:
        return None
    if len(base.calls) != len(other.calls):
        return (f"{len(other.calls)} tool call(s) ({_names(other)}) where the baseline made "
                f"{len(base.calls)} ({_names(base)})")
    for n, (a, b) in enumerate(zip(base.calls, other.calls, strict=True), 1):
        if a.name != b.name:
            return f"tool call {n} is {_quoted(b.name)} where the baseline called " \
                   f"{_quoted(a.name)}"
        if a.arguments != b.arguments:
            return f"tool call {n} ({a.name}): its arguments differ{_where(a, b)}"
    return f"its text differs {_from(base.text, other.text)}"


def _from(base: str, other: str) -> str:
    """Where `other` leaves `base`, from the first character that differs."""
    at = _first(base, other)
    return f"from character {at}: {_quoted(other[at:])} where the baseline has " \
           f"{_quoted(base[at:])}"


def _names(answer: Answer) -> str:
    return ", ".join(_quoted(c.name) for c in answer.calls) or "none"


def _where(a: Call, b: Call) -> str:
    """Where two calls' arguments differ: the first argument whose value does, else from which
    character (arguments cut by the answer's length are no JSON)."""
    try:
        base, other = json.loads(a.arguments), json.loads(b.arguments)
    except ValueError:
        return f" {_from(a.arguments, b.arguments)}"
    if base == other:
        return f" in their formatting, {_from(a.arguments, b.arguments)}"
    if isinstance(base, dict) and isinstance(other, dict):
        key = next(k for k in [*base, *other] if base.get(k, ...) != other.get(k, ...))
        mine = _cut(_json(other[key])) if key in other else "nothing"
        theirs = _cut(_json(base[key])) if key in base else "nothing"
        return f" at {_cut(str(key))}: {mine} where the baseline has {theirs}"
    return f": {_cut(_json(other))} where the baseline has {_cut(_json(base))}"


def _cut(text: str) -> str:
    """A value as shown where answers differ: its first SHOWN characters, made safe to print."""
    return sanitise.line(text if len(text) <= SHOWN else text[:SHOWN] + "...")


def _quoted(text: str) -> str:
    return _cut(json.dumps(text if len(text) <= SHOWN else text[:SHOWN], ensure_ascii=False)
                + ("..." if len(text) > SHOWN else ""))
