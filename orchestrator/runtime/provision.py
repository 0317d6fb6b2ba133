"""Provide what a plan needs before it can run: the chosen backend (when its adapter can install
it) and the test models. Only what the chosen backend needs is provided."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from specctl.adapters.base import Adapter
from specctl.orchestrator.config.paths import Dirs
from specctl.orchestrator.config.profiles import Profile
from specctl.orchestrator.contract.launch import Installed
from specctl.orchestrator.errors import BackendError, ModelError
from specctl.orchestrator.humanize import size
from specctl.orchestrator.models import testbed
from specctl.orchestrator.models.info import ModelInfo, parse_ref
from specctl.orchestrator.models.resolve import Resolver
from specctl.orchestrator.planning.plan import Plan

Say = Callable[[str], None]


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


def remote_models(plan: Plan, resolver: Resolver, allow: bool, say: Say) -> Plan:
    """The plan with its Hub models on disk: pulled now (with progress) unless `allow` is off,
    which refuses in one line naming what is missing and how to get it."""
    missing = [m for m in (plan.target, plan.draft) if m is not None and m.path is None
               and m.remote is not None]
    if missing and not allow:
        what = ", ".join(f"{m.ref} ({size(m.size_bytes)})" for m in missing)
        how = resolver.how_to_get(resolver.ref(missing[0].ref))
        raise ModelError(f"{what} not on disk and downloads are off (--no-download or "
                         f"SPECCTL_NO_DOWNLOAD); {how}")
    changes: dict[str, ModelInfo] = {}
    for role in ("target", "draft"):
        info = getattr(plan, role)
        if info in missing:
            changes[role] = resolver.fetch(info, say)
    return plan.but(**changes) if changes else plan


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
