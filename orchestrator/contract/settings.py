"""SPECCTL_* settings (specctl's and each backend's): the one loader that turns a bad value into
one line naming the variable, and the variables a backend declares for a service to carry."""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from specctl.orchestrator.errors import SettingsError, first_problem

SettingsT = TypeVar("SettingsT", bound=BaseModel)


class BackendSettings(BaseSettings):
    """A backend's own SPECCTL_* variables (its fields, e.g. `llama_server` is
    SPECCTL_LLAMA_SERVER): an empty variable counts as unset, other SPECCTL_* names are not its
    business (specctl's own settings and the misspelling check read those)."""

    model_config = SettingsConfigDict(env_prefix="SPECCTL_", extra="ignore",
                                      env_ignore_empty=True)


def load_settings(make: Callable[[], SettingsT], prefix: str = "SPECCTL_") -> SettingsT:
    """Settings read from SPECCTL_* variables (specctl's or a backend's): a bad value is one
    line naming the variable, never a traceback."""
    try:
        return make()
    except ValueError as exc:  # pydantic's ValidationError, or pydantic-settings' own error
        errors = exc.errors() if isinstance(exc, ValidationError) else []
        loc = errors[0]["loc"] if errors else ()
        var = f"${prefix}{loc[0]}".upper() if loc else f"a {prefix}* variable"
        why = errors[0]["msg"] if errors else first_problem(exc)
        raise SettingsError(f"{var}: {why}; fix it or unset it") from None


@dataclass(frozen=True)
class EnvVar:
    """A variable a backend reads (its SPECCTL_* settings, the engine's own): a service carries
    the value in force when it is installed, a secret only in the service's environment file."""

    name: str
    why: str
    secret: bool = False


def settings_vars(models: tuple[type[BaseModel], ...], what: str) -> tuple[EnvVar, ...]:
    """The variables of settings models (pydantic-settings): prefix + field name, upper case; a
    SecretStr field is a secret."""
    out = []
    for model in models:
        prefix = str(model.model_config.get("env_prefix", ""))
        for name, info in model.model_fields.items():
            secret = any(a is SecretStr for a in (info.annotation, *typing.get_args(
                info.annotation)))
            out.append(EnvVar(f"{prefix}{name}".upper(),
                              f"{what}{': ' + info.description if info.description else ''}",
                              secret))
    return tuple(out)
