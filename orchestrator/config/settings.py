"""Machine-wide settings (not per profile), from SPECCTL_* variables. Passed in, never global.

Each backend reads its own settings (e.g. where its server program is) in its adapter."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPECCTL_", extra="ignore")

    models_dirs: str = ""  # extra GGUF folders for draft search, separated by os.pathsep
    # supervision: a server that was healthy and dies is restarted with exponential backoff
    max_restarts: int = 5
    restart_backoff: float = 1.0  # seconds before the first restart; doubles, up to 30 s
    health_timeout: float = 300.0  # a cold 3.5 GB F16 load took 54 s on 2 cores
    stop_grace: float = 10.0  # SIGTERM, then SIGKILL of the server's process group
    no_download: bool = False  # refuse to fetch models that are not on disk (`up --no-download`)

    def model_folders(self) -> list[Path]:
        return [Path(p).expanduser() for p in self.models_dirs.split(os.pathsep) if p]
