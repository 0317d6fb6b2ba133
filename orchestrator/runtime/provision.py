"""Provide what a profile needs before it can run: the llama.cpp build and the test models."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from specctl.orchestrator import build
from specctl.orchestrator.config.paths import Dirs
from specctl.orchestrator.config.profiles import Profile
from specctl.orchestrator.machine import hardware
from specctl.orchestrator.models import testbed
from specctl.orchestrator.models.resolve import parse_ref

Say = Callable[[str], None]


def install_llamacpp(dirs: Dirs, rebuild: bool = False) -> Path:
    """Build llama.cpp into the cache (or reuse the cached build), with a progress bar."""
    tc = build.toolchain(hardware.detect_cpu().flags, bool(hardware.detect_nvidia()))
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/"
                  "{task.total}"), TimeElapsedColumn(), transient=False) as bar:
        task = bar.add_task(f"llama.cpp ({tc.accel})", total=None)

        def progress(msg: str, done: int, total: int) -> None:
            bar.update(task, description=msg, completed=done, total=total or None)

        return build.install(dirs.backends, tc, progress, rebuild=rebuild)


def quantize_binary(dirs: Dirs) -> Path | None:
    """llama-quantize from our build, else from PATH."""
    server = build.installed_server(dirs.backends)
    if server is not None and server.with_name("llama-quantize").is_file():
        return server.with_name("llama-quantize")
    found = shutil.which("llama-quantize")
    return Path(found) if found else None


def testbed_models(dirs: Dirs, keys: tuple[str, ...], say: Say) -> dict[str, Path]:
    return testbed.ensure(dirs.models, quantize_binary(dirs), keys, progress=say)


def testbed_keys(profile: Profile) -> tuple[str, ...]:
    keys = []
    for ref in (profile.target, profile.draft):
        if ref.startswith("testbed:"):
            keys.append(parse_ref(ref).name)
    return tuple(keys)


def for_profile(profile: Profile, dirs: Dirs, need_llamacpp: bool, say: Say) -> None:
    """Build llama.cpp if the plan needs it and none is there; fetch missing test models."""
    if need_llamacpp and build.installed_server(dirs.backends) is None:
        say("llama-server not found: building it from source (about 6-13 minutes on 2 cores)")
        install_llamacpp(dirs)
    keys = testbed_keys(profile)
    missing = [k for k in keys if not testbed.path_of(k, dirs.models).is_file()]
    if missing:
        say(f"fetching test models: {', '.join(missing)}")
        testbed_models(dirs, keys, say)
