"""`doctor`: the backends found (a broken one is a finding, not a crash) and what would run,
filtered by what can run: a profile is "yes" only when its plan fits and its backend is here or
specctl installs it (`up` does); a backend specctl does not install and that is not here, or a
profile planned for a cluster, is "no" with why. For a recorded machine (`--hardware`) nothing
here is probed: its backends are assumed, and said to be."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specctl.orchestrator.app import App
from specctl.orchestrator.config import profiles
from specctl.orchestrator.contract.launch import Installed
from specctl.orchestrator.errors import SpecctlError
from specctl.orchestrator.runtime import provision
from specctl.orchestrator.sizes import gib, in_gib


@dataclass(frozen=True)
class Backend:
    """One backend as doctor reports it: found here, missing (how to get it), broken (why), or
    assumed (planning for a recorded machine)."""

    name: str
    found: Installed | None
    state: str  # "installed", "missing", "broken", "assumed"
    line: str

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "installed": self.found is not None, "state": self.state,
                "version": self.found.version if self.found else None,
                "dialect": self.found.dialect if self.found else None,
                "path": self.found.path if self.found else None, "line": self.line}


@dataclass(frozen=True)
class Verdict:
    """Whether a profile would run here (or on the recorded machine), and what or why not."""

    profile: str
    runs: bool
    line: str
    backend: str | None = None
    memory_gib: float | None = None

    def to_json(self) -> dict[str, object]:
        return {"profile": self.profile, "runs": self.runs, "line": self.line,
                "backend": self.backend, "memory_gib": self.memory_gib}


ASSUMED = "assumed (planning for a recorded machine: what it has installed is not known)"


def backends(app: App, recorded: Path | None) -> list[Backend]:
    """Each backend: probed here one at a time (one that fails to probe is a finding), or, for a
    recorded machine, assumed."""
    out = []
    for name, backend in app.backends().items():
        if recorded is not None:
            out.append(Backend(name, None, "assumed", ASSUMED))
            continue
        try:
            found = app.probe({name: backend})[name]
        except SpecctlError as exc:
            out.append(Backend(name, None, "broken", f"broken: {exc}"))
            continue
        out.append(Backend(name, found, "installed", found.describe()) if found else
                   Backend(name, None, "missing", f"not found ({backend.install_hint})"))
    return out


def verdicts(app: App, recorded: Path | None) -> list[Verdict]:
    return [verdict(app, name, recorded) for name in profiles.available(app.dirs)]


def verdict(app: App, name: str, recorded: Path | None) -> Verdict:
    """Whether the profile runs here (or on the recorded machine): its plan fits and its
    backend is installed or installed by `up`."""
    try:
        profile = app.load(name)
        if profile.cluster.nodes:
            machines = sum(n.count for n in profile.cluster.nodes)
            return Verdict(name, False, f"no: planned for its [cluster] of {machines} machines, "
                                        f"not one machine (`specctl plan -p {name}`)")
        resolved = app.resolve(profile, recorded)
    except SpecctlError as exc:
        return Verdict(name, False, f"no: {exc}")
    plan, backend = resolved.plan, resolved.backend
    what = f"{plan.backend}: {plan.describe_spec()}, {gib(plan.memory.device_bytes)}"
    if recorded is None and resolved.installed.assumed:
        if not provision.installable(backend):
            return Verdict(name, False, f"no: {plan.backend} is not installed here "
                                        f"({backend.install_hint})", plan.backend)
        what += f" (after `specctl backend install {plan.backend}`, which `up` runs)"
    return Verdict(name, True, f"yes: {what}", plan.backend, in_gib(plan.memory.device_bytes))
