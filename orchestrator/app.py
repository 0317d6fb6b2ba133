"""Composition root: builds the pieces from settings and dirs, once per command. No globals."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from specctl.adapters.base import Backend, Installed, Launch
from specctl.orchestrator.config import profiles
from specctl.orchestrator.config.paths import Dirs
from specctl.orchestrator.config.profiles import Profile
from specctl.orchestrator.config.settings import Settings
from specctl.orchestrator.errors import ModelError, SpecctlError
from specctl.orchestrator.machine import cluster, hardware
from specctl.orchestrator.machine.hardware import Hardware
from specctl.orchestrator.measure import tuned
from specctl.orchestrator.models import drafts, ollama_store
from specctl.orchestrator.models.resolve import ModelInfo, Resolver, hf_cache_dir
from specctl.orchestrator.planning import backends, planner
from specctl.orchestrator.planning.plan import Plan


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
    # what probing found, per backend, for this command's life (doctor plans every profile)
    _probed: dict[str, Installed | None] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_env(cls) -> App:
        return cls(Dirs.from_env(), Settings())

    def resolver(self) -> Resolver:
        return Resolver(models_dir=self.dirs.models, hf_hub=hf_cache_dir(),
                        ollama_models=ollama_store.models_dir(os.environ, Path.home()))

    def backends(self) -> dict[str, Backend]:
        return backends.registry(self.dirs, self.settings)

    def hardware(self, recorded: Path | None = None) -> Hardware:
        return hardware.load(recorded) if recorded else hardware.detect()

    def tuned_key(self, plan: Plan, installed: Installed) -> str:
        return tuned.key(plan, installed.version, self.dirs.state / "model-sha256.json")

    def tuned_result(self, plan: Plan, installed: Installed) -> planner.Tuned | None:
        """The saved `specctl tune` result for this machine, build and model files."""
        if not any(self.dirs.tuned.glob("*.json")):
            return None  # nothing tuned yet: do not hash the model files
        try:
            found = tuned.load(self.dirs.tuned, self.tuned_key(plan, installed))
        except SpecctlError:
            return None  # unreadable: ignored here, reported by `specctl tune --show`
        if found is None:
            return None
        return planner.Tuned(found.method, found.k, found.p_min, found.speedup, found.summary)

    def draft_candidates(self, target: ModelInfo, backend: Backend,
                         extra: tuple[Path, ...] = ()) -> list[drafts.Candidate]:
        """Every draft candidate for `target` on `backend`, judged and ranked."""
        home = Path.home()
        folders = [(self.dirs.models, "specctl"), *((f, "models-dir") for f in
                                                   [*self.settings.model_folders(), *extra]),
                   (home / ".lmstudio" / "models", "lm-studio"),
                   (home / ".cache" / "lm-studio" / "models", "lm-studio")]
        resolver = self.resolver()
        found = [*drafts.scan_local(folders, resolver.hf_hub, resolver.ollama_models),
                 *drafts.catalog_entries(target, backend.name)]
        return drafts.rank(target, found, backend.vocab_rule, backend.default_quant)

    def pick_draft(self, target: ModelInfo, backend: Backend) -> tuple[str, str]:
        ranked = self.draft_candidates(target, backend)
        best = drafts.best_on_disk(ranked)
        if best is not None:
            return best.model, (f"Draft \"auto\": {best.name} ({best.source}, {best.path}) is "
                                f"the best compatible draft on disk: {best.reason}.")
        get = drafts.best_to_download(ranked)
        hint = (f"the best known draft for it is {get.model} ({get.reason}); download it, or "
                if get else "")
        raise ModelError(f"no compatible draft for {target.name} on this machine; {hint}name "
                         "one in the profile (`specctl drafts --target ...` lists candidates)")

    def probe(self, registry: dict[str, Backend]) -> dict[str, Installed | None]:
        """Installed backends, probed once per command (each probe runs a process or HTTP)."""
        missing = {n: b for n, b in registry.items() if n not in self._probed}
        self._probed.update(backends.probe_all(missing))
        return {n: self._probed[n] for n in registry}

    @staticmethod
    def rpc_workers(profile: Profile, probed: dict[str, Installed | None] | None
                    ) -> list[cluster.Worker]:
        """The RPC workers' memory: as declared in the profile, else asked through llama.cpp."""
        c = profile.cluster
        if not c.rpc_workers:
            return []
        if len(c.worker_memory_gb) == len(c.rpc_workers):
            return [cluster.Worker(a, m, m) for a, m in zip(c.rpc_workers, c.worker_memory_gb,
                                                             strict=True)]
        found = (probed or {}).get("llamacpp")
        return cluster.ask_workers(found.path, c.rpc_workers) if found and found.path else []

    def resolve(self, profile_ref: str, recorded: Path | None = None,
                use_tuned: bool = True) -> Resolved:
        profile = profiles.load(profile_ref, self.dirs)
        nodes = cluster.cluster_hardware(profile.cluster, Path.cwd())
        hw = nodes or self.hardware(recorded)
        elsewhere = recorded is not None or nodes is not None
        registry = self.backends()
        probed = None if elsewhere else self.probe(
            {n: b for n, b in registry.items() if not profile.backend or n in profile.backend})
        lookup = self.tuned_result if use_tuned and not elsewhere else (lambda _p, _i: None)
        plan, installed = planner.resolve(profile, hw, registry, probed, self.resolver(), lookup,
                                          self.pick_draft, self.rpc_workers(profile, probed))
        return Resolved(profile, plan, installed, registry[plan.backend])
