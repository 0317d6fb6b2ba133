"""Provide what a plan needs before it can run: the chosen backend (when its adapter can install
it), the test models, the Hub models. Only what the chosen backend needs is provided."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from specctl.orchestrator.config.profiles import Profile
from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.contract.launch import Installed
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.errors import BackendError
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.models import testbed
from specctl.orchestrator.models.info import parse_ref
from specctl.orchestrator.models.resolve import Resolver


def install(backend: Adapter, dirs: Dirs, rebuild: bool = False) -> Installed:
    """Install (or reuse the cached install of) a backend, with a progress bar."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/"
                  "{task.total}"), TimeElapsedColumn(), transient=False,
                  console=Console(stderr=True)) as bar:
        task = bar.add_task(f"installing {backend.name}", total=None)

        def progress(msg: str, done: int, total: int) -> None:
            bar.update(task, description=msg, completed=done, total=total or None)

        return backend.install(dirs, rebuild, progress)


def installable(backend: Adapter) -> bool:
    return type(backend).install is not Adapter.install


def quantizer(backends: Mapping[str, Adapter]) -> Path | None:
    """A GGUF quantize tool from any backend's installation (the F16 test model needs one)."""
    return next((found for b in backends.values() if (found := b.tool("quantize"))), None)


def testbed_models(dirs: Dirs, keys: tuple[str, ...], backends: Mapping[str, Adapter],
                   say: Say) -> dict[str, Path]:
    tool = quantizer(backends)
    if tool is None and any(testbed.BY_KEY[k].derive_from for k in keys):
        hints = [b.install_hint for b in backends.values() if installable(b)]
        raise BackendError("the F16 test model is made with a GGUF quantize tool; install a "
                           f"backend that has one first ({'; '.join(hints) or 'none known'})")
    return testbed.ensure(dirs.models, tool, keys, progress=say)


@dataclass(frozen=True)
class Needs:
    """What a resolved plan needs here before it can run, decided with the plan: the backend
    installed, test models fetched, Hub models pulled. `up` provides it and resolves anew from
    what is then on disk; nothing amends the plan."""

    install: bool = False
    testbed: tuple[str, ...] = ()  # test model keys not on disk
    pulls: tuple[ModelInfo, ...] = ()  # the plan's models that are only on the Hub

    @property
    def empty(self) -> bool:
        return not (self.install or self.testbed or self.pulls)

    @classmethod
    def of(cls, plan: Plan, installed: Installed, profile: Profile, models: Path) -> Needs:
        return cls(installed.assumed,
                   tuple(k for k in testbed_keys(profile)
                         if not testbed.path_of(k, models).is_file()),
                   tuple(m for m in (plan.target, plan.draft)
                         if m is not None and m.path is None and m.remote is not None))


def pull(models: tuple[ModelInfo, ...], resolver: Resolver, say: Say) -> None:
    """Download the Hub models into the Hugging Face cache (with progress); planning again
    finds them there."""
    for info in models:
        resolver.fetch(info, say)


def testbed_keys(profile: Profile) -> tuple[str, ...]:
    return tuple(parse_ref(ref).name for ref in (profile.target, profile.draft)
                 if ref.startswith("testbed:"))


def missing_models(profile: Profile, dirs: Dirs, backends: Mapping[str, Adapter],
                   say: Say) -> None:
    """Fetch the profile's test models that are not on disk yet."""
    keys = testbed_keys(profile)
    missing = [k for k in keys if not testbed.path_of(k, dirs.models).is_file()]
    if missing:
        say(f"fetching test models: {', '.join(missing)}")
        testbed_models(dirs, keys, backends, say)
