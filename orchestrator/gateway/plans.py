"""What the gateway serves for each model, resolved once: the model's plan (its saved tune
included) and its route, from the gateway's start (`run.gather` resolved it there: one
resolution, `App.routable`, gives the plan served, the plan as written and the saved tune)
until the saved tune changes (`Plans.refresh`: one resolution again). A request never resolves
anything.

Planning blocks and goes through the gateway's one App: one resolution at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from specctl.orchestrator.app import App, Resolved, Routable
from specctl.orchestrator.config.profiles import Profile
from specctl.orchestrator.errors import ServerError, SpecctlError, StateError
from specctl.orchestrator.gateway.engines import Slot
from specctl.orchestrator.measure.route.choose import Route, choose
from specctl.orchestrator.measure.route.classify import Facts
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
    """A model as the gateway serves it: its plan and its routing."""

    resolved: Resolved
    routing: Routing

    def slot_for(self, facts: Facts | None, demoted: bool) -> Slot:
        """The slot of a request (its kind, prompt characters and max_tokens): the model's one
        server, or the route's member for it (measure/route/choose.choose: its kind's, or where it
        is predicted faster by length; no draft where live traffic showed its kind slower than
        its baseline)."""
        model, route = self.resolved.plan.profile, self.routing.route
        if route is None or facts is None or self.routing.written is None:
            return Slot(model)
        return Slot(model, "off" if demoted else choose(route, facts).setting)

    def plan_for(self, slot: Slot) -> Resolved | None:
        """What the slot serves now; None when it is no longer served (a route's setting that
        left the route, the model's one server once the model is routed)."""
        route, written = self.routing.route, self.routing.written
        if slot.setting is None:
            return self.resolved if route is None else None
        if route is None or written is None:
            return None
        if slot.setting == "off":
            return replace(written, plan=route.off)
        member = next((m for m in route.members if m.setting == slot.setting), None)
        return replace(written, plan=member.plan) if member is not None else None


class Plans:
    """Each model's `Served`, resolved at the start and again only when the saved tune
    changes."""

    def __init__(self, app: App, profiles: Mapping[str, Profile],
                 resolved: Mapping[str, Routable], budget: int | None) -> None:
        self.app, self.profiles, self.budget = app, dict(profiles), budget
        self._lock = threading.Lock()  # App is one command's: one resolution at a time
        self.served = {name: Served(resolved[name].resolved,
                                    self._routing(name, resolved[name]))
                       for name in self.profiles}

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
        served = self.served[model] = Served(found.resolved, self._routing(model, found))
        return served

    def _routing(self, model: str, found: Routable) -> Routing:
        """The model's route as its saved tune says (measure/route/choose.py), from the plan as
        written; both came with the model's one resolution."""
        profile = self.profiles[model]
        if not profile.gateway.route:
            return Routing(None, "not routed: [gateway] route = false")
        if isinstance(found.tune, StateError):
            return Routing(None, f"not routed: {found.tune}")
        if found.tune is None or found.written is None:
            return Routing(None, "not routed: not tuned yet on this machine and build (run "
                           "`specctl tune`)")
        try:
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
