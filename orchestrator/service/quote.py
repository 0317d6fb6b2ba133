"""One quoting function per output format: what specctl writes into a systemd unit
(`systemd_value`) or a launchd plist (`plist_value`), and unit and label names (`unit_escape`).

A value comes out exactly as the service manager will read it back
(tests/test_properties_parsers_writers.py checks it against `systemd-analyze verify`), so no value
can add a line, a directive or a key; what cannot be written exactly is refused (UnitValueError),
never mangled.
"""

from __future__ import annotations

import string
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from specctl.orchestrator.errors import SpecctlError

_BARE = frozenset(string.ascii_letters + string.digits + "-_./:=+@,")  # a word needs no quotes
_NAME_SAFE = frozenset(string.ascii_letters + string.digits + ":_-")


class UnitValueError(SpecctlError):
    """A value that a unit file or plist cannot carry exactly."""


def unit_escape(name: str) -> str:
    """`name` as a part of a unit or label name, escaped as `systemd-escape` does (each byte
    outside [A-Za-z0-9:_.] as \\xNN, a leading '.' too), except that '-' stays and '/' is
    escaped too: the name is not a path, and nothing reads it back as one."""
    out = []
    for i, ch in enumerate(name):
        if ch in _NAME_SAFE or (ch == "." and i > 0):
            out.append(ch)
        else:
            out += [f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogatepass")]
    return "".join(out)


def control(ch: str) -> bool:
    return unicodedata.category(ch) in ("Cc", "Cs")  # controls, and lone surrogates


def _not_text(ch: str) -> bool:
    """NUL, a lone surrogate or a Unicode noncharacter (U+FDD0-FDEF, U+xFFFE, U+xFFFF): systemd
    drops a line holding one ("not UTF-8 clean"), XML cannot carry U+FFFE."""
    cp = ord(ch)
    return (ch == "\0" or unicodedata.category(ch) == "Cs" or 0xFDD0 <= cp <= 0xFDEF
            or cp & 0xFFFE == 0xFFFE)


def refuse(value: str, why: str) -> UnitValueError:
    return UnitValueError(f"{value[:120]!r} cannot be written into a service file: {why}; "
                          "choose another value (a path, directory or name without it)")


@dataclass(frozen=True)
class Words:
    """A list of words systemd splits and unquotes: a command line (`ExecStart=`, where `$`
    expands), assignments (`Environment=`), paths (`ReadWritePaths=`, backslashes kept) or
    bind mounts (`BindPaths=`: paths where a ':' would end the source)."""

    items: tuple[str, ...]
    kind: Literal["command", "assignments", "paths", "binds"] = "assignments"


def _word(word: str, kind: str) -> str:
    out = []
    for ch in word:
        if _not_text(ch):
            raise refuse(word, "it holds a NUL or a character that is not text")
        if kind in ("paths", "binds") and (ch in "\\\"'" or control(ch)):
            raise refuse(word, "systemd keeps quotes, backslashes and control characters in "
                                "paths as they are")
        if kind == "binds" and ch == ":":
            raise refuse(word, "systemd reads a ':' in BindPaths= as the end of the source "
                               "path")
        if ch in "\\\"":
            out.append("\\" + ch)
        elif control(ch):
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x80 else f"\\u{ord(ch):04x}")
        else:
            out.append({"%": "%%", "$": "$$" if kind == "command" else "$"}.get(ch, ch))
    text = "".join(out)
    return text if word and all(c in _BARE for c in word) else f'"{text}"'


def _text(value: str) -> str:
    if any(control(ch) or _not_text(ch) for ch in value):
        raise refuse(value, "it holds a line break, another control character or a character "
                            "that is not text")
    if value != value.strip() or value.endswith("\\"):
        raise refuse(value, "systemd would drop its outer spaces or join it with the next line")
    return value.replace("%", "%%")


def systemd_value(value: str | Words) -> str:
    """The one quoting function for systemd units: a value exactly as systemd will read it
    back. Text (`Description=`, `User=`, `EnvironmentFile=`) is written as is with specifiers
    escaped; Words are quoted and escaped one by one. What cannot be written exactly (a line
    break in text, a quote in a path) is refused: UnitValueError."""
    if isinstance(value, Words):
        return " ".join(_word(w, value.kind) for w in value.items)
    return _text(value)


def plist_value(value: object) -> object:
    """The one check for launchd plists: plistlib escapes XML, but cannot carry most control
    characters (and turns a carriage return into a line feed) nor noncharacters, so those are
    refused."""
    if isinstance(value, str):
        bad = next((ch for ch in value if (control(ch) and ch not in "\t\n") or _not_text(ch)),
                   None)
        if bad is not None:
            raise refuse(value, f"a plist cannot carry the character {bad!r}")
        return value
    if isinstance(value, Mapping):
        return {plist_value(k): plist_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plist_value(v) for v in value]
    return value
