"""`doctor` (issue 54): "what would run here" lists only what can run here (a backend that is
here or that `up` installs, a plan that fits one machine); --hardware keeps the section and
says the recorded machine's backends are assumed; a broken SPECCTL_LLAMA_SERVER is a finding;
an unreachable --ray address is one line before anything else is printed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specctl.orchestrator.contract import registry
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.runtime import provision
from tests.cli import run_main
from tests.conftest import HARDWARE


def doctor_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                *args: str) -> dict[str, Any]:
    code, out, err = run_main(monkeypatch, capsys, "doctor", "--json", *args)
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def test_what_would_run_here_can_run_here(monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    data = doctor_json(monkeypatch, capsys)
    here = {b["name"] for b in data["backends"] if b["installed"]}
    installs = {name for name, backend in registry.registry(Dirs.from_env()).items()
                if provision.installable(backend)}
    verdicts = {v["profile"]: v for v in data["profiles"]}
    assert verdicts["dgx2-deepseek-r1"]["runs"] is False  # a cluster is not this machine
    assert "cluster" in verdicts["dgx2-deepseek-r1"]["line"]
    for v in verdicts.values():
        if v["runs"]:
            assert v["backend"] in here | installs, v
        else:
            assert v["line"].startswith("no: "), v


def test_a_recorded_machine_keeps_the_section_and_assumes_its_backends(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    recorded = str(HARDWARE / "linux_1x_h100_80g.json")
    data = doctor_json(monkeypatch, capsys, "--hardware", recorded)
    assert data["profiles"] and {b["state"] for b in data["backends"]} == {"assumed"}
    assert any(v["runs"] for v in data["profiles"])
    code, out, _ = run_main(monkeypatch, capsys, "doctor", "--hardware", recorded)
    assert code == 0 and "what would run there" in out and "assumed" in out


def test_a_broken_llama_server_setting_is_a_finding(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SPECCTL_LLAMA_SERVER", "/nonexistent/llama-server")
    data = doctor_json(monkeypatch, capsys)
    llamacpp = next(b for b in data["backends"] if b["name"] == "llamacpp")
    assert llamacpp["state"] == "broken" and "SPECCTL_LLAMA_SERVER" in llamacpp["line"]
    code, out, err = run_main(monkeypatch, capsys, "doctor")
    assert code == 0 and "Traceback" not in err and "broken: $SPECCTL_LLAMA_SERVER" in out


def test_an_unreachable_ray_address_is_one_line_first(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(monkeypatch, capsys, "doctor", "--ray", "127.0.0.1:1")
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, (out, err)
    assert "127.0.0.1:1" in err
