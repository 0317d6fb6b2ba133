"""Composition root: builds the pieces from settings and dirs, once per command. No globals.

An App remembers, for the life of one command, the machine it detected and what probing found per
backend, so a command probes each backend at most once.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specctl.orchestrator.config import adhoc, profiles
from specctl.orchestrator.config.adhoc import Flags
from specctl.orchestrator.config.profiles import Profile
from specctl.orchestrator.config.settings import Settings
from specctl.orchestrator.contract import registry
from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.contract.hardware import Hardware
from specctl.orchestrator.contract.launch import Installed, Launch
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.errors import BadInputError, ProfileError, SpecctlError, StateError
from specctl.orchestrator.files import check_name, inside
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.machine import cluster, hardware
from specctl.orchestrator.models import digest
from specctl.orchestrator.models.headers import Headers
from specctl.orchestrator.models.hub import Hub
from specctl.orchestrator.models.resolve import Resolver, hf_cache_dir
from specctl.orchestrator.planning import backends, drafts, planner, search
from specctl.orchestrator.runtime.provision import Needs

if TYPE_CHECKING:  # measure/ pulls numpy and HTTP clients in: imported where used (a fast plan)
    from specctl.orchestrator.measure.results import certificates, tuned
    from specctl.orchestrator.measure.route import choose as route_mod


@dataclass(frozen=True)
class Resolved:
    """A plan resolved once, the build it is for, and what must be provided here before it can
    run (`up` provides it, then resolves anew; nothing amends the plan)."""

    profile: Profile
    plan: Plan
    installed: Installed
    backend: Adapter
    needs: Needs = field(default_factory=Needs)

    def launch(self) -> Launch:
        """The plan's launch, built once (the adapter's `launch` is pure: the same plan gives
        the same argv, so `up` checks and hands over one and the same)."""
        return self._launch

    @cached_property
    def _launch(self) -> Launch:
        return self.backend.launch(self.plan, self.installed)


@dataclass(frozen=True)
class Routable:
    """A model as the gateway resolves it, once: the plan it serves, and what its route is made
    of, from the same built plan: the plan as written and the saved tune (None: no saved tune;
    a StateError: one that failed validation and was set aside)."""

    resolved: Resolved
    written: Resolved | None = None
    tune: tuned.Result | StateError | None = None


@dataclass(frozen=True)
class App:
    dirs: Dirs
    settings: Settings
    # where a slow step of a lookup says what it does (reading a model once for its SHA-256)
    say: Say | None = field(default=None, compare=False, repr=False)
    # what probing found, per backend, for this command's life (doctor plans every profile)
    _probed: dict[str, Installed | None] = field(default_factory=dict, compare=False, repr=False)
    _cache: dict[str, object] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_env(cls, say: Say | None = None) -> App:
        return cls(Dirs.from_env(), Settings.from_env(), say)

    def resolver(self) -> Resolver:
        found = self._cache.get("resolver")
        if isinstance(found, Resolver):
            return found
        stores = [s for b in self.backends().values() if (s := b.store()) is not None]
        resolver = Resolver(models_dir=self.dirs.models, hf_hub=hf_cache_dir(),
                            stores={s.scheme: s for s in stores}, hub=self.hub(),
                            headers=Headers(self.dirs.cache / "gguf-headers"))
        self._cache["resolver"] = resolver
        return resolver

    def hub(self) -> Hub:
        """Hugging Face Hub metadata, cached under the cache dir (HF_ENDPOINT, HF_TOKEN and
        HF_HUB_OFFLINE as huggingface_hub reads them)."""
        found = self._cache.get("hub")
        if not isinstance(found, Hub):
            offline = os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")
            found = self._cache["hub"] = Hub(self.dirs.cache / "hub", offline=offline,
                                             endpoint=os.environ.get("HF_ENDPOINT") or None,
                                             downloads=hf_cache_dir())  # where plans look
        return found

    def backends(self) -> dict[str, Adapter]:
        found = self._cache.get("registry")
        if not isinstance(found, dict):
            found = self._cache["registry"] = registry.registry(self.dirs)
        return found

    def hardware(self, recorded: Path | None = None) -> Hardware:
        """This machine, or a recorded one, as a server started here sees it: the GPUs
        CUDA_VISIBLE_DEVICES leaves visible."""
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if recorded:
            return hardware.visible(hardware.load(recorded), visible)
        found = self._cache.get("hardware")
        if not isinstance(found, Hardware):
            found = self._cache["hardware"] = hardware.detect()
        return hardware.visible(found, visible)

    def load(self, ref: str, flags: Flags | None = None) -> Profile:
        """A profile by name or file, or one made for a model reference (`hf:ORG/REPO`, a
        .gguf file, `ollama:NAME`); the command line's flags over it."""
        flags = flags or Flags()
        if adhoc.is_model_ref(ref):
            return profiles.parse(adhoc.toml_for(ref, flags), name=adhoc.name_for(ref),
                                  source=ref, cli=flags.data())
        if adhoc.bare_repo(ref):
            raise ProfileError(f"'{ref}' is neither a profile nor a file; did you mean "
                               f"hf:{ref} (a model on the Hugging Face Hub)?")
        return profiles.load(ref, self.dirs, flags.data())

    def check_run_name(self, name: str) -> None:
        """`down NAME` of a name specctl never ran nor has a profile of (a typo) is bad input:
        one line with the closest names (exit 2), rather than "was not running"."""
        from specctl.orchestrator.runtime import state

        runs = self.dirs.runs
        check_name(name, "profile name")
        left = (state.state_path(runs, name), state.lock_path(runs, name),
                inside(self.dirs.logs, name, ".log", "profile name"))
        known = {*state.all_profiles(runs), *profiles.available(self.dirs)}
        if name in known or any(path.exists() for path in left):
            return
        close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise BadInputError(f"nothing named '{name}' was run here and no profile has that "
                            f"name; {hint}`specctl status` lists what runs")

    def tuned_key(self, plan: Plan, installed: Installed) -> str:
        from specctl.orchestrator.measure.results import tuned

        return tuned.key(plan, installed.version, digest.cache_of(self.dirs.state), self.say)

    def tune_for(self, built: planner.Built) -> planner.Saved:
        """The saved `specctl tune` result for a built plan's machine, build and model files,
        looked up only where one applies; one that fails validation is moved aside, and the
        error is the planner's to say."""
        if not built.tunable:
            return None
        try:
            return self.saved_tune(built.plan, built.installed)
        except StateError as exc:
            return exc

    def saved_tune(self, plan: Plan, installed: Installed) -> tuned.Result | None:
        """The saved `specctl tune` result for this plan's machine, build and model files."""
        if not any(self.dirs.tuned.glob("*.json")):
            return None  # nothing tuned yet: do not hash the model files
        from specctl.orchestrator.measure.results import tuned

        return tuned.load(self.dirs.tuned, self.tuned_key(plan, installed))

    def route(self, written: Resolved, found: tuned.Result
              ) -> tuple[route_mod.Route | None, str]:
        """Speculation per request (measure/route/choose.py) for the plan as written
        (`Routable.written`), from its saved tune's per-category winners; None and why when
        there is none."""
        if not written.needs.empty:
            return None, "what `up` provides is missing here"
        from specctl.orchestrator.measure.route import choose as route_mod

        return route_mod.route_for(written.plan, found, written.backend)

    def plain_route(self, written: Resolved) -> tuple[route_mod.Route | None, str]:
        """A model no tune measured here: its own setting and no draft, learned between from
        what is served (measure/route/learned.py); None and why where it does not speculate."""
        if not written.needs.empty:
            return None, "what `up` provides is missing here"
        if not written.plan.speculative:
            return None, "the profile has speculation off"
        if written.profile.k != "auto":
            return None, f"the profile sets k = {written.profile.k}: that setting serves"
        from specctl.orchestrator.measure.route import choose as route_mod

        route = route_mod.plain(written.plan, written.backend)
        if route.need > route.budget:
            return None, f"routing refused: {route.memory()}: one setting serves"
        return route, (f"not tuned yet here: {route.describe()} (its choice per kind is "
                       f"learned from the requests served); {route.memory()}")

    def certificate_of_run(self, plan: Mapping[str, Any]) -> certificates.Found | None:
        """The losslessness certificate state of a run's recorded plan (`status`)."""
        from specctl.orchestrator.measure.results import certificates

        return certificates.for_run(self.dirs.state, plan)

    def model_folders(self, extra: tuple[Path, ...] = ()) -> list[tuple[Path, str]]:
        """Folders of the user's models beyond specctl's cache: SPECCTL_MODELS_DIRS (and
        `extra`), LM Studio's."""
        home = Path.home()
        return [*((f, "models-dir") for f in [*self.settings.model_folders(), *extra]),
                (home / ".lmstudio" / "models", "lm-studio"),
                (home / ".cache" / "lm-studio" / "models", "lm-studio")]

    def draft_sources(self, extra: tuple[Path, ...] = ()) -> search.Sources:
        """Where draft candidates are looked for: specctl's models, the user's folders (and
        `extra`), the resolver's caches and stores, the Hub."""
        folders = ((self.dirs.models, "specctl"), *self.model_folders(extra))
        return search.Sources(folders, self.resolver(), self.hub())

    def draft_candidates(self, target: ModelInfo, backend: Adapter,
                         extra: tuple[Path, ...] = (), methods: frozenset[str] = frozenset(),
                         room: int | None = None) -> list[drafts.Candidate]:
        """Every draft candidate for `target` on `backend` (on disk, on the Hub, in the catalog,
        and the draftless `methods`), judged by the backend's rule and ranked."""
        return search.candidates(search.Search(target, backend, methods, room),
                                 self.draft_sources(extra))

    def probe(self, registry: dict[str, Adapter]) -> dict[str, Installed | None]:
        """Installed backends, probed once per command (each probe runs a process or HTTP)."""
        missing = {n: b for n, b in registry.items() if n not in self._probed}
        self._probed.update(backends.probe_all(missing))
        return {n: self._probed[n] for n in registry}

    def reprobe(self, name: str) -> Installed | None:
        """Probe one backend again (after installing it)."""
        self._probed.pop(name, None)
        return self.probe({name: self.backends()[name]})[name]

    def facts(self, profile: Profile, recorded: Path | None = None) -> planner.Facts:
        """The machine, the probes the profile's backends need, the measured fastest backend,
        the resolver."""
        nodes = cluster.cluster_hardware(profile.cluster, Path.cwd())
        hw = nodes or self.hardware(recorded)
        registry, resolver = self.backends(), self.resolver()
        if recorded is not None or nodes is not None:  # other machines: nothing here is probed
            return planner.Facts(hw, registry, None, resolver)
        probed = self.probe({n: b for n, b in registry.items()
                             if not profile.backend or n in profile.backend})
        return planner.Facts(hw, registry, probed, resolver, self.fastest(profile, hw, probed))

    def resolve(self, profile: Profile | str, recorded: Path | None = None,
                use_tuned: bool = True) -> Resolved:
        """The plan, resolved once from the facts gathered once: the planner's stages, given
        what each asks for as data (the draft candidates, the saved tune); with what it needs
        here."""
        profile, facts, built = self._built(profile, recorded)
        here = use_tuned and facts.probed is not None  # a tune is of this machine's build
        return self._finish(profile, facts, built, self.tune_for(built) if here else None)

    def routable(self, profile: Profile | str) -> Routable:
        """The gateway's resolution, once: the plan served (its saved tune applied where
        k = "auto") and, from the same built plan, the plan as written and the saved tune a
        route is made of (looked up whatever k is: the route follows the tune)."""
        profile, facts, built = self._built(profile, None)
        if facts.probed is None:
            return Routable(self._finish(profile, facts, built, None))
        try:
            found: tuned.Result | StateError | None = self.saved_tune(built.plan,
                                                                      built.installed)
        except StateError as exc:
            found = exc
        served = self._finish(profile, facts, built, found if built.tunable else None)
        if found is None:
            return Routable(served)
        return Routable(served, self._finish(profile, facts, built, None), found)

    def _built(self, profile: Profile | str, recorded: Path | None
               ) -> tuple[Profile, planner.Facts, planner.Built]:
        """The planner's first stages: the backend and the choice, then the plan built with
        the draft candidates gathered for it."""
        if isinstance(profile, str):
            profile = self.load(profile)
        facts = self.facts(profile, recorded)
        chosen = planner.choose(profile, facts)
        wanted = chosen.draft_search
        ranked = search.candidates(wanted, self.draft_sources()) if wanted else None
        return profile, facts, planner.build(chosen, ranked)

    def _finish(self, profile: Profile, facts: planner.Facts, built: planner.Built,
                saved: planner.Saved) -> Resolved:
        plan = planner.finish(built, saved)
        needs = (Needs.of(plan, built.installed, profile, self.dirs.models)
                 if facts.probed is not None else Needs())  # for other machines: nothing
        return Resolved(profile, plan, built.installed, facts.backends[plan.backend], needs)

    def fastest(self, profile: Profile, hw: Hardware,
                probed: Mapping[str, Installed | None] | None) -> tuple[str, str] | None:
        """The backend `bench --backends` measured fastest for this profile on this machine."""
        if probed is None or len(profile.backend) == 1:
            return None
        from specctl.orchestrator.measure.results import winners

        try:
            found = winners.load(self.dirs.state / "backends", profile.name, hw.fingerprint())
        except SpecctlError:
            return None  # unreadable: set aside and reported when `bench --backends` reads it
        return (found.best.backend, found.why()) if found else None
