"""TGI `text-generation-launcher`: its options, read from the recorded launcher reference.

TGI cannot run here, so the argv specctl builds is checked against the launcher's own
documentation (`docs/source/reference/launcher.md` of the release in `VERSION`, recorded under
`dialects/` with a `.source` file saying where it came from). Parsing is pure; `validate` lists
what clap would reject.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import resources

VERSION = "3.3.7"
# `cors_allow_origin: Vec<String>` (launcher/src/main.rs @ v3.3.7) is clap's Append action: the
# one option that may be given more than once. The markdown does not say so.
REPEATABLE = frozenset({"--cors-allow-origin"})

_FLAG = re.compile(r"^\s*(?:(-[A-Za-z]), )?(--[a-z0-9-]+)(?: <([A-Z0-9_]+)>)?\s*$")
_ENV = re.compile(r"^\s*\[env: ([A-Z0-9_]+)=\]")
_DEFAULT = re.compile(r"^\s*\[default: (.*)\]\s*$")
_VALUES = re.compile(r"^\s*\[possible values: (.*)\]\s*$")
_VALUE_ITEM = re.compile(r"^\s*- ([A-Za-z0-9_.-]+):")


@dataclass(frozen=True)
class LauncherOption:
    long: str  # "--model-id"
    short: str | None = None  # "-p"
    takes_value: bool = False
    env: str | None = None  # "MODEL_ID"
    default: str | None = None
    possible_values: tuple[str, ...] = ()


def parse(text: str) -> dict[str, LauncherOption]:
    """Options of the launcher reference markdown, by long flag, in the documented order."""
    options: dict[str, LauncherOption] = {}
    current: LauncherOption | None = None
    in_block = listing = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_block = not in_block
            continue
        flag = _FLAG.match(line) if in_block else None
        if flag:
            current = LauncherOption(flag.group(2), flag.group(1), flag.group(3) is not None)
            listing = False
        elif current is None or not in_block:
            continue
        elif line.strip() == "Possible values:":  # "- name: description" lines follow
            listing = True
        elif (item := _VALUE_ITEM.match(line)) and listing:
            current = replace(current, possible_values=(*current.possible_values, item[1]))
        elif env := _ENV.match(line):
            current = replace(current, env=env[1])
        elif default := _DEFAULT.match(line):
            current = replace(current, default=default[1])
        elif values := _VALUES.match(line):
            current = replace(current, possible_values=tuple(re.split(r",\s*", values[1])))
        options[current.long] = current
    return options


def load(version: str = VERSION) -> dict[str, LauncherOption]:
    """The options of a recorded launcher reference (`dialects/tgi-launcher-<version>.md`)."""
    folder = resources.files("specctl.adapters") / "dialects"
    return parse((folder / f"tgi-launcher-{version}.md").read_text(encoding="utf-8"))


def validate(argv: Sequence[str], options: Mapping[str, LauncherOption]) -> list[str]:
    """Problems with launcher arguments (what follows the image or `text-generation-launcher`):
    unknown or ambiguous flags, missing or unexpected values, values outside the documented
    ones, flags given twice. An empty list means the launcher would accept them."""
    shorts: dict[str, list[LauncherOption]] = {}
    for opt in options.values():
        if opt.short:
            shorts.setdefault(opt.short, []).append(opt)
    problems: list[str] = []
    seen: set[str] = set()
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        found, name, value = _split(arg, options, shorts)
        if not found:
            problems.append(f"unknown option {name}" if name else f"unexpected argument {arg!r}")
            if name and value is None and i < len(argv) and not _is_flag(argv[i]):
                i += 1  # most likely its value: one problem, not two
            continue
        opt = found[0]
        if len(found) > 1:
            longs = ", ".join(o.long for o in found)
            problems.append(f"{name} is ambiguous ({longs}); use the long flag")
        if opt.long in seen and opt.long not in REPEATABLE:
            problems.append(f"{opt.long} given more than once")
        seen.add(opt.long)
        if opt.takes_value and value is None:
            if i == len(argv) or _is_flag(argv[i]):
                problems.append(f"{opt.long} needs a value")
                continue
            value = argv[i]
            i += 1
        if not opt.takes_value and value is not None:
            problems.append(f"{opt.long} takes no value")
        elif opt.possible_values and value not in opt.possible_values:
            allowed = ", ".join(opt.possible_values)
            problems.append(f"{opt.long} {value!r} is not one of: {allowed}")
    return problems


def _is_flag(arg: str) -> bool:
    return arg.startswith("-") and arg != "-"


def _split(arg: str, options: Mapping[str, LauncherOption],
           shorts: Mapping[str, list[LauncherOption]]
           ) -> tuple[list[LauncherOption], str, str | None]:
    """The options `arg` may name, the flag as written, and a value attached with `=` (or, for a
    short flag, directly: `-p3000`). No name for a positional argument."""
    if not _is_flag(arg) or arg == "--":
        return [], "", None
    if arg.startswith("--"):
        name, eq, value = arg.partition("=")
        return ([options[name]] if name in options else []), name, (value if eq else None)
    name, rest = arg[:2], arg[2:]
    return list(shorts.get(name, [])), name, (rest.removeprefix("=") if rest else None)
