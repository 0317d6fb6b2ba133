"""Dirs.from_env: SPECCTL_*_DIR variables, from os.environ or an explicit mapping."""

from __future__ import annotations

from pathlib import Path

import platformdirs
import pytest

from specctl.orchestrator.contract.dirs import APP, Dirs


def test_an_explicit_mapping_alone_decides_empty_means_default_and_tilde_expands() -> None:
    # conftest sets all three in os.environ; an explicit mapping must not look there
    dirs = Dirs.from_env({"SPECCTL_CONFIG_DIR": "", "SPECCTL_STATE_DIR": "~/specctl-state",
                          "PATH": "/usr/bin"})
    assert dirs.config == Path(platformdirs.user_config_dir(APP))
    assert dirs.state == Path.home() / "specctl-state"
    assert dirs.cache == Path(platformdirs.user_cache_dir(APP))
    assert dirs.logs == Path.home() / "specctl-state" / "logs"


def test_os_environ_is_read_when_no_mapping_is_given(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    monkeypatch.setenv("SPECCTL_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setenv("SPECCTL_STATE_DIR", "")
    monkeypatch.setenv("SPECCTL_CACHE_DIR", "~/specctl-cache")
    dirs = Dirs.from_env()
    assert dirs.config == tmp_path / "cfg"
    assert dirs.state == Path(platformdirs.user_state_dir(APP))
    assert dirs.cache == Path.home() / "specctl-cache"
