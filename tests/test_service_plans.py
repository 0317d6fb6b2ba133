"""`service install` plans first (issue 54): a profile `plan` refuses is refused here in the same
one line and exit code, before a unit is written; `--port` and `--host` reach the unit's
`specctl up` (what `up -p NAME --port P` runs), and are planned with."""

from __future__ import annotations

import pytest

from specctl.orchestrator.contract.dirs import Dirs
from tests.cli import run_main


def test_a_profile_plan_refuses_is_refused(isolated_dirs: Dirs,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    plan_code, _, plan_err = run_main(monkeypatch, capsys, "plan", "-p", "cuda-h100-llama70b")
    code, out, err = run_main(monkeypatch, capsys, "service", "install", "-p",
                              "cuda-h100-llama70b", "--dry-run", "--manager", "systemd")
    assert plan_code != 0 and code == plan_code
    assert err == plan_err and len(err.strip().splitlines()) == 1
    assert out == ""  # no unit printed
    assert not (isolated_dirs.config / "services").exists()


def test_port_reaches_the_unit(monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(monkeypatch, capsys, "service", "install", "-p", "cpu-demo",
                              "--port", "9000", "--dry-run", "--manager", "systemd")
    assert code == 0, err
    start = next(ln for ln in out.splitlines() if ln.startswith("ExecStart="))
    assert start.endswith("up --profile cpu-demo --foreground --port 9000")


def test_host_is_planned_with(monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    """cpu-demo has no API key: beyond loopback it is refused, as `up --host` refuses it."""
    code, out, err = run_main(monkeypatch, capsys, "service", "install", "-p", "cpu-demo",
                              "--host", "0.0.0.0", "--dry-run", "--manager", "systemd")
    assert code == 2 and "api_key_env" in err and out == ""
