"""Advice that points the right way (issue 54): each refusal names what was wrong where the user
wrote it and what to do about that, in one line, exit 2 for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli import run_main


def refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
            *args: str) -> str:
    code, out, err = run_main(monkeypatch, capsys, *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and out == "", (code, err)
    return lines[0]


def test_a_missing_file_of_yours_is_not_a_testbed_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(monkeypatch, capsys, "plan", str(tmp_path / "mine.gguf"))
    assert "mine.gguf" in line and "check the path" in line and "testbed" not in line


@pytest.mark.parametrize("host", ["a b", "-x", "exa mple.com", "999.1.1.1:80"])
def test_a_bad_host_is_not_an_address(host: str, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(monkeypatch, capsys, "plan", "-p", "cpu-demo", "--host", host)
    assert "is not an address" in line and "exposes" not in line and "--host" in line


def test_a_misspelt_backend_says_did_you_mean(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(monkeypatch, capsys, "plan", "-p", "cpu-demo", "--backend", "vlm")
    assert "did you mean vllm?" in line and "Value error" not in line
    assert line.startswith("specctl: error: --backend: ")


@pytest.mark.parametrize(("toml", "needle"), [
    ('target = "x.gguf"\n[server]\nprot = 8080\n', "did you mean 'port'?"),
    ('target = "x.gguf"\nport = 8080\n', "belongs in [server]"),
    ('target = "x.gguf"\n[memory]\ncontext = 4096\n', "belongs in [server]"),
    ('target = "x.gguf"\nk = "four"\n', '"auto"'),
])
def test_a_profile_problem_says_what_to_do(toml: str, needle: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text(toml)
    line = refused(monkeypatch, capsys, "plan", "-p", str(profile))
    assert needle in line and "Value error" not in line


@pytest.mark.parametrize(("var", "meant"), [("SPECCTL_PORT", "SPECCTL_SERVER__PORT"),
                                            ("SPECCTL_STATE_DIRR", "SPECCTL_STATE_DIR"),
                                            ("SPECCTL_MAX_RESTART", "SPECCTL_MAX_RESTARTS")])
def test_a_misspelt_variable_is_refused(var: str, meant: str, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(var, "1")
    line = refused(monkeypatch, capsys, "status")
    assert f"${var}" in line and f"did you mean {meant}?" in line


def test_a_variable_of_your_own_is_left_alone(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SPECCTL_MY_KEY", "secret")  # e.g. a profile's api_key_env
    code, _, err = run_main(monkeypatch, capsys, "status")
    assert code == 0, err


def test_down_of_a_typo_says_did_you_mean(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(monkeypatch, capsys, "down", "cpu-dmeo")
    assert "did you mean cpu-demo" in line
    code, out, err = run_main(monkeypatch, capsys, "down", "cpu-demo")  # a profile: idempotent
    assert code == 0 and "was not running" in out, err
