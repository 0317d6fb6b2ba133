"""Composition root: builds the pieces from settings and dirs, once per command. No globals."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specctl.adapters.base import Backend, Installed, Launch
from specctl.orchestrator import backends, hardware, planner, profiles, tuned
from specctl.orchestrator.errors import SpecctlError
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

    def tuned_key(self, plan: Plan, installed: Installed) -> str:
        return tuned.key(plan, installed.version, self.dirs.state / "model-sha256.json")

    def tuned_result(self, plan: Plan, installed: Installed) -> planner.Tuned | None:
        """The saved `specctl tune` result for this machine, build and model files."""
        try:
            found = tuned.load(self.dirs.tuned, self.tuned_key(plan, installed))
        except SpecctlError:
            return None  # unreadable: ignored here, reported by `specctl tune --show`
        if found is None:
            return None
        return planner.Tuned(found.method, found.k, found.p_min, found.speedup, found.summary)

    def resolve(self, profile_ref: str, recorded: Path | None = None,
                use_tuned: bool = True) -> Resolved:
        profile = profiles.load(profile_ref, self.dirs)
        hw = self.hardware(recorded)
        registry = self.backends()
        probed = None if recorded else backends.probe_all(
            {n: b for n, b in registry.items() if not profile.backend or n in profile.backend})
        lookup = self.tuned_result if use_tuned and recorded is None else (lambda _p, _i: None)
        plan, installed = planner.resolve(profile, hw, registry, probed, self.resolver(), lookup)
        return Resolved(profile, plan, installed, registry[plan.backend])
