"""SPECCTL_* variables that override single profile fields: `SPECCTL_K=4`,
`SPECCTL_SERVER__PORT=9000`, `SPECCTL_LLAMACPP__N_MIN=2`.

A variable whose first part names a profile field is an override, checked against the profile
model: an unknown field is an error naming the variable, never ignored. So is a variable with
`__` whose first part is no section (`SPECCTL_SERVR__PORT`): machine settings have no `__`.
Any other SPECCTL_* variable is a machine setting (config/settings.py, the adapters' own) and
is left alone here.
Values are typed by the field they set, so the profile model validates them strictly.
"""

from __future__ import annotations

import difflib
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from specctl.orchestrator.errors import ProfileError

PREFIX = "SPECCTL_"
NOT_OVERRIDDEN = ("name",)  # the name comes from the file (or its `name` key) alone


@dataclass(frozen=True)
class Overrides:
    data: dict[str, Any] = field(default_factory=dict)  # nested, ready to merge into a profile
    origin: dict[tuple[str, ...], str] = field(default_factory=dict)  # field path -> variable

    def blame(self, loc: tuple[str, ...]) -> str | None:
        """The variable behind a validation error at `loc`, if one set it (or a part of it)."""
        for path, var in self.origin.items():
            n = min(len(path), len(loc))
            if path[:n] == loc[:n]:
                return var
        return None


def _members(annotation: Any) -> tuple[Any, ...]:
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return tuple(a for a in typing.get_args(annotation) if a is not type(None))
    return (annotation,)


def _is_text(annotation: Any) -> bool:
    """str, a path, or a Literal of strings: the variable's text is the value itself."""
    for member in _members(annotation):
        if typing.get_origin(member) is typing.Literal:
            if not all(isinstance(v, str) for v in typing.get_args(member)):
                return False
        elif member not in (str, Path):
            return False
    return True


def _is_list(annotation: Any) -> bool:
    return any(typing.get_origin(m) in (list, tuple) for m in _members(annotation))


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The model of a section-typed field (`server: Server`), else None."""
    return _model(annotation)


def _model(annotation: Any) -> type[BaseModel] | None:
    found = [m for m in _members(annotation) if isinstance(m, type) and issubclass(m, BaseModel)]
    return found[0] if found else None


def typed(annotation: Any, raw: str) -> Any:
    """The variable's text as the field's type: text as is, a list comma-separated (or JSON),
    anything else as JSON (numbers, true/false); what does not parse stays text for the model
    to refuse."""
    text = raw.strip()
    if _is_text(annotation):
        return raw
    if _is_list(annotation) and not text.startswith("["):
        return [part.strip() for part in text.split(",") if part.strip()]
    try:
        return json.loads(text)
    except ValueError:
        return raw


def read(model: type[BaseModel], environ: Mapping[str, str]) -> Overrides:
    """The overrides among `environ`'s SPECCTL_* variables for a profile of type `model`."""
    out = Overrides()
    fields = model.model_fields
    for var, raw in sorted(environ.items()):
        if not var.upper().startswith(PREFIX):
            continue
        path = tuple(var[len(PREFIX):].lower().split("__"))
        if path[0] not in fields and len(path) > 1:  # `__` is a profile field's path, always
            close = difflib.get_close_matches(path[0], [f for f in fields
                                                        if _model(fields[f].annotation)], n=1)
            hint = f" (did you mean {PREFIX}{close[0].upper()}__...?)" if close else ""
            raise ProfileError(f"${var}: the profile has no section '{path[0]}'{hint}; fix or "
                               "unset the variable")
        if path[0] not in fields or path[0] in NOT_OVERRIDDEN:
            continue  # a machine setting
        annotation = fields[path[0]].annotation
        section = _model(annotation)
        if len(path) == 1:
            if section is not None:
                raise ProfileError(f"${var}: [{path[0]}] is a section; set one field of it, "
                                   f"e.g. {var}__{next(iter(section.model_fields)).upper()}")
            out.data[path[0]] = typed(annotation, raw)
        else:
            if section is None or len(path) > 2:
                raise ProfileError(f"${var}: '{'.'.join(path)}' is not a profile field; "
                                   "fix or unset the variable")
            known = section.model_fields
            if path[1] not in known:
                raise ProfileError(f"${var}: [{path[0]}] has no field '{path[1]}' (it has "
                                   f"{', '.join(known)}); fix or unset the variable")
            out.data.setdefault(path[0], {})[path[1]] = typed(known[path[1]].annotation, raw)
        out.origin[path] = var
    return out
