"""One spelling per flag and per backend (issue 54): `profiles list` beside `models list` and
`backend list`; `profiles show` prints TOML alone (the resolved profile as TOML comments) or,
with --json, JSON alone; `service status --json`; `llamacpp` is the backend's one name (and
`llama.cpp` an alias) everywhere; a file that is no profile is one line, not a KeyError."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from specctl.orchestrator.contract import registry
from specctl.orchestrator.contract.dirs import Dirs
from tests.cli import run_main, specctl

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def ok(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code, out, err = run_main(monkeypatch, capsys, *args)
    assert code == 0, err
    return out


def test_profiles_list_is_profiles(monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    listed = json.loads(ok(monkeypatch, capsys, "profiles", "list", "--json"))
    assert listed == json.loads(ok(monkeypatch, capsys, "profiles", "--json"))
    assert "cpu-demo" in {p["name"] for p in listed}


def test_profiles_show_is_toml_or_json_never_both(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    text = ok(monkeypatch, capsys, "profiles", "show", "cpu-demo")
    data = tomllib.loads(text)  # the whole stream is TOML: the file, the rest comments
    assert data["target"] == "testbed:qwen-1.5b-f16" and data["server"]["port"] == 8090
    assert '# parallel = "auto"' in text  # a default, filled in, as a comment
    shown = json.loads(ok(monkeypatch, capsys, "profiles", "show", "cpu-demo", "--json"))
    assert shown["resolved"]["server"]["parallel"] == "auto"
    assert tomllib.loads(shown["text"]) == data and shown["path"].endswith("cpu-demo.toml")


@pytest.mark.parametrize(("content", "needle"), [
    ('target = "x.gguf"\n', None),  # a profile in a file not named .toml: shown
    ("just some notes\n", "not valid TOML"),
    ('description = "no target"\n', "target"),
])
def test_profiles_show_of_any_file_is_the_profile_or_one_line(
        content: str, needle: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "notes"
    path.write_text(content)
    code, out, err = run_main(monkeypatch, capsys, "profiles", "show", str(path))
    if needle is None:
        assert code == 0 and 'target = "x.gguf"' in out, err
    else:
        assert code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
        assert "Traceback" not in err and "KeyError" not in err


def test_service_status_json(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path)}
    done = specctl("service", "install", "-p", "cpu-demo", "--manager", "systemd", env=env)
    assert done.returncode == 0, done.stderr
    status = specctl("service", "status", "cpu-demo", "--manager", "systemd", "--json", env=env)
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["profile"] == "cpu-demo" and data["unit"].endswith("specctl-cpu-demo.service")
    assert data["server"] is None  # not running
    assert data["service"] is None or "restarts" in data["service"]


def test_llamacpp_is_the_one_name(monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert registry.canonical("llamacpp") == registry.canonical("llama.cpp") == "llamacpp"
    code, out, _ = run_main(monkeypatch, capsys, "backend", "install", "--help")
    assert code == 0 and "specctl backend install llamacpp" in out
    for backend in registry.registry(Dirs.from_env()).values():
        assert "backend install llama.cpp" not in backend.install_hint + backend.no_spec_hint
