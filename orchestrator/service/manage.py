"""`specctl service install|uninstall|status`: write (or print) the unit, activate when asked.

A system service never runs as root: it runs as a named user (`--user-name`; by default the user
who ran `sudo`, else the one running specctl), with that user's dirs, venv and profile.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import platform
import pwd
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from specctl.orchestrator.contract import registry
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.errors import SpecctlError
from specctl.orchestrator.files import expand_user, inside, write_atomic
from specctl.orchestrator.service import envfile, environment, units


def default_manager() -> str:
    return "launchd" if platform.system() == "Darwin" else "systemd"


def service_user(given: str | None, environ: Mapping[str, str]) -> pwd.struct_passwd:
    """The user a system service runs as: `given`, else who ran sudo, else this user; never
    root (the service runs a user's venv, profile and models, with that user's rights)."""
    name = given or (environ.get("SUDO_USER") if os.geteuid() == 0 else None)
    try:
        entry = pwd.getpwnam(name) if name else pwd.getpwuid(os.getuid())
    except KeyError:
        raise SpecctlError(f"no user {name!r} on this machine; pass --user-name with the "
                           "account the service should run as") from None
    if entry.pw_uid == 0:
        raise SpecctlError("a --system service would run as root; pass --user-name USER (the "
                           "account that owns the venv, profile and models)")
    return entry


def dirs_of(user: pwd.struct_passwd, dirs: Dirs) -> Dirs:
    """`dirs` as `user` sees them: those under this user's home moved under theirs (sudo)."""
    mine, theirs = Path.home(), Path(user.pw_dir)

    def moved(path: Path) -> Path:
        return theirs / path.relative_to(mine) if path.is_relative_to(mine) else path

    if mine == theirs:
        return dirs
    return replace(dirs, config=moved(dirs.config), state=moved(dirs.state),
                   cache=moved(dirs.cache))


def carried(dirs: Dirs, env: Mapping[str, str],
            api_key_env: str | None = None) -> list[environment.Carried]:
    """What the service carries (service/environment.py): specctl's dirs as the service user
    sees them, then every declared variable set in `env`."""
    fixed = {
        "SPECCTL_STATE_DIR": (str(dirs.state), "specctl's state dir (runs, logs, tuned results)"),
        "SPECCTL_CONFIG_DIR": (str(dirs.config), "specctl's config dir (profiles)"),
        "SPECCTL_CACHE_DIR": (str(dirs.cache), "specctl's cache dir (backends, models)"),
        "PYTHONUNBUFFERED": ("1", "log lines as they are written"),
        # one restart layer: the service manager's (Restart=on-failure, KeepAlive)
        "SPECCTL_MAX_RESTARTS": ("0", "restarts are the service manager's alone"),
    }
    return environment.carried(env, fixed, registry.adapter_classes().values(), api_key_env)


def writable_dirs(dirs: Dirs, env: Mapping[str, str], home: Path,
                  backends: Sequence[str] = ()) -> tuple[Path, ...]:
    """Where the service writes: specctl's state and cache (runs, logs, provisioning, Hub
    metadata, models), the Hugging Face cache (pulls) and the compile caches each backend it
    may run declares (Adapter.cache_dirs); a folder inside another listed one is left out.
    Everything else stays read-only (ProtectSystem=strict, ProtectHome=read-only)."""
    classes = registry.adapter_classes()
    chosen = [classes[b] for b in backends if b in classes] or list(classes.values())
    hf_home = expand_user(env.get("HF_HOME") or home / ".cache" / "huggingface")
    hub = [expand_user(env["HF_HUB_CACHE"])] if env.get("HF_HUB_CACHE") else []
    found = [dirs.state, dirs.cache, hf_home, *hub,
             *(p for cls in chosen for p in cls.cache_dirs(env, home))]
    return units.outermost([p.absolute() for p in found])


def program_paths() -> tuple[Path, ...]:
    """What running `python -m specctl` reads: this interpreter, its environment (a venv and
    the Python it was made from) and specctl's code where it really lies (an editable install
    maps the packages to the checkout's folders: orchestrator/, adapters/, profiles/)."""
    specs = [importlib.util.find_spec(name) for name in
             ("specctl", "specctl.adapters", "specctl.orchestrator", "specctl.profiles")]
    code = units.outermost([Path(folder).resolve() for spec in specs if spec is not None
                            for folder in spec.submodule_search_locations or ()])
    found = [Path(sys.executable), Path(sys.executable).resolve(), Path(sys.prefix),
             Path(sys.exec_prefix), Path(sys.base_prefix), Path(sys.base_exec_prefix), *code]
    return tuple(dict.fromkeys(p.absolute() for p in found))


def readable_paths(dirs: Dirs, env: Mapping[str, str], profile_ref: str) -> tuple[Path, ...]:
    """What the service reads: its program (program_paths), specctl's config dir, the profile
    file it is given and the folders of its PATH (the engines and tools found there)."""
    profile = [Path(profile_ref)] if Path(profile_ref).is_absolute() else []
    search = [Path(p) for p in env.get("PATH", "").split(os.pathsep) if Path(p).is_absolute()]
    return tuple(dict.fromkeys([*program_paths(), dirs.config.absolute(), *profile, *search]))


def spec_for(profile: str, profile_ref: str, dirs: Dirs, system: bool,
             env: Mapping[str, str], user: pwd.struct_passwd | None = None,
             api_key_env: str | None = None, backends: Sequence[str] = (),
             flags: Sequence[str] = ()) -> units.ServiceSpec:
    """The service of `profile`, carrying the variables in force in `env` (empty: the dirs
    alone, enough to find, show or remove an installed one); `flags`: `up`'s command-line
    flags over the profile (`--port 9000`)."""
    if system and user is not None:
        dirs = dirs_of(user, dirs)
    ref = str(Path(profile_ref).resolve()) if profile_ref.endswith(".toml") else profile_ref
    items = carried(dirs, env, api_key_env)
    return units.ServiceSpec(
        profile=profile,
        argv=units.service_argv((sys.executable, "-m", "specctl"), ref, flags),
        env={c.name: c.value for c in items if not c.secret},
        secrets={c.name: c.value for c in items if c.secret},
        reasons={c.name: c.why for c in items},
        writable=writable_dirs(dirs, env, Path(user.pw_dir) if system and user else Path.home(),
                               backends) if env else (dirs.state,),
        log_dir=dirs.logs,
        readable=readable_paths(dirs, env, ref) if env else (),
        env_file=inside(dirs.config / "services", profile, ".env", "profile name"),
        system=system, user=user.pw_name if system and user is not None else None)


def gateway_spec(refs: Sequence[str], host: str, port: int, dirs: Dirs, system: bool,
                 env: Mapping[str, str], user: pwd.struct_passwd | None = None,
                 key_env: str = "SPECCTL_GATEWAY_API_KEY") -> units.ServiceSpec:
    """The gateway as the one service: every named profile (none: every one that runs) behind
    one port; its API key goes to the secrets file, never into the unit."""
    spec = spec_for(units.GATEWAY, units.GATEWAY, dirs, system, env, user, key_env)
    paths = [str(Path(r).resolve()) if r.endswith(".toml") else r for r in refs]
    files = tuple(Path(p) for p in paths if Path(p).is_absolute()) if env else ()
    return replace(spec, argv=units.gateway_argv((sys.executable, "-m", "specctl"), paths,
                                                 host, port),
                   readable=tuple(dict.fromkeys((*spec.readable, *files))))


def explain(spec: units.ServiceSpec, manager: str) -> list[str]:
    """Which variables the service carries, where and why (a secret's value is never shown)."""
    items = [environment.Carried(name, value, spec.reasons.get(name, ""), secret)
             for secret, found in ((False, spec.env), (True, spec.secrets))
             for name, value in found.items()]
    return environment.explain(sorted(items, key=lambda c: c.name),
                               "unit" if manager == "systemd" else "plist", str(spec.env_file))


def render(spec: units.ServiceSpec, manager: str) -> str:
    if manager == "systemd":
        return units.systemd_unit(spec).render()
    return units.render_plist(units.launchd_plist(spec))


@dataclass(frozen=True)
class Written:
    path: Path
    ran: list[list[str]]
    diff: list[str] = field(default_factory=list)  # the unified diff over a replaced unit
    replaced: bool = False


def changes(path: Path, text: str) -> tuple[bool, list[str]]:
    """(whether a unit is there already, the unified diff from it to `text`)."""
    try:
        old = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return False, []
    return True, list(difflib.unified_diff(old.splitlines(), text.splitlines(), str(path),
                                           f"{path} (new)", lineterm=""))


def _run_all(commands: list[list[str]]) -> None:
    for cmd in commands:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SpecctlError(f"`{' '.join(cmd)}` failed: "
                               f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")


def install(spec: units.ServiceSpec, manager: str, enable: bool,
            home: Path | None = None) -> Written:
    path = units.unit_path(spec, manager, home or Path.home())
    text = render(spec, manager)  # refused values fail before anything is written
    existed, diff = changes(path, text)
    owner = spec.user if spec.system and os.geteuid() == 0 else None
    for folder in spec.writable:
        _make_dir(folder, owner)
    if spec.env_file is not None:  # the secrets in force now, and no stale one
        _make_dir(spec.env_file.parent, owner)
        envfile.write(spec.env_file, spec.secrets, owner)
    write_atomic(path, text)  # a temp file renamed over the old unit: never a half one
    os.chmod(path, 0o644)
    commands = units.activation(spec, manager, path, os.getuid()) if enable else []
    if enable and diff:
        commands += units.reactivation(spec, manager, path, os.getuid())
    _run_all(commands)
    return Written(path, commands, diff, existed)


def _make_dir(folder: Path, owner: str | None) -> None:
    """mkdir -p; as root for a service user, the folders made are given to that user."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if owner is not None:
        for made in missing:
            shutil.chown(made, owner, pwd.getpwnam(owner).pw_gid)


def uninstall(spec: units.ServiceSpec, manager: str, home: Path | None = None) -> Path | None:
    path = units.unit_path(spec, manager, home or Path.home())
    if not path.exists():
        return None
    subprocess.run(units.deactivation(spec, manager, path, os.getuid())[0],
                   capture_output=True, check=False)
    path.unlink()
    if spec.env_file is not None:
        envfile.remove(spec.env_file)
    if manager == "systemd":
        ctl = ["systemctl"] if spec.system else ["systemctl", "--user"]
        subprocess.run([*ctl, "daemon-reload"], capture_output=True, check=False)
    return path
