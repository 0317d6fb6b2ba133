"""Engine arguments passed through: a profile's `extra_args` and `-- ARGS` on the command line,
for every backend, each checked by its adapter against the engine's recorded flags; refused in
one line when unknown or when specctl sets it from the plan (host, port, API key, model, draft).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specctl.adapters.ollama import Ollama
from specctl.orchestrator.errors import BackendError
from specctl.orchestrator.models.resolve import Resolver
from specctl.orchestrator.runtime import provision
from tests.cli import run_main
from tests.conftest import HARDWARE

CPU = str(HARDWARE / "linux_cpu_2c_24g.json")
H100 = str(HARDWARE / "linux_1x_h100_80g.json")
M3 = str(HARDWARE / "macos_m3_ultra_96g.json")
# (profile, machine, arguments the engine takes, one it does not, one specctl owns)
CASES = [
    ("cpu-demo", CPU, ["--jinja", "--chat-template", "chatml"], "--no-such-flag", "--port"),
    ("cpu-demo", CPU, ["--temp", "-0.5"], "--speculative", "--draft-max"),
    ("cuda-h100-llama70b", H100, ["--enable-prefix-caching", "--enable-auto-tool-choice",
                                  "--tool-call-parser", "hermes"], "--no-such-flag",
     "--speculative-config.method"),
    ("m3-ultra-70b-mlx", M3, ["--chat-template-args", '{"enable_thinking":false}'],
     "--no-such-flag", "--draft-model"),
    ("cuda-h100-tgi-medusa", H100, ["--max-concurrent-requests", "64"], "--no-such-flag",
     "--hostname"),
]


def plan(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
         *args: str) -> tuple[int, dict[str, Any] | None, str]:
    code, out, err = run_main(monkeypatch, capsys, "plan", "--json", *args)
    return code, json.loads(out) if code == 0 else None, err


@pytest.mark.parametrize(("profile", "machine", "good", "unknown", "owned"), CASES)
def test_engine_arguments_pass_through_checked(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], profile: str,
        machine: str, good: list[str], unknown: str, owned: str) -> None:
    code, got, err = plan(monkeypatch, capsys, "-p", profile, "--hardware", machine, "--", *good)
    assert code == 0, err
    assert got is not None and got["extra_args"] == good
    argv = got["argv"]
    at = next(i for i in range(len(argv)) if argv[i:i + len(good)] == good)
    assert at > 0  # given to the engine as written, in order
    for bad, words in ((unknown, ["has no", unknown]), (owned, ["specctl sets it"])):
        code, _, err = plan(monkeypatch, capsys, "-p", profile, "--hardware", machine, "--", bad,
                            "1")
        assert code == 1 and len(err.strip().splitlines()) == 1, err
        assert all(w in err for w in words), err


def test_a_profiles_extra_args_and_the_command_lines_add_up(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    path = tmp_path / "jinja.toml"
    path.write_text('target = "testbed:qwen-1.5b-q4"\ndraft = "ngram"\nextra_args = ["--jinja"]\n')
    code, got, err = plan(monkeypatch, capsys, "-p", str(path), "--hardware", CPU)
    assert code == 0 and got is not None and got["argv"][-1] == "--jinja", err
    path.write_text('target = "testbed:qwen-1.5b-q4"\nextra_args = ["--host", "0.0.0.0"]\n')
    code, _, err = plan(monkeypatch, capsys, "-p", str(path), "--hardware", CPU)
    assert code == 1 and "--host" in err and "specctl sets it" in err


def test_engine_arguments_need_the_double_dash(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(monkeypatch, capsys, "plan", "-p", "cpu-demo", "stray")
    assert code == 2 and "after `--`" in err


def test_ollama_takes_no_engine_arguments() -> None:
    with pytest.raises(BackendError, match="Modelfile"):
        Ollama().extra_args(("--anything",), Ollama().assumed())


def test_up_refuses_a_bad_argument_before_any_build(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    began: list[str] = []
    monkeypatch.setattr(provision, "install", lambda *_a, **_k: began.append("build"))
    monkeypatch.setattr(Resolver, "fetch", lambda *_a, **_k: began.append("download"))
    monkeypatch.setenv("SPECCTL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    code, out, err = run_main(monkeypatch, capsys, "up", "-p", "cpu-demo", "--yes", "--",
                              "--no-such-flag")
    assert code == 1 and out == "" and began == []
    assert len(err.strip().splitlines()) == 1 and "--no-such-flag" in err
