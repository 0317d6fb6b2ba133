"""SPECCTL_* settings (specctl's and each backend's): the one reader of those variables
(`EnvSettings.from_environ`), the one loader that turns a bad value into one line naming the
variable, and the variables a backend declares for a service to carry.

Settings are flat (a path, a number, a flag, a URL): a field `llama_server` is the variable
SPECCTL_LLAMA_SERVER (any case), an empty variable counts as unset, and pydantic's own
validation reads the text ("5" as 5, "true" or "1" as True), as pydantic-settings does for flat
fields. pydantic-settings itself is not used: importing it cost every command about 0.1 s
(asyncio, dotenv and its sources), a third of a `plan`."""

from __future__ import annotations

import os
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from specctl.orchestrator.errors import SettingsError, first_problem

SettingsT = TypeVar("SettingsT", bound=BaseModel)
EnvT = TypeVar("EnvT", bound="EnvSettings")


class EnvConfig(ConfigDict, total=False):
    env_prefix: str  # a field's variable is env_prefix + its name, upper case


class EnvSettings(BaseModel):
    """Settings from environment variables: each field is `env_prefix` + its name (any case);
    an empty variable counts as unset; variables that name no field are not its business."""

    model_config = EnvConfig(env_prefix="SPECCTL_", extra="ignore", allow_inf_nan=False,
                             frozen=True, validate_default=True)

    @classmethod
    def from_environ(cls: type[EnvT], environ: Mapping[str, str] | None = None) -> EnvT:
        """The settings `environ` (os.environ unless given) holds; the defaults elsewhere."""
        prefix = str(cls.model_config.get("env_prefix", ""))
        given = {key.upper(): value for key, value in
                 (os.environ if environ is None else environ).items() if value}
        return cls.model_validate({name: given[var] for name in cls.model_fields
                                   if (var := f"{prefix}{name}".upper()) in given})


class BackendSettings(EnvSettings):
    """A backend's own SPECCTL_* variables (its fields, e.g. `llama_server` is
    SPECCTL_LLAMA_SERVER); other SPECCTL_* names are not its business (specctl's own settings
    and the misspelling check read those)."""


def load_settings(make: Callable[[], SettingsT], prefix: str = "SPECCTL_") -> SettingsT:
    """Settings read from SPECCTL_* variables (specctl's or a backend's; `make` is a settings
    class's `from_environ`): a bad value is one line naming the variable, never a traceback."""
    try:
        return make()
    except ValueError as exc:  # pydantic's ValidationError
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
    """The variables of settings models (EnvSettings): prefix + field name, upper case; a
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
