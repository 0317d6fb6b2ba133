"""`profiles new` writes what runs from any folder, and refuses what cannot run (issue 54): a
model file's path is kept absolute, a file that is not there and a --draft that names nothing
exit 2, and a shipped profile's name is refused unless --force (yours would shadow it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from specctl.orchestrator.contract.dirs import Dirs
from tests.cli import run_main

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def one_line(code: int, err: str, expected: int = 2) -> str:
    lines = err.strip().splitlines()
    assert code == expected and len(lines) == 1 and "Traceback" not in err, (code, err)
    return lines[0]


def written(dirs: Dirs, name: str) -> dict[str, object]:
    data: dict[str, object] = tomllib.loads((dirs.profiles / f"{name}.toml").read_text())
    return data


def test_a_relative_model_path_is_stored_absolute(tmp_path: Path, isolated_dirs: Dirs,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.gguf").write_bytes(b"GGUF")
    (tmp_path / "models" / "d.gguf").write_bytes(b"GGUF")
    monkeypatch.chdir(tmp_path / "models")
    code, _, err = run_main(monkeypatch, capsys, "profiles", "new", "mine", "./m.gguf",
                              "--draft", "d.gguf")
    assert code == 0, err
    data = written(isolated_dirs, "mine")
    assert data["target"] == str(tmp_path / "models" / "m.gguf")
    assert data["draft"] == str(tmp_path / "models" / "d.gguf")
    assert Path(str(data["target"])).is_absolute()


@pytest.mark.parametrize(("args", "needle"), [
    (("./missing.gguf",), "missing.gguf"),
    (("hf:Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M", "--draft", "bogus"), "--draft bogus"),
    (("hf:Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M", "--draft", "./nope.gguf"), "nope.gguf"),
    (("Qwen/Qwen2.5-Coder-7B-Instruct-GGUF",), "did you mean hf:"),
])
def test_what_cannot_run_is_refused_with_exit_2(args: tuple[str, ...], needle: str,
                                                tmp_path: Path, isolated_dirs: Dirs,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(monkeypatch, capsys, "profiles", "new", "mine", *args)
    assert needle in one_line(code, err)
    assert not (isolated_dirs.profiles / "mine.toml").exists() and out == ""


def test_a_shipped_name_is_refused_unless_forced(isolated_dirs: Dirs,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    ref = "hf:Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M"
    code, _, err = run_main(monkeypatch, capsys, "profiles", "new", "cpu-demo", ref)
    line = one_line(code, err)
    assert "shipped profile" in line and "--force" in line
    assert not (isolated_dirs.profiles / "cpu-demo.toml").exists()
    code, _, err = run_main(monkeypatch, capsys, "profiles", "new", "cpu-demo", ref, "--force")
    assert code == 0, err
    assert written(isolated_dirs, "cpu-demo")["target"] == ref
    code, _, err = run_main(monkeypatch, capsys, "profiles", "new", "cpu-demo", ref)
    assert "exists" in one_line(code, err)  # yours now: replacing it needs --force too
