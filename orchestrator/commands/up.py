"""`up`: resolve the plan once and check it (preflight), say what must be built or fetched and
ask, provide it (the backend, the test models, the Hub models), resolve anew from what is then
here when anything was provided, and start the server (detached, or supervised in this process).

The plan is never amended: what `up` must provide is on the resolved result (`Resolved.needs`),
and after providing it the plan is resolved again from the new facts (the installed build's
dialect, the files now on disk)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specctl.orchestrator import runs
from specctl.orchestrator.app import App, Resolved
from specctl.orchestrator.config.adhoc import Flags
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.runtime import handoff, preflight, provision
from specctl.orchestrator.runtime.state import RunState

Ask = Callable[[], bool]  # go ahead with the work just said? (the CLI asks in a terminal)


@dataclass(frozen=True)
class UpRequest:
    ref: str
    flags: Flags
    foreground: bool = False
    provide: bool = True  # install the backend, fetch test models
    download: bool = True  # pull models that are only on the Hub


@dataclass(frozen=True)
class Declined:
    """The user said no before any work: nothing was built, fetched or started."""

    work: tuple[str, ...]


@dataclass(frozen=True)
class Detached:
    """A detached supervisor keeps the server up; it is healthy. `plan` is what it serves (its
    reasons and notices say where the setting came from and what was changed of what was
    asked); `model` the name clients send, where the server needs one."""

    run: RunState
    plan: Plan
    model: str | None = None


@dataclass(frozen=True)
class Exited:
    """The supervisor ran in this process (--foreground, or the detached child) and ended."""

    code: int


Outcome = Declined | Detached | Exited


def up(app: App, request: UpRequest, ask: Ask, say: Say) -> Outcome:
    """Plan, check, ask, provide, start: in that order, the plan resolved once."""
    resolved = prepare(app, request, ask, say)
    if isinstance(resolved, Declined):
        return resolved
    ready = runs.ready_of(app, resolved, request.ref, request.flags)
    if request.foreground:
        return Exited(runs.serve_foreground(app, ready, say))
    return Detached(runs.start_detached(app, ready, say), resolved.plan,
                    resolved.launch().model)


def supervise(app: App, path: Path, say: Say) -> Exited:
    """The detached supervisor: run the launch the parent resolved (no planning here)."""
    return Exited(runs.serve_foreground(app, handoff.take(path, app.dirs.runs), say,
                                        checked=True))


def prepare(app: App, request: UpRequest, ask: Ask, say: Say) -> Resolved | Declined:
    """The plan, checked before any work (the engine arguments through the pure launch, then
    preflight); what it needs said and, once agreed, provided; the plan of what is then here."""
    profile = app.load(request.ref, request.flags)
    resolved = app.resolve(profile)
    resolved.launch()  # pure: the engine arguments are checked now, not after a build (built
    # once: the same Launch is handed over)
    resolver = app.resolver()
    needs = resolved.needs
    todo = preflight.check(resolved.plan, needs, resolved.backend, app.hub(), request.provide,
                           request.download, lambda r: resolver.how_to_get(resolver.ref(r)),
                           os.environ)
    work = tuple(todo.lines())
    for line in work:
        say(f"up will {line}")
    if work and not ask():
        return Declined(work)
    if needs.empty:
        return resolved
    if needs.install:
        provision.install(resolved.backend, app.dirs)
        app.reprobe(resolved.backend.name)
    if needs.testbed:
        provision.missing_models(profile, app.dirs, app.backends(), say)
    provision.pull(needs.pulls, resolver, say)
    return app.resolve(profile)  # the installed build's dialect, the files now on disk
