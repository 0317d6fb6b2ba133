"""Shared fixtures. Every test gets its own config/state dirs, so nothing touches the user's setup.

The cache dir (built llama.cpp, test models: several GB) is shared on purpose: tests that need it
read SPECCTL_CACHE_DIR as CI set it up with `specctl backend install` and `specctl models testbed`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.contract.hardware import Hardware
from specctl.orchestrator.machine.hardware import from_json

FIXTURES = Path(__file__).parent / "fixtures"
HARDWARE = FIXTURES / "hardware"


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Dirs]:
    shared_cache = Dirs.from_env().cache
    monkeypatch.setenv("SPECCTL_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPECCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SPECCTL_CACHE_DIR", str(shared_cache))
    for key in ("SPECCTL_K", "SPECCTL_DRAFT", "SPECCTL_TARGET", "SPECCTL_BACKEND",
                "SPECCTL_SERVER__PORT", "SPECCTL_SERVER__HOST", "HF_ENDPOINT", "HF_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    # the Hugging Face Hub cannot be reached from here: tests that want one start the stand-in
    # (tests/fake_hf_hub.py) and set HF_ENDPOINT and HF_HUB_OFFLINE=0 themselves
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    yield Dirs.from_env()


def recorded(name: str) -> Hardware:
    return from_json(json.loads((HARDWARE / f"{name}.json").read_text()), source=name)
