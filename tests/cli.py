"""Run the real `specctl` command line in a subprocess, with an explicit environment."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def specctl(*args: str, env: Mapping[str, str] | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specctl", *args], cwd=ROOT, text=True,
                          capture_output=True, env=dict(os.environ if env is None else env),
                          timeout=timeout, check=False)
