"""Where specctl keeps its files: standard per-user dirs, each overridable by a SPECCTL_* variable.

config: user profiles (SPECCTL_CONFIG_DIR); state: runs, logs, tuned results, bench reports
(SPECCTL_STATE_DIR); cache: built backends and models (SPECCTL_CACHE_DIR).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP = "specctl"


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
        env = os.environ if env is None else env

        def pick(var: str, default: str) -> Path:
            value = env.get(var)
            return Path(value).expanduser() if value else Path(default)

        return cls(
            config=pick("SPECCTL_CONFIG_DIR", platformdirs.user_config_dir(APP)),
            state=pick("SPECCTL_STATE_DIR", platformdirs.user_state_dir(APP)),
            cache=pick("SPECCTL_CACHE_DIR", platformdirs.user_cache_dir(APP)),
        )
