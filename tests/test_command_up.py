"""commands/up.py on its own: a typed outcome, nothing printed, the question through a callback.

llama.cpp is not installed here (an empty cache dir, no llama-server on PATH), so `up -p
cpu-demo` has a build and a test model to fetch: the work is said through `say`, and when `ask`
answers no, the outcome is Declined with nothing built or fetched (tripwires would raise)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from specctl.orchestrator.app import App
from specctl.orchestrator.commands import up as command
from specctl.orchestrator.config.adhoc import Flags
from specctl.orchestrator.contract import registry
from specctl.orchestrator.runtime import provision
from tests.test_up_once import small_pair


def test_a_no_is_a_declined_outcome_before_any_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPECCTL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")

    def tripped(*_a: object, **_k: object) -> None:
        raise AssertionError("work began after a no")

    monkeypatch.setattr(provision, "install", tripped)
    monkeypatch.setattr(provision, "testbed_models", tripped)
    said: list[str] = []
    asked: list[bool] = []

    def ask() -> bool:
        asked.append(True)
        return False

    done = command.up(App.from_env(), command.UpRequest("cpu-demo", Flags()), ask, said.append)
    assert isinstance(done, command.Declined)
    assert asked == [True]
    assert [f"up will {w}" for w in done.work] == said
    assert any("build llama.cpp" in w for w in done.work)
    assert any("test model" in w for w in done.work)
    assert capsys.readouterr() == ("", "")  # a command never prints
    assert not (tmp_path / "cache" / "backends").exists()


def test_nothing_to_provide_asks_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything here (llama.cpp as its recorded dialect says, the models on disk): no
    question, nothing provided, the plan as resolved."""
    cls = registry.adapter_classes()["llamacpp"]
    monkeypatch.setattr(cls, "probe", lambda self: replace(self.assumed(), assumed=False,
                                                           path="/opt/llama/llama-server"))

    def ask() -> bool:
        raise AssertionError("asked with nothing to do")

    got = command.prepare(App.from_env(), command.UpRequest(str(small_pair(tmp_path)), Flags()),
                          ask, lambda _line: None)
    assert not isinstance(got, command.Declined)
    assert got.needs.empty and got.plan.target.path is not None
