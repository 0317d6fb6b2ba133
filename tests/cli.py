"""Run the real `specctl` command line: in a subprocess with an explicit environment, or in this
process (run_main)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from specctl.orchestrator.cli import main as cli

ROOT = Path(__file__).resolve().parent.parent


def specctl(*args: str, env: Mapping[str, str] | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specctl", *args], cwd=ROOT, text=True,
                          capture_output=True, env=dict(os.environ if env is None else env),
                          timeout=timeout, check=False)


def run_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
             *args: str) -> tuple[int, str, str]:
    """specctl in this process (fast, and monkeypatches reach it): exit code, stdout, stderr."""
    monkeypatch.setattr(sys, "argv", ["specctl", *args])
    try:
        cli.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out, out.err


def run_state(env: Mapping[str, str], profile: str) -> dict[str, Any]:
    """The run's state file as `up` wrote it under env's state dir."""
    data: dict[str, Any] = json.loads(
        (Path(env["SPECCTL_STATE_DIR"]) / "runs" / f"{profile}.json").read_text())
    return data


def status_row(env: Mapping[str, str], profile: str) -> dict[str, Any]:
    """`specctl status --json`'s row for the profile."""
    done = specctl("status", "--json", env=env)
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return next(r for r in rows if r["profile"] == profile)
