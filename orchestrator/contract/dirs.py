"""Where specctl keeps its files: standard per-user dirs, each overridable by a SPECCTL_* variable.

config: user profiles (SPECCTL_CONFIG_DIR); state: runs, logs, tuned results, bench reports
(SPECCTL_STATE_DIR); cache: built backends and models (SPECCTL_CACHE_DIR).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from specctl.orchestrator.contract.settings import load_settings
from specctl.orchestrator.files import expand_user

APP = "specctl"


class Variables(BaseSettings):
    """SPECCTL_CONFIG_DIR, SPECCTL_STATE_DIR, SPECCTL_CACHE_DIR; unset or empty: the default."""

    model_config = SettingsConfigDict(env_prefix="SPECCTL_", env_ignore_empty=True,
                                      extra="ignore")

    config_dir: Path = Field(default_factory=lambda: Path(platformdirs.user_config_dir(APP)))
    state_dir: Path = Field(default_factory=lambda: Path(platformdirs.user_state_dir(APP)))
    cache_dir: Path = Field(default_factory=lambda: Path(platformdirs.user_cache_dir(APP)))

    @field_validator("config_dir", "state_dir", "cache_dir")
    @classmethod
    def _expand_user(cls, path: Path) -> Path:
        """~ expanded; a relative path is taken from here, so services and detached
        supervisors (started elsewhere) use the same dir."""
        return expand_user(path).absolute()


class _Given(Variables):
    """The same variables from an explicit mapping alone: init values only, never os.environ."""

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings],
                                   init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)

    @classmethod
    def of(cls, env: Mapping[str, str]) -> _Given:
        prefix = cls.model_config.get("env_prefix", "")
        given = {key.upper(): value for key, value in env.items() if value}  # empty: default
        return cls.model_validate({name: given[var] for name in cls.model_fields
                                   if (var := f"{prefix}{name}".upper()) in given})


@dataclass(frozen=True)
class Dirs:
    config: Path
    state: Path
    cache: Path

    @property
    def profiles(self) -> Path:
        return self.config / "profiles"

    @property
    def runs(self) -> Path:
        return self.state / "runs"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def tuned(self) -> Path:
        return self.state / "tuned"

    @property
    def bench(self) -> Path:
        return self.state / "bench"

    @property
    def backends(self) -> Path:
        return self.cache / "backends"

    @property
    def models(self) -> Path:
        return self.cache / "models"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Dirs:
        found = load_settings(Variables) if env is None else load_settings(lambda: _Given.of(env))
        return cls(config=found.config_dir, state=found.state_dir, cache=found.cache_dir)
