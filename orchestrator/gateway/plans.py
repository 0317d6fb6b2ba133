"""What the gateway serves for each model, resolved once: the model's plan (its saved tune
included) and its route, from the gateway's start (`run.gather` resolved it there: one
resolution, `App.routable`, gives the plan served, the plan as written and the saved tune)
until the saved tune changes (`Plans.refresh`: one resolution again). A request never resolves
anything.

Planning blocks and goes through the gateway's one App: one resolution at a time.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from specctl.orchestrator.app import App, Resolved, Routable
from specctl.orchestrator.config.profiles import Profile
from specctl.orchestrator.errors import ServerError, SpecctlError, StateError
from specctl.orchestrator.files import write_atomic
from specctl.orchestrator.gateway.engines import Slot
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.measure.route import remembered
from specctl.orchestrator.measure.route.choose import Route, choose
from specctl.orchestrator.measure.route.classify import Facts
from specctl.orchestrator.measure.route.learned import Choice, Learned
from specctl.orchestrator.sizes import in_gib


def tuned_signature(folder: Path) -> tuple[tuple[str, int, int], ...]:
    """The saved tuning results as (name, mtime, size): a change means `tune` saved."""
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        try:
            st = path.stat()
        except OSError:
            continue
        found.append((path.name, st.st_mtime_ns, st.st_size))
    return tuple(found)


def servable(resolved: Resolved) -> Resolved:
    """`resolved`, when it can run here as planned: the gateway provides nothing itself."""
    if not resolved.needs.empty:
        name = resolved.plan.profile
        raise ServerError(f"{name} needs what `up` provides first (the backend built, models "
                          f"fetched): run `specctl up -p {name}` once, then `specctl down "
                          f"{name}`")
    return resolved


@dataclass(frozen=True)
class Routing:
    """A model's speculation per request: its route (None: one server serves every request)
    and why, and the plan as written that the route's servers derive from."""

    route: Route | None
    why: str
    written: Resolved | None = None


@dataclass(frozen=True)
class Served:
    """A model as the gateway serves it: its plan, its routing and, where it is routed, what
    the requests it served tell (measure/route/learned.Learned: it picks each request's
    member)."""

    resolved: Resolved
    routing: Routing
    learned: Learned | None = None

    def slot_for(self, facts: Facts | None, load: int = 1, say: Say | None = None
                 ) -> tuple[Slot, Choice | None]:
        """The slot of a request (its kind, prompt characters and max_tokens) that starts
        beside `load` - 1 others of the model: the model's one server, or the route's member
        the served requests (and tune's figures before them) say is fastest for it."""
        model, route = self.resolved.plan.profile, self.routing.route
        if route is None or facts is None or self.routing.written is None or \
                self.learned is None:
            return Slot(model), None
        choice = self.learned.choose(facts, load, say)
        return Slot(model, choice.setting), choice

    def plan_for(self, slot: Slot) -> Resolved | None:
        """What the slot serves now; None when it is no longer served (a route's setting that
        left the route, the model's one server once the model is routed)."""
        route, written = self.routing.route, self.routing.written
        if slot.setting is None:
            return self.resolved if route is None else None
        if route is None or written is None:
            return None
        member = next((m for m in route.members if m.setting == slot.setting), None)
        return replace(written, plan=member.plan) if member is not None else None


class Plans:
    """Each model's `Served`, resolved at the start and again only when the saved tune
    changes."""

    def __init__(self, app: App, profiles: Mapping[str, Profile],
                 resolved: Mapping[str, Routable], budget: int | None,
                 say: Say | None = None) -> None:
        self.app, self.profiles, self.budget = app, dict(profiles), budget
        self._lock = threading.Lock()  # App is one command's: one resolution at a time
        self.served = {name: _served(resolved[name].resolved,
                                     self._routing(name, resolved[name]), None)
                       for name in self.profiles}
        self._saved: dict[str, int] = {}
        self._paths: dict[str, Path] = {}  # each model's figures file (its key: read once)
        for name, served in self.served.items():
            if served.learned is not None:
                self._paths[name] = self.figures_path(name)
                said = remembered.load(self._paths[name], served.learned)
                self._saved[name] = served.learned.added
                if said and say is not None:
                    say(f"{name}: {said}")

    def figures_path(self, model: str) -> Path:
        """Where the model's served figures are kept: per model, engine build and files."""
        resolved = self.served[model].resolved
        key = self.app.tuned_key(resolved.plan, resolved.installed)
        return remembered.path_for(self.app.dirs.state / "learned", model, key)

    def changed(self) -> list[tuple[Path, str]]:
        """Each model's figures where served requests added to them, as the files hold them:
        taken where they change (the gateway's loop), written off it (`remember`)."""
        out = []
        for name, served in self.served.items():
            learned = served.learned
            if learned is not None and learned.added != self._saved.get(name) and \
                    name in self._paths:
                self._saved[name] = learned.added
                out.append((self._paths[name], remembered.dump(name, learned)))
        return out

    @staticmethod
    def remember(files: list[tuple[Path, str]]) -> None:
        """Blocking: the figures `changed` gave, written (a full disk: they go on in memory)."""
        for path, text in files:
            with contextlib.suppress(SpecctlError):
                write_atomic(path, text)

    def refresh(self, model: str) -> Served:
        """Blocking: the model planned again (its saved tune changed); kept for the requests
        that follow. A model that no longer plans keeps what it had (said in `why`)."""
        with self._lock:
            try:
                found = self.app.routable(self.profiles[model])
                servable(found.resolved)
            except SpecctlError as exc:
                before = self.served[model]
                return replace(before, routing=replace(before.routing, why=f"{before.routing.why}"
                                                       f" (the saved tune is not served: {exc})"))
        before = self.served[model]
        served = self.served[model] = _served(found.resolved, self._routing(model, found),
                                              before.learned)
        if served.learned is not None:
            self._paths[model] = self.figures_path(model)  # (a thread: it may read a file)
        return served

    def _routing(self, model: str, found: Routable) -> Routing:
        """The model's route as its saved tune says (measure/route/choose.py), from the plan as
        written; both came with the model's one resolution."""
        profile = self.profiles[model]
        if not profile.gateway.route:
            return Routing(None, "not routed: [gateway] route = false")
        if isinstance(found.tune, StateError):
            return Routing(None, f"not routed: {found.tune}")
        try:
            if found.tune is None or found.written is None:  # not tuned here: learned alone
                written = servable(found.resolved)
                route, why = self.app.plain_route(written)
            else:
                written = servable(found.written)
                route, why = self.app.route(written, found.tune)
        except SpecctlError as exc:
            return Routing(None, f"not routed: {exc}")
        if route is None:
            return Routing(None, f"not routed: {why}")
        if self.budget is not None and route.need > self.budget:
            return Routing(None, f"routing refused: {route.memory()}, over the gateway's "
                           f"--memory of {in_gib(self.budget):.2f} GiB: the best single "
                           "setting serves")
        return Routing(route, why, written)


def _served(resolved: Resolved, routing: Routing, before: Learned | None) -> Served:
    """A model's Served: where it is routed, a Learned over its route's members and tune's
    figures, keeping what the requests served before told (the same engine build and models:
    a retune changes the members, not what was measured)."""
    route = routing.route
    if route is None:
        return Served(resolved, routing)
    learned = Learned(tuple(m.setting for m in route.members), route.priors, route.main,
                      prior=(lambda facts: choose(route, facts).setting) if route.priors
                      else None, explore=resolved.profile.gateway.explore)
    if before is not None:
        learned.keep_from(before)
    return Served(resolved, routing, learned)
