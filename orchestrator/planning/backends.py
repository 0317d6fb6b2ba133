"""The backends specctl knows, how to build them from settings, and which one a plan uses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specctl.adapters.base import Backend, Installed
from specctl.adapters.llamacpp import LlamaCpp
from specctl.adapters.ollama import Ollama
from specctl.adapters.vllm import Vllm
from specctl.orchestrator import build
from specctl.orchestrator.config.paths import Dirs
from specctl.orchestrator.config.settings import Settings
from specctl.orchestrator.errors import BackendError
from specctl.orchestrator.machine.hardware import Hardware

# Preference when the profile names none: vLLM on CUDA, llama.cpp on Metal and CPU, and Ollama
# when it is what the machine has.
DEFAULT_ORDER = {"cuda": ("vllm", "llamacpp", "ollama"), "metal": ("llamacpp", "ollama"),
                 "cpu": ("llamacpp", "ollama")}
INSTALL_HINT = {b.name: b.install_hint for b in (LlamaCpp, Vllm, Ollama)}


def registry(dirs: Dirs, settings: Settings) -> dict[str, Backend]:
    return {
        "llamacpp": LlamaCpp(configured=settings.llama_server,
                             built=build.installed_server(dirs.backends)),
        "vllm": Vllm(python=settings.vllm_python),
        "ollama": Ollama(url=settings.ollama_url),
    }


def probe_all(backends: Mapping[str, Backend]) -> dict[str, Installed | None]:
    return {name: b.probe() for name, b in backends.items()}


@dataclass(frozen=True)
class Choice:
    name: str
    installed: Installed
    reasons: tuple[str, ...]


def choose(prefer: list[str], hw: Hardware, backends: Mapping[str, Backend],
           probed: Mapping[str, Installed | None] | None) -> Choice:
    """Pick a backend. `probed` is None when planning for a recorded (other) machine."""
    order = list(prefer) or list(DEFAULT_ORDER[hw.kind])
    why_order = ("the profile's preference " if prefer else f"the default for {hw.kind.upper()} "
                 "machines ") + f"({' > '.join(order)})"
    usable = [n for n in order if hw.kind in backends[n].runs_on or (probed and probed.get(n))]
    if not usable:
        raise BackendError(f"none of {', '.join(order)} runs on a {hw.kind} machine; change the "
                           "profile's backend list")
    if probed is None:
        name = usable[0]
        return Choice(name, backends[name].assumed(), (
            f"Backend {name}: first of {why_order} that runs on {hw.describe()}; planning for a "
            f"recorded machine, so argv uses the newest known {name} dialect.",))
    for name in usable:
        found = probed.get(name)
        if found is not None:
            skipped = usable[: usable.index(name)]
            note = f" ({', '.join(skipped)} not installed)" if skipped else ""
            return Choice(name, found, (
                f"Backend {name}: first installed of {why_order}{note}; "
                f"{found.describe()}.",))
    name = usable[0]
    return Choice(name, backends[name].assumed(), (
        f"Backend {name}: first of {why_order}; it is not installed here yet "
        f"({INSTALL_HINT[name]}), so argv uses its newest known dialect.",))
