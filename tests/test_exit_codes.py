"""One exit-code table everywhere (README): bad input is 2 on every command, in one line. Each
of these gave 1 before issue 54 (a model source, a backend or a file named wrong, a flag
combination refused)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli import run_main

MISSING = "/nonexistent-specctl-folder"
BAD_INPUT = [
    ("drafts", "--target", "bogus:x"),
    ("drafts", "--target", f"{MISSING}/m.gguf"),
    ("profiles", "new", "mine", "bogus"),
    ("backend", "install", "llama.cpq"),
    ("gateway", "--host", "0.0.0.0"),  # no SPECCTL_GATEWAY_API_KEY: refused before it binds
    ("models", "pull", "bogus"),
    ("models", "rm", "bogus"),
    ("plan", f"{MISSING}/m.gguf"),
    ("plan", "-p", "cpu-demo", "--hardware", f"{MISSING}/box.json"),
    ("doctor", "--record", f"{MISSING}/box.json"),
    ("bench", "-p", "cpu-demo", "--plot", "report.txt"),
    ("logs", "cpu-dmeo"),
    ("down", "cpu-dmeo"),
    ("doctor", "--ray", ""),  # was ignored, exit 0
    ("doctor", "--ray", "bogus"),  # was Ray's ValueError, exit 1
    ("profiles", "show", ""),
    ("service", "install", "--profile", ""),
]


@pytest.mark.parametrize("args", BAD_INPUT, ids=" ".join)
def test_bad_input_exits_2_in_one_line(args: tuple[str, ...], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("SPECCTL_GATEWAY_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(monkeypatch, capsys, *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("specctl: error: "), (code, err)
    assert out == "" and "Traceback" not in err
    assert "cpu-demo-q4, cpu-demo, cuda" not in err  # an empty name is no near miss of every one
