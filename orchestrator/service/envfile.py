r"""A service's environment file: its secrets (API key, HF_TOKEN), mode 0600, never in the unit.

Written in the subset of systemd's EnvironmentFile= syntax that reads back exactly: `NAME='v'`
(no quote or backslash in v) or `NAME="v"` with `\\ \" \$ \`` escaped. systemd reads it itself;
under launchd the plist names it (SPECCTL_ENV_FILE) and `up` reads it back with `read`, which
refuses anything else (read back from disk, so untrusted).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from specctl.orchestrator.errors import StateError
from specctl.orchestrator.files import UnreadableError, read_text, write_atomic
from specctl.orchestrator.service.quote import control, refuse

VARIABLE = "SPECCTL_ENV_FILE"  # the file, for a service manager without EnvironmentFile=
HEADER = "# secrets of a specctl service, written by `specctl service install` (mode 0600)\n"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,127})=(?:'([^'\\]*)'|\"((?:[^\"\\]|\\[\\\"$`])*)\")")
_ESCAPED = re.compile(r"\\([\\\"$`])")


def _quoted(value: str) -> str:
    if any(control(ch) or ch == "\0" for ch in value):
        raise refuse(value, "an environment file cannot carry a line break or control character")
    if "'" not in value and "\\" not in value:
        return f"'{value}'"
    return '"' + re.sub(r"([\\\"$`])", r"\\\1", value) + '"'


def render(secrets: Mapping[str, str]) -> str:
    for name in secrets:
        if not _NAME.fullmatch(name):
            raise refuse(name, "it is not a variable name")
    return HEADER + "".join(f"{k}={_quoted(v)}\n" for k, v in sorted(secrets.items()))


def write(path: Path, secrets: Mapping[str, str], owner: str | None = None) -> None:
    """Replace the file atomically (mode 0600); `owner` (a system service's user) gets it."""
    write_atomic(path, render(secrets))
    if owner is not None:
        shutil.chown(path, owner)


def read(path: Path) -> dict[str, str]:
    """The variables of an environment file written by `write`; anything else is refused."""
    try:
        text = read_text(path, limit=1 << 16)
    except (UnreadableError, OSError) as exc:
        raise StateError(f"cannot read the service environment file {path}: {exc}; run "
                         "`specctl service install` again") from None
    found: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = _LINE.fullmatch(line)
        if m is None:
            raise StateError(f"{path}:{n}: not NAME='value' or NAME=\"value\"; run `specctl "
                             "service install` again to rewrite it")
        single, double = m.group(2), m.group(3)
        found[m.group(1)] = single if single is not None else _ESCAPED.sub(r"\1", double)
    return found


def apply(environ: MutableMapping[str, str]) -> None:
    """Under a manager without EnvironmentFile= (launchd): the secrets of $SPECCTL_ENV_FILE
    into `environ`, where not already set."""
    path = environ.get(VARIABLE)
    if path:
        for name, value in read(Path(path)).items():
            environ.setdefault(name, value)


def remove(path: Path) -> None:
    if path.exists():
        os.unlink(path)
