"""Service definitions: a systemd unit (Linux) or a launchd plist (macOS), built as objects and
rendered separately, so they can be golden-tested and checked by `systemd-analyze verify`.

The objects hold plain values; every value reaches the file through one quoting function per
format (service/quote.py), so no value can add a line, a directive or a key.
"""

from __future__ import annotations

import plistlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from specctl.orchestrator.files import inside
from specctl.orchestrator.service import envfile
from specctl.orchestrator.service.quote import (
    Words,
    control,
    plist_value,
    refuse,
    systemd_value,
    unit_escape,
)

LABEL_PREFIX = "dev.specctl"
# what PrivateTmp=yes replaces with the service's own, empty folders: a path under them is
# reached only through a bind from the host (BindPaths=, BindReadOnlyPaths=)
PRIVATE_TMP = (Path("/tmp"), Path("/var/tmp"))


@dataclass(frozen=True)
class ServiceSpec:
    """What any service manager needs to run `specctl up --profile P --foreground`."""

    profile: str
    argv: tuple[str, ...]
    env: Mapping[str, str]  # what the unit or plist carries (never a secret)
    # where it writes (state, caches, HF cache, compile caches): ReadWritePaths= under systemd;
    # launchd has no such sandbox, so a plist needs nothing for them
    writable: tuple[Path, ...]
    log_dir: Path
    # what it reads: its interpreter, environment and code, its config and profile; under
    # systemd, those under /tmp or /var/tmp are bound read-only into the service's private /tmp
    readable: tuple[Path, ...] = ()
    env_file: Path | None = None  # secrets (API keys, HF_TOKEN), kept out of the unit
    secrets: Mapping[str, str] = field(default_factory=dict)  # written to env_file, mode 0600
    reasons: Mapping[str, str] = field(default_factory=dict)  # variable -> why it is carried
    system: bool = False
    user: str | None = None  # a system service runs as this user (never root)
    restart_sec: int = 5
    stop_timeout: int = 30
    start_limit_burst: int = 5

    @property
    def label(self) -> str:
        return f"{LABEL_PREFIX}.{unit_escape(self.profile)}"

    @property
    def unit_name(self) -> str:
        return f"specctl-{unit_escape(self.profile)}.service"


Entry = tuple[str, "str | Words"]


@dataclass(frozen=True)
class SystemdUnit:
    sections: tuple[tuple[str, tuple[Entry, ...]], ...] = field(default_factory=tuple)

    def render(self) -> str:
        out = []
        for name, entries in self.sections:
            out.append(f"[{name}]")
            out += [f"{k}={systemd_value(v)}" for k, v in entries]
            out.append("")
        return "\n".join(out)


def systemd_unit(spec: ServiceSpec) -> SystemdUnit:
    program = spec.argv[0] if spec.argv else ""
    if not program.startswith("/") or any(c in program for c in "\\\"'$") or any(
            control(c) for c in program):
        raise refuse(program, "systemd runs only an absolute program path without quotes, "
                     "backslashes, '$' or control characters")
    env = tuple(("Environment", Words((f"{k}={v}",))) for k, v in sorted(spec.env.items()))
    # "-": a missing path is not fatal
    writable = Words(tuple(f"-{p}" for p in spec.writable if not private_tmp(p)), "paths")
    user = (("User", spec.user),) if spec.system and spec.user else ()
    return SystemdUnit((
        ("Unit", (
            ("Description", f"specctl {spec.profile}: speculative decoding LLM server"),
            ("Documentation", "https://pypi.org/project/specctl/"),
            ("After", "network-online.target"),
            ("Wants", "network-online.target"),
            ("StartLimitIntervalSec", "600"),
            ("StartLimitBurst", str(spec.start_limit_burst)),
        )),
        ("Service", (
            ("Type", "simple"),
            *user,
            ("ExecStart", Words(spec.argv, "command")),
            *env,
            *((("EnvironmentFile", f"-{spec.env_file}"),) if spec.env_file else ()),
            ("Restart", "on-failure"),
            ("RestartSec", str(spec.restart_sec)),
            ("KillMode", "control-group"),
            ("TimeoutStopSec", str(spec.stop_timeout)),
            ("StandardOutput", "journal"),
            ("StandardError", "journal"),
            ("NoNewPrivileges", "yes"),
            ("ProtectSystem", "strict"),
            ("ProtectHome", "read-only"),
            *((("ReadWritePaths", writable),) if writable.items else ()),
            ("PrivateTmp", "yes"),
            *host_tmp(spec),
        )),
        ("Install", (("WantedBy", "multi-user.target" if spec.system else "default.target"),)),
    ))


def private_tmp(path: Path) -> bool:
    """Whether PrivateTmp=yes hides `path` from the service (it lies under /tmp or /var/tmp)."""
    return any(path.is_relative_to(tmp) for tmp in PRIVATE_TMP)


def outermost(paths: Sequence[Path]) -> tuple[Path, ...]:
    """`paths` without those inside another one, in order of depth."""
    out: list[Path] = []
    for path in sorted(set(paths), key=lambda p: (len(p.parts), str(p))):
        if not any(path.is_relative_to(kept) for kept in out):
            out.append(path)
    return tuple(out)


def host_tmp(spec: ServiceSpec) -> tuple[Entry, ...]:
    """The host's folders under /tmp or /var/tmp the service uses (an install, a profile or
    state dir there: a checkout under /tmp), bound into its private /tmp: where it writes,
    writable (BindPaths=: its files land on the host, not in a /tmp dropped at stop), what it
    reads, read-only. None for an install elsewhere: the unit is then what it always was."""
    writes = outermost([p for p in spec.writable if private_tmp(p)])
    reads = tuple(p for p in outermost([p for p in spec.readable if private_tmp(p)])
                  if not any(p.is_relative_to(w) for w in writes))
    # "-": a missing source is skipped (a folder made later, a file removed since)
    return (*((("BindReadOnlyPaths", Words(tuple(f"-{p}" for p in reads), "binds")),)
              if reads else ()),
            *((("BindPaths", Words(tuple(f"-{p}" for p in writes), "binds")),)
              if writes else ()))


def launchd_plist(spec: ServiceSpec) -> dict[str, object]:
    user = {"UserName": spec.user} if spec.system and spec.user else {}
    return {
        **user,
        "Label": spec.label,
        "ProgramArguments": list(spec.argv),
        # launchd has no EnvironmentFile=: `up` reads the secrets from the file it names
        "EnvironmentVariables": dict(sorted({**spec.env, **(
            {envfile.VARIABLE: str(spec.env_file)} if spec.env_file else {})}.items())),
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "ThrottleInterval": spec.restart_sec,
        "ExitTimeOut": spec.stop_timeout,
        "ProcessType": "Interactive",
        "StandardOutPath": str(inside(spec.log_dir, spec.profile, ".launchd.out.log")),
        "StandardErrorPath": str(inside(spec.log_dir, spec.profile, ".launchd.err.log")),
    }


def render_plist(plist: Mapping[str, object]) -> str:
    checked = plist_value(plist)
    assert isinstance(checked, dict)
    return plistlib.dumps(checked, sort_keys=True).decode()


def unit_path(spec: ServiceSpec, manager: str, home: Path) -> Path:
    """Where the unit or plist goes: a profile name that would leave that folder is refused."""
    if manager == "systemd":
        base = Path("/etc/systemd/system") if spec.system else home / ".config/systemd/user"
        return inside(base, spec.profile, ".service", "profile name", prefix="specctl-")
    base = Path("/Library/LaunchDaemons") if spec.system else home / "Library/LaunchAgents"
    return inside(base, spec.profile, ".plist", "profile name", prefix=f"{LABEL_PREFIX}.")


def activation(spec: ServiceSpec, manager: str, path: Path, uid: int) -> list[list[str]]:
    """The commands that load and start an installed service (run only when asked)."""
    if manager == "systemd":
        ctl = ["systemctl"] if spec.system else ["systemctl", "--user"]
        return [[*ctl, "daemon-reload"], [*ctl, "enable", "--now", spec.unit_name]]
    domain = "system" if spec.system else f"gui/{uid}"
    return [["launchctl", "bootstrap", domain, str(path)]]


def reactivation(spec: ServiceSpec, manager: str, path: Path, uid: int) -> list[list[str]]:
    """After a unit was replaced: restart a running service, so the new one is what runs."""
    if manager == "systemd":
        ctl = ["systemctl"] if spec.system else ["systemctl", "--user"]
        return [[*ctl, "try-restart", spec.unit_name]]
    domain = "system" if spec.system else f"gui/{uid}"
    return [["launchctl", "kickstart", "-k", f"{domain}/{spec.label}"]]


def deactivation(spec: ServiceSpec, manager: str, path: Path, uid: int) -> list[list[str]]:
    if manager == "systemd":
        ctl = ["systemctl"] if spec.system else ["systemctl", "--user"]
        return [[*ctl, "disable", "--now", spec.unit_name], [*ctl, "daemon-reload"]]
    domain = "system" if spec.system else f"gui/{uid}"
    return [["launchctl", "bootout", f"{domain}/{spec.label}"]]


def service_argv(program: Sequence[str], profile_ref: str,
                 flags: Sequence[str] = ()) -> tuple[str, ...]:
    """`specctl up --profile REF --foreground`, with `up`'s flags over the profile."""
    return (*program, "up", "--profile", profile_ref, "--foreground", *flags)


GATEWAY = "gateway"  # the gateway's service name: specctl-gateway.service, dev.specctl.gateway


def gateway_argv(program: Sequence[str], refs: Sequence[str], host: str,
                 port: int) -> tuple[str, ...]:
    """`specctl gateway REFS... --host H --port P` (it runs in the foreground by itself)."""
    return (*program, "gateway", *refs, "--host", host, "--port", str(port))
