"""What the service manager knows of an installed service: its state, how often it restarted it
and the last exit. The manager is the one restart layer (supervise.py), so its count is the
count: `service status` and `status` report it once, from here."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.service import manage, units

SYSTEMD_PROPS = ("ActiveState", "SubState", "Result", "NRestarts", "ExecMainCode",
                 "ExecMainStatus")
_CLD = {"1": "exited", "2": "killed", "3": "dumped"}  # ExecMainCode: si_code of the last exit


@dataclass(frozen=True)
class Observed:
    unit: str
    manager: str
    state: str  # e.g. "active (running)", "failed (start-limit-hit)"
    restarts: int  # by the manager
    last_exit: str | None  # e.g. "status 137", "killed by signal 9"; None before any exit

    def summary(self) -> str:
        last = f", last exit {self.last_exit}" if self.last_exit else ""
        return (f"{self.manager} {self.unit}: {self.state}, {self.restarts} restart"
                f"{'' if self.restarts == 1 else 's'} by {self.manager}{last}")


def parse_systemd(unit: str, text: str) -> Observed | None:
    props = dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln)
    if props.get("ActiveState") in (None, "") or props.get("LoadState") == "not-found":
        return None
    result = props.get("Result", "success")
    state = f"{props['ActiveState']} ({props.get('SubState', '?')}" + (
        f", {result})" if result not in ("", "success") else ")")
    code, status = props.get("ExecMainCode", "0"), props.get("ExecMainStatus", "0")
    if code == "1":
        last: str | None = f"status {status}"
    elif code in _CLD:
        last = f"{_CLD[code]} by signal {status}"
    else:
        last = None
    restarts = int(props["NRestarts"]) if props.get("NRestarts", "").isdigit() else 0
    return Observed(unit, "systemd", state, restarts, last)


def parse_launchd(label: str, text: str) -> Observed | None:
    state = re.search(r"^\s*state = (.+)$", text, re.M)
    if state is None:
        return None
    runs = re.search(r"^\s*runs = (\d+)$", text, re.M)
    code = re.search(r"^\s*last exit code = (\d+)", text, re.M)
    restarts = max(0, int(runs.group(1)) - 1) if runs else 0
    return Observed(label, "launchd", state.group(1).strip(), restarts,
                    f"status {code.group(1)}" if code else None)


def observe(spec: units.ServiceSpec, manager: str) -> Observed | None:
    """The manager's view of `spec`'s service; None when it does not know it (or cannot be
    asked: no manager running here)."""
    if manager == "systemd":
        ctl = ["systemctl"] if spec.system else ["systemctl", "--user"]
        argv = [*ctl, "show", "--property=" + ",".join(("LoadState", *SYSTEMD_PROPS)),
                spec.unit_name]
    else:
        domain = "system" if spec.system else f"gui/{os.getuid()}"
        argv = ["launchctl", "print", f"{domain}/{spec.label}"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    if manager != "systemd":
        return parse_launchd(spec.label, done.stdout)
    seen = parse_systemd(spec.unit_name, done.stdout)
    if seen is not None and seen.last_exit is None and seen.restarts:
        # restarted and running again: systemd keeps the last exit in the journal only
        seen = replace(seen, last_exit=_journal_exit(spec))
    return seen


_EXITED = re.compile(r"Main process exited, code=(\w+), status=(\d+)")


def _journal_exit(spec: units.ServiceSpec) -> str | None:
    ctl = ["journalctl"] if spec.system else ["journalctl", "--user"]
    try:
        done = subprocess.run([*ctl, "--unit", spec.unit_name, "--lines", "200", "--no-pager",
                               "--output", "cat"], capture_output=True, text=True, timeout=10,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    found = _EXITED.findall(done.stdout)
    if not found:
        return None
    code, status = found[-1]
    return f"status {status}" if code == "exited" else f"{code} by signal {status}"


def installed(name: str, dirs: Dirs, home: Path | None = None,
              manager: str | None = None) -> tuple[units.ServiceSpec, str] | None:
    """The installed service of profile `name` (the user's first, then the system's)."""
    mgr = manager or manage.default_manager()
    for system in (False, True):
        spec = manage.spec_for(name, name, dirs, system, {})
        if units.unit_path(spec, mgr, home or Path.home()).exists():
            return spec, mgr
    return None


def of_profiles(names: list[str], dirs: Dirs) -> Mapping[str, Observed]:
    """The manager's view of each profile that is installed as a service."""
    found = {}
    for name in names:
        where = installed(name, dirs)
        seen = observe(*where) if where is not None else None
        if seen is not None:
            found[name] = seen
    return found


def journal_argv(name: str, dirs: Dirs, lines: int, follow: bool) -> list[str] | None:
    """`journalctl` for profile `name`'s log when it is installed as a systemd unit."""
    where = installed(name, dirs, manager="systemd")
    if where is None:
        return None
    spec = where[0]
    ctl = ["journalctl"] if spec.system else ["journalctl", "--user"]
    return [*ctl, "--unit", spec.unit_name, "--lines", str(lines), "--no-pager", "--output",
            "cat", *(["--follow"] if follow else [])]
