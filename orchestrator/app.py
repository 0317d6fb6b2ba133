"""Composition root: builds the pieces from settings and dirs, once per command. No globals."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specctl.adapters.base import Backend, Installed, Launch
from specctl.orchestrator import backends, hardware, planner, profiles
from specctl.orchestrator.hardware import Hardware
from specctl.orchestrator.models import Resolver, hf_cache_dir
from specctl.orchestrator.paths import Dirs
from specctl.orchestrator.plan import Plan
from specctl.orchestrator.profiles import Profile
from specctl.orchestrator.settings import Settings


@dataclass(frozen=True)
class Resolved:
    profile: Profile
    plan: Plan
    installed: Installed
    backend: Backend

    def launch(self) -> Launch:
        return self.backend.launch(self.plan, self.installed)


@dataclass(frozen=True)
class App:
    dirs: Dirs
    settings: Settings

    @classmethod
    def from_env(cls) -> App:
        return cls(Dirs.from_env(), Settings())

    def resolver(self) -> Resolver:
        return Resolver(models_dir=self.dirs.models, hf_hub=hf_cache_dir())

    def backends(self) -> dict[str, Backend]:
        return backends.registry(self.dirs, self.settings)

    def hardware(self, recorded: Path | None = None) -> Hardware:
        return hardware.load(recorded) if recorded else hardware.detect()

    def resolve(self, profile_ref: str, recorded: Path | None = None,
                tuned: planner.TunedLookup | None = None) -> Resolved:
        profile = profiles.load(profile_ref, self.dirs)
        hw = self.hardware(recorded)
        registry = self.backends()
        probed = None if recorded else backends.probe_all(
            {n: b for n, b in registry.items() if not profile.backend or n in profile.backend})
        plan, installed = planner.resolve(profile, hw, registry, probed, self.resolver(),
                                          tuned or (lambda _p: None))
        return Resolved(profile, plan, installed, registry[plan.backend])
