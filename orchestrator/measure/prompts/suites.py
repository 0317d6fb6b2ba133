"""The shipped prompt suites (measure/prompts/NAME.json, beside this module): each a category's
prompts, for `bench` and `tune` (`--suite`) and for the router's classifier (its design and
held-out prompts)."""

from __future__ import annotations

import json
from dataclasses import replace
from importlib import resources

from specctl.orchestrator.errors import ProfileError
from specctl.orchestrator.measure.prompts.workload import Prompt

_FOLDER = resources.files("specctl.orchestrator.measure.prompts")
SUITES = tuple(name for name in ("chat", "code", "summarize", "edit", "docqa", "article",
                                 "multiturn", "math", "translate", "qa")
               if (_FOLDER / f"{name}.json").is_file())  # the shipped suites there are


def load_suite(name: str) -> list[Prompt]:
    """A shipped suite's prompts (measure/prompts/NAME.json, its "prompts"): each a string (one
    user message) or a conversation, {"turns": [...], "system": "..."} (the user's turns in
    order; the system message optional), of category NAME. A suite's "max_tokens" is its
    answers' own length, over the run's (edit: the whole function copied back, where ngram-mod
    at the engine's own lengths drafts only after 48 tokens found: at 64 tokens an answer
    has barely begun to copy)."""
    path = _FOLDER / f"{name}.json"
    if name not in SUITES:
        raise ProfileError(f"no prompt suite '{name}'; choose from {', '.join(SUITES)}")
    data = json.loads(path.read_text())
    length = data.get("max_tokens")
    if length is not None and (type(length) is not int or not 1 <= length <= 32768):
        raise ProfileError(f"prompt suite '{name}': max_tokens is a whole number of tokens")
    return [replace(_entry(name, n, item), max_tokens=length) for n, item in
            enumerate(data["prompts"], 1)]


def suite_texts(name: str) -> list[str]:
    """A suite's prompts as the router's classifier reads them (each one's last user turn)."""
    return [p.text for p in load_suite(name)]


def _entry(name: str, n: int, item: object) -> Prompt:
    """One entry of a shipped suite; a malformed one is a bug of the suite, said so."""
    if isinstance(item, str) and item.strip():
        return Prompt(name, item)
    fields = item if isinstance(item, dict) else {}
    turns, system = fields.get("turns"), fields.get("system")
    if not isinstance(turns, list) or not turns or not all(
            isinstance(t, str) and t.strip() for t in turns) or not isinstance(
            system, (str, type(None))) or set(fields) - {"turns", "system"}:
        raise ProfileError(f"prompt suite '{name}', entry {n}: a prompt is text or "
                           '{"turns": ["...", ...], "system": "..."}')
    return Prompt(name, turns[-1], tuple(turns[:-1]), system or None)
