"""The environment a service carries: computed from declarations, never listed by hand.

Every variable that decides what `specctl up` does: specctl's own settings (config/settings.py),
each profile override in force (`SPECCTL_SERVER__PORT`, ...), each backend's settings and engine
variables as its adapter declares them (`Adapter.environment`), Hugging Face's variables, PATH,
and the profile's API key variable. `service install` records the values in force; a secret goes
only in the service's environment file (mode 0600), never in the unit or plist.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from specctl.orchestrator.config import profiles
from specctl.orchestrator.config.settings import Settings
from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.settings import EnvVar, settings_vars

HUGGING_FACE = (
    EnvVar("HF_ENDPOINT", "Hugging Face: the Hub's address (a mirror)"),
    EnvVar("HF_HOME", "Hugging Face: its cache and login"),
    EnvVar("HF_HUB_CACHE", "Hugging Face: where models are downloaded"),
    EnvVar("HF_TOKEN", "Hugging Face: the login token (gated models)", secret=True),
    EnvVar("HF_HUB_OFFLINE", "Hugging Face: never ask the Hub"),
)
SEARCH_PATH = EnvVar("PATH", "where engines and their tools are found, as in your shell")


@dataclass(frozen=True)
class Carried:
    """One variable a service carries: its value in force and why it is carried."""

    name: str
    value: str
    why: str
    secret: bool = False


def declared(adapters: Iterable[type[Adapter]]) -> list[EnvVar]:
    """Every variable a service may carry: specctl's settings, Hugging Face's, PATH and each
    backend's declared ones (a name declared twice keeps its first reason)."""
    found: dict[str, EnvVar] = {}
    core = settings_vars((Settings,), "specctl setting")
    backend = (v for cls in adapters for v in cls.environment())
    for var in (*core, *HUGGING_FACE, SEARCH_PATH, *backend):
        found.setdefault(var.name, var)
    return list(found.values())


def carried(environ: Mapping[str, str], fixed: Mapping[str, tuple[str, str]],
            adapters: Iterable[type[Adapter]], api_key_env: str | None = None) -> list[Carried]:
    """What a service carries: `fixed` (name -> (value, why)) as given, then every declared
    variable, profile override and the API key variable that is set (not empty) in `environ`."""
    out = {name: Carried(name, value, why) for name, (value, why) in fixed.items()}
    for var in declared(adapters):
        if environ.get(var.name) and var.name not in out:
            out[var.name] = Carried(var.name, environ[var.name], var.why, var.secret)
    for path, name in profiles.env_overrides(environ).origin.items():
        if name not in out:
            out[name] = Carried(name, environ[name], f"profile override of {'.'.join(path)}")
    if api_key_env and environ.get(api_key_env):
        out[api_key_env] = Carried(api_key_env, environ[api_key_env],
                                   "the profile's API key (server.api_key_env)", secret=True)
    return sorted(out.values(), key=lambda c: c.name)


def explain(items: Iterable[Carried], unit: str, env_file: str) -> list[str]:
    """One line per variable: where it goes and why (a secret's value is never shown)."""
    lines = []
    for c in items:
        where = f"{env_file} (secret, not shown)" if c.secret else f"{unit}: {c.value}"
        lines.append(f"{c.name}  ->  {where}  ({c.why})")
    return lines
