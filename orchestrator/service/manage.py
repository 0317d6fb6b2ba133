"""`specctl service install|uninstall|status`: write (or print) the unit, activate when asked."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from specctl.orchestrator.config.paths import Dirs
from specctl.orchestrator.errors import SpecctlError
from specctl.orchestrator.files import write_atomic
from specctl.orchestrator.service import units

PASSED_ENV = ("SPECCTL_LLAMA_SERVER", "SPECCTL_VLLM_PYTHON", "SPECCTL_MODELS_DIRS", "HF_HOME",
              "HF_HUB_CACHE", "OLLAMA_MODELS")


def default_manager() -> str:
    return "launchd" if platform.system() == "Darwin" else "systemd"


def spec_for(profile: str, profile_ref: str, dirs: Dirs, system: bool,
             env: dict[str, str]) -> units.ServiceSpec:
    ref = str(Path(profile_ref).resolve()) if profile_ref.endswith(".toml") else profile_ref
    service_env = {"SPECCTL_STATE_DIR": str(dirs.state), "SPECCTL_CONFIG_DIR": str(dirs.config),
                   "SPECCTL_CACHE_DIR": str(dirs.cache), "PYTHONUNBUFFERED": "1",
                   **{k: env[k] for k in PASSED_ENV if env.get(k)}}
    return units.ServiceSpec(
        profile=profile, argv=units.service_argv((sys.executable, "-m", "specctl"), ref),
        env=service_env, writable=(dirs.state,), log_dir=dirs.logs,
        env_file=dirs.config / "service.env", system=system)


def render(spec: units.ServiceSpec, manager: str) -> str:
    if manager == "systemd":
        return units.systemd_unit(spec).render()
    return units.render_plist(units.launchd_plist(spec))


@dataclass(frozen=True)
class Installed:
    path: Path
    ran: list[list[str]]


def _run_all(commands: list[list[str]]) -> None:
    for cmd in commands:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SpecctlError(f"`{' '.join(cmd)}` failed: "
                               f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")


def install(spec: units.ServiceSpec, manager: str, enable: bool,
            home: Path | None = None) -> Installed:
    path = units.unit_path(spec, manager, home or Path.home())
    for folder in spec.writable:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(path, render(spec, manager))
    os.chmod(path, 0o644)
    commands = units.activation(spec, manager, path, os.getuid()) if enable else []
    _run_all(commands)
    return Installed(path, commands)


def uninstall(spec: units.ServiceSpec, manager: str, home: Path | None = None) -> Path | None:
    path = units.unit_path(spec, manager, home or Path.home())
    if not path.exists():
        return None
    subprocess.run(units.deactivation(spec, manager, path, os.getuid())[0],
                   capture_output=True, check=False)
    path.unlink()
    if manager == "systemd":
        ctl = ["systemctl"] if spec.system else ["systemctl", "--user"]
        subprocess.run([*ctl, "daemon-reload"], capture_output=True, check=False)
    return path
