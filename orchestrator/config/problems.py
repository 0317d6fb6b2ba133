"""A profile's first validation problem as one line that says where it came from (the file, a
SPECCTL_* variable, a command-line flag) and what to do: the closest key for a misspelled one,
the section a key belongs in, the flag for a command-line value."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from specctl.orchestrator.config import overrides

# what the command line sets, by profile field (config/adhoc.Flags)
FLAGS = {("server", "host"): "--host", ("server", "port"): "--port",
         ("server", "context"): "--ctx", ("backend",): "--backend", ("draft",): "--draft",
         ("extra_args",): "the engine arguments after --"}
_PREFIXES = ("Value error, ", "Assertion failed, ")  # pydantic's, never the user's business


def message(err: Mapping[str, Any]) -> str:
    text = str(err["msg"])
    for prefix in _PREFIXES:
        text = text.removeprefix(prefix)
    return text


def one_line(exc: ValidationError, model: type[BaseModel], source: str,
             over: overrides.Overrides | None = None,
             cli: Mapping[str, Any] | None = None) -> str:
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    if loc and loc[-1] in ("int", "str", "float", "literal['auto']"):
        loc = loc[:-1]  # pydantic names the union member it tried; the user wrote the field
    where = ".".join(loc) or "(top level)"
    if cli and sets(cli, loc):
        flag = FLAGS.get(tuple(loc[:2])) or FLAGS.get(tuple(loc[:1])) or f"'{where}'"
        return f"{flag}: {message(err)}"
    var = over.blame(tuple(loc)) if over is not None else None
    if var is not None:
        return f"${var}: '{where}': {message(err)}; fix or unset the variable"
    if err["type"] == "extra_forbidden":
        return f"{source}: {unknown_key(model, loc)}"
    return f"{source}: '{where}': {message(err)}"


def unknown_key(model: type[BaseModel], loc: list[str]) -> str:
    """What to do about a key the profile does not have: where it moved, the section it belongs
    in, or the closest key of its own section."""
    where = ".".join(loc)
    moved = _moved(model, where)
    if moved:
        return f"'{where}' is now {moved}; move it there"
    section = _section(model, loc[:-1])
    key = loc[-1]
    homes = [name for name, sub in _sections(model) if key in sub.model_fields]
    if homes and (len(loc) == 1 or homes != loc[:1]):
        return f"unknown key '{where}': it belongs in [{homes[0]}]; move it there"
    close = difflib.get_close_matches(key, list(section.model_fields) if section else [], n=1)
    hint = f"did you mean '{close[0]}'?" if close else (
        f"[{'.'.join(loc[:-1])}] has " if len(loc) > 1 else "a profile has ") + ", ".join(
        section.model_fields if section else [])
    return f"unknown key '{where}'; {hint}"


def _sections(model: type[BaseModel]) -> list[tuple[str, type[BaseModel]]]:
    return [(name, sub) for name in model.model_fields
            if (sub := overrides.section_model(model.model_fields[name].annotation))]


def _section(model: type[BaseModel], path: list[str]) -> type[BaseModel] | None:
    current: type[BaseModel] | None = model
    for part in path:
        if current is None or part not in current.model_fields:
            return None
        current = overrides.section_model(current.model_fields[part].annotation)
    return current


def _moved(model: type[BaseModel], key: str) -> str | None:
    """Where a key of an earlier profile format lives now, e.g. `[llamacpp] rpc_workers`."""
    from specctl.orchestrator.contract import registry as backends

    del model
    for name, cls in backends.adapter_classes().items():
        if key in cls.moved_keys:
            return f"[{name}] {cls.moved_keys[key]}"
    return None


def sets(data: Mapping[str, Any], loc: list[str]) -> bool:
    """Does nested `data` set the field at `loc` (or the section holding it)?"""
    if not loc or loc[0] not in data:
        return False
    inner = data[loc[0]]
    return not isinstance(inner, Mapping) or len(loc) == 1 or sets(inner, loc[1:])
