"""A validated profile as TOML text (what `profiles show` prints after the file): top-level keys,
then one table per section, lists of tables as [[...]]; unset values (None) are said in a
comment, since TOML has no null."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specctl.orchestrator.config.adhoc import toml_value


def lines(data: Mapping[str, Any], table: str = "") -> list[str]:
    """`data` as TOML lines: its plain keys first, then its sub-tables."""
    out: list[str] = [f"[{table}]"] if table else []
    nested: list[tuple[str, Any]] = []
    for key, v in data.items():
        if isinstance(v, Mapping) or (isinstance(v, list) and v and
                                      all(isinstance(x, Mapping) for x in v)):
            nested.append((key, v))
        elif v is None:
            out.append(f"# {key}: unset")
        else:
            out.append(f"{key} = {toml_value(v)}")
    for key, v in nested:
        name = f"{table}.{key}" if table else key
        if isinstance(v, Mapping):
            out += ["", *lines(v, name)]
        else:
            for item in v:
                out += ["", f"[[{name}]]", *lines(item)]
    return out
