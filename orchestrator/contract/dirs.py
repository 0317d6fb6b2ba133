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

from specctl.orchestrator.contract.settings import EnvSettings, load_settings
from specctl.orchestrator.files import expand_user

APP = "specctl"


class Variables(EnvSettings):
    """SPECCTL_CONFIG_DIR, SPECCTL_STATE_DIR, SPECCTL_CACHE_DIR; unset or empty: the default."""

    config_dir: Path = Field(default_factory=lambda: Path(platformdirs.user_config_dir(APP)))
    state_dir: Path = Field(default_factory=lambda: Path(platformdirs.user_state_dir(APP)))
    cache_dir: Path = Field(default_factory=lambda: Path(platformdirs.user_cache_dir(APP)))

    @field_validator("config_dir", "state_dir", "cache_dir")
    @classmethod
    def _expand_user(cls, path: Path) -> Path:
        """~ expanded; a relative path is taken from here, so services and detached
        supervisors (started elsewhere) use the same dir."""
        return expand_user(path).absolute()


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
        found = load_settings(lambda: Variables.from_environ(env))
        return cls(config=found.config_dir, state=found.state_dir, cache=found.cache_dir)
