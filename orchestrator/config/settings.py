"""Machine-wide settings (not per profile), from SPECCTL_* variables. Passed in, never global.

Each backend reads its own settings (e.g. where its server program is) in its adapter. A bad
value is one line naming the variable (`from_env`); an empty one means the default."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field

from specctl.orchestrator.contract.settings import EnvSettings, load_settings
from specctl.orchestrator.files import expand_user


class Settings(EnvSettings):
    models_dirs: str = ""  # extra GGUF folders for draft search, separated by os.pathsep
    # supervision: a server that was healthy and dies is restarted with exponential backoff
    max_restarts: int = Field(5, ge=0, le=1000)
    # seconds before the first restart; doubles, up to 30 s
    restart_backoff: float = Field(1.0, ge=0, le=3600)
    # a cold 3.5 GB F16 load took 54 s on 2 cores
    health_timeout: float = Field(300.0, gt=0, le=86400)
    # SIGTERM, then SIGKILL of the server's process group
    stop_grace: float = Field(10.0, ge=0, le=3600)
    no_download: bool = False  # refuse to fetch models that are not on disk (`up --no-download`)
    # a server's log file (run by hand, or under launchd) is rotated at this size, keeping
    # `log_backups` old ones (NAME.log.1, ...); under systemd the journal keeps the log
    log_max_bytes: int = Field(10 << 20, ge=64 << 10, le=1 << 40)
    log_backups: int = Field(3, ge=0, le=100)

    @classmethod
    def from_env(cls) -> Settings:
        return load_settings(cls.from_environ)

    def model_folders(self) -> list[Path]:
        return [expand_user(p) for p in self.models_dirs.split(os.pathsep) if p]
