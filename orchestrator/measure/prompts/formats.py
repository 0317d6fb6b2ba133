"""The formats `--prompts FILE` reads, told apart by their content:

- ShareGPT: a JSON array (or JSON lines) of `{"conversations": [{"from": "human", "value":
  ...}, {"from": "gpt", ...}, ...]}`. The human (or user) turns are the conversation's turns;
  the gpt (assistant) turns are dropped: the model's own replies are sent instead, as a client
  would; a system entry is the system message.
- MT-Bench / Spec-Bench `question.jsonl`: `{"question_id", "category", "turns": [...]}`.
- OpenAI chat lines: `{"messages": [...]}` (or the Batch API's `{"body": {"messages": ...}}`):
  every user message a turn, assistant messages dropped, the system (developer) message kept;
  the line's `max_tokens` (or `max_completion_tokens`) is its answer length.
- Text: one prompt per line.

A file that starts with `[` and then `{` is a JSON array; one whose first line starts with `{` is
JSON lines (each line one of the formats above, by its keys); anything else is text lines. An
item or line that could be read two ways ("turns" and "messages") is read as one and said in one
line. Everything is bounded (the file, the prompts, the turns, a category's name) and every
error is one line naming the file and line (or item).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specctl.orchestrator.errors import ProfileError

MAX_PROMPTS = 10_000
MAX_TURNS = 64  # user turns of one conversation (MT-Bench has 2)
MAX_CATEGORY = 40  # characters of a category's name
MAX_TOKENS = 1 << 20  # a recorded answer length above this is no request's
TEXT, OPENAI, SPECBENCH, SHAREGPT = "text lines", "OpenAI chat", "Spec-Bench questions", \
    "ShareGPT"
_KEYS = {"messages": OPENAI, "turns": SPECBENCH, "conversations": SHAREGPT}
_HUMAN, _MODEL = {"human", "user"}, {"gpt", "assistant", "chatgpt", "bard", "bing", "model"}
_SYSTEM = {"system", "developer"}
_UNSAFE = re.compile(r"[^\w.-]+")  # \w: letters and digits of any script, and _


@dataclass(frozen=True)
class Conversation:
    """One prompt as a file gave it: its user turns (the last one the prompt), a system
    message, the answer length and the category where the file named them."""

    turns: tuple[str, ...]
    category: str | None = None
    system: str | None = None
    max_tokens: int | None = None


@dataclass(frozen=True)
class Parsed:
    conversations: list[Conversation]
    format: str
    notes: list[str]  # one line each where the content could be read two ways


def parse(path: Path, text: str) -> Parsed:
    """The conversations of a prompts file, its format told apart by its content."""
    text = text.removeprefix("\ufeff")  # a byte-order mark some editors write
    body = text.lstrip()
    if re.match(r"\[\s*[{\]]", body):  # an array of objects (text may start with '[')
        return _array(path, text)
    first = body.split("\n", 1)[0].strip()
    if first.startswith("{"):
        return _json_lines(path, text)
    found: list[Conversation] = []
    notes: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            found.append(Conversation((line.strip(),)))
            if line.lstrip().startswith("{") and not notes:
                notes.append(f"{path}: read as text lines (line 1 is not JSON), though line "
                              f"{number} starts with '{{'")
    return Parsed(_bounded(path, found), TEXT, notes)


def _array(path: Path, text: str) -> Parsed:
    data = _json(text, f"{path}", whole=True)
    if not isinstance(data, list):
        raise ProfileError(f"{path}: a JSON file of prompts holds an array of conversations")
    if len(data) > MAX_PROMPTS:
        raise ProfileError(f"{path}: more than {MAX_PROMPTS} prompts; sample them first")
    notes: list[str] = []
    found = [conversation(item, f"{path}: item {n}", notes)
             for n, item in enumerate(data, 1)]
    return Parsed(_bounded(path, found), _format(data), notes)


def _json_lines(path: Path, text: str) -> Parsed:
    found: list[Conversation] = []
    notes: list[str] = []
    items: list[Any] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        data = _json(line, where, "; a prompts file whose first line starts with '{' is JSON "
                     "lines, one object per line")
        found.append(conversation(data, where, notes))
        items.append(data)
        if len(found) > MAX_PROMPTS:
            raise ProfileError(f"{path}: more than {MAX_PROMPTS} prompts; sample them first")
    return Parsed(_bounded(path, found), _format(items), notes)


def _json(text: str, where: str, then: str = "", whole: bool = False) -> Any:
    """`text` as JSON; where it is not, the place (a whole file's line, a line's column)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        at = f"{where}:{exc.lineno}" if whole else where
        raise ProfileError(f"{at}: not JSON ({exc.msg} at column {exc.colno}){then}") from None
    except RecursionError:
        raise ProfileError(f"{where}: JSON nested too deep to be a prompt") from None


def _format(items: Sequence[Any]) -> str:
    """The formats the items were read as (a file may mix them)."""
    return " and ".join(sorted({_KEYS[_keys(_unwrap(item))[0]] for item in items}))


def _unwrap(data: Any) -> Any:
    """An OpenAI Batch API line's request (its "body"), keeping the line's category."""
    if isinstance(data, dict) and isinstance(data.get("body"), dict) and not _keys(data):
        return {**data["body"], **{k: data[k] for k in ("category",) if k in data}}
    return data


def _keys(data: Any) -> list[str]:
    return [k for k in _KEYS if isinstance(data, dict) and k in data]


def _bounded(path: Path, found: list[Conversation]) -> list[Conversation]:
    if not found:
        raise ProfileError(f"{path} holds no prompts (one per line: text, or a JSON chat "
                           "request; or a Spec-Bench or ShareGPT file)")
    if len(found) > MAX_PROMPTS:
        raise ProfileError(f"{path}: more than {MAX_PROMPTS} prompts; sample them first")
    return found


def conversation(data: Any, where: str, notes: list[str]) -> Conversation:
    """One line or item of a JSON prompts file, in whichever format its keys say."""
    data = _unwrap(data)
    keys = _keys(data)
    if not keys:
        raise ProfileError(f"{where}: a JSON prompt needs \"messages\" (OpenAI chat), "
                           "\"turns\" (Spec-Bench, MT-Bench) or \"conversations\" (ShareGPT)")
    if len(keys) > 1 and len(notes) < 1:
        notes.append(f"{where}: has {' and '.join(repr(k) for k in keys)}; read as "
                     f"{_KEYS[keys[0]]} (its {keys[0]!r})")
    read: Callable[[Mapping[str, Any], str], Conversation] = {
        "messages": _openai, "turns": _specbench, "conversations": _sharegpt}[keys[0]]
    found = read(data, where)
    if "category" in data:
        found = Conversation(found.turns, category(data["category"], where), found.system,
                             found.max_tokens)
    return found


def category(value: Any, where: str) -> str:
    """A file's category name made safe to show and to name in --mix: letters, digits, '.',
    '-' and '_' (other runs become '_'), at most MAX_CATEGORY characters."""
    name = _UNSAFE.sub("_", value.strip()).strip("_")[:MAX_CATEGORY] if isinstance(
        value, str) else ""
    if not name:
        raise ProfileError(f"{where}: \"category\" must be a name (text with letters or "
                           "digits)")
    return name


def _turns(turns: Sequence[str], where: str) -> tuple[str, ...]:
    if not turns:
        raise ProfileError(f"{where}: no user turn with text")
    if len(turns) > MAX_TURNS:
        raise ProfileError(f"{where}: {len(turns)} user turns; at most {MAX_TURNS}")
    return tuple(turns)


def _specbench(data: Mapping[str, Any], where: str) -> Conversation:
    turns = data["turns"]
    if not isinstance(turns, list) or not all(isinstance(t, str) and t.strip() for t in turns):
        raise ProfileError(f"{where}: \"turns\" must be a list of non-empty texts")
    return Conversation(_turns(turns, where))


def _sharegpt(data: Mapping[str, Any], where: str) -> Conversation:
    entries = data["conversations"]
    if not isinstance(entries, list):
        raise ProfileError(f"{where}: \"conversations\" must be a list of turns")
    turns, system = [], None
    for n, entry in enumerate(entries, 1):
        role = entry.get("from", entry.get("role")) if isinstance(entry, dict) else None
        value = entry.get("value", entry.get("content")) if isinstance(entry, dict) else None
        if not isinstance(role, str) or not isinstance(value, str):
            raise ProfileError(f"{where}: turn {n} needs \"from\" and a text \"value\"")
        role = role.lower()
        if role in _HUMAN:
            if not value.strip():
                raise ProfileError(f"{where}: turn {n} (from {role}) is empty")
            turns.append(value)
        elif role in _SYSTEM:
            system = system or value
        elif role not in _MODEL:
            raise ProfileError(f"{where}: turn {n} is from {_short(role)!r}; ShareGPT turns are "
                               "from human, gpt or system")
    if not turns:
        raise ProfileError(f"{where}: a conversation with no human turn")
    return Conversation(_turns(turns, where), system=system)


def _openai(data: Mapping[str, Any], where: str) -> Conversation:
    messages = data["messages"]
    if not isinstance(messages, list):
        raise ProfileError(f"{where}: \"messages\" must be a list")
    turns, system = from_messages(messages)
    if not turns:
        raise ProfileError(f"{where}: a JSON line needs \"messages\" with a user message "
                           "whose content is text")
    return Conversation(_turns(turns, where), system=system,
                        max_tokens=_max_tokens(data, where))


def from_messages(messages: Sequence[Any]) -> tuple[list[str], str | None]:
    """The user turns (text content, the text parts of a list) and the first system (or
    developer) message of OpenAI chat messages; assistant and tool messages are dropped."""
    turns, system = [], None
    for m in messages:
        role = m.get("role") if isinstance(m, dict) else None
        text = text_of(m.get("content")) if isinstance(m, dict) else None
        if role == "user" and text and text.strip():
            turns.append(text)
        elif role in _SYSTEM and text and system is None:
            system = text
    return turns, system


def text_of(content: Any) -> str | None:
    """A message's text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p["text"] for p in content if isinstance(p, dict) and p.get("type") == "text"
                 and isinstance(p.get("text"), str)]
        return "\n\n".join(parts) if parts else None
    return None


def _max_tokens(data: Mapping[str, Any], where: str) -> int | None:
    value = data.get("max_completion_tokens", data.get("max_tokens"))
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOKENS:
        raise ProfileError(f"{where}: \"max_tokens\" must be a whole number from 1 to "
                           f"{MAX_TOKENS}")
    return value


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:40] + "…"
