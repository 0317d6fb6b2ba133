"""Script-safe output: data on stdout (JSON with --json), progress and notes on stderr, exit codes
as README's table says, strict SPECCTL_* overrides."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli import run_main, specctl
from tests.conftest import HARDWARE
from tests.fake_hf_hub import FakeHub
from tests.hub_repos import LLAMA2, Shape, _file_type, write_header

CPU = str(HARDWARE / "linux_cpu_2c_24g.json")
H100 = str(HARDWARE / "linux_1x_h100_80g.json")
TINY = "tiny-org/Tiny-7B-Chat-GGUF"


@pytest.mark.parametrize("args", [
    ["plan", "-p", "cpu-demo", "--hardware", CPU],
    ["plan", "testbed:qwen-1.5b-q4", "--draft", "ngram", "--hardware", CPU],
    ["status"], ["ps"],
    ["doctor", "--hardware", H100],
    ["profiles"],
    ["drafts", "--target", "testbed:qwen-1.5b-q4", "--backend", "llamacpp"],
    ["models", "list"],
    ["backend", "list"],
    ["tune", "--what-if", "--alpha", "0.8", "--cost", "0.1"],
])
def test_every_reporting_command_prints_json_on_stdout(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        args: list[str]) -> None:
    code, out, err = run_main(monkeypatch, capsys, *args, "--json")
    assert code == 0, err
    json.loads(out)  # all of stdout is the one JSON document
    assert "Traceback" not in err


def test_bench_writes_its_file_with_output_and_prints_json_with_json(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(monkeypatch, capsys, "bench", "--help")
    assert code == 0
    assert "--output FILE" in out and "--json " in out
    code, _, err = run_main(monkeypatch, capsys, "bench", "-p", "cpu-demo", "--json", "x.json")
    assert code == 2 and "x.json" in err  # --json takes no file any more: a usage error


@pytest.fixture
def tiny_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A repo with one small real GGUF file (a header: enough to pull and check)."""
    repo = tmp_path / "hub" / TINY
    repo.mkdir(parents=True)
    name = "Tiny-7B-Chat-Q4_K_M.gguf"
    write_header(repo / name, Shape("llama", "Tiny 7B Chat", "7B", 4, 4, 4, 64, 512), LLAMA2,
                 _file_type(name))
    with FakeHub(tmp_path / "hub") as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
        monkeypatch.setenv("SPECCTL_CACHE_DIR", str(tmp_path / "cache"))
        yield hub


def test_models_pull_prints_the_path_on_stdout_and_progress_on_stderr(
        tiny_hub: FakeHub, tmp_path: Path) -> None:
    """In subprocesses: huggingface_hub reads its cache location once, at import."""
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf-home"), "NO_COLOR": "1"}
    done = specctl("models", "pull", f"hf:{TINY}:Q4_K_M", env=env)
    assert done.returncode == 0, done.stderr
    ref, path = done.stdout.strip().split(": ")
    assert ref == f"hf:{TINY}:Q4_K_M" and Path(path).is_file() and "\n" not in done.stdout.strip()
    assert "pulling" in done.stderr
    listed = specctl("models", "list", "--json", env=env)
    held = {h["ref"]: h for h in json.loads(listed.stdout)}
    assert held[f"hf:{TINY}"]["size_bytes"] == Path(path).stat().st_size
    removed = specctl("models", "rm", f"hf:{TINY}", "--yes", env=env)
    assert removed.returncode == 0, removed.stderr
    assert "removed" in removed.stdout and not Path(path).exists()
    again = specctl("models", "rm", f"hf:{TINY}", "--yes", env=env)
    assert again.returncode == 1 and "not in the Hugging Face cache" in again.stderr


def test_models_pull_that_fetches_nothing_exits_non_zero(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Offline, a quantisation of a model the catalog knows: it used to print "REF: None", 0."""
    code, out, err = run_main(monkeypatch, capsys, "models", "pull",
                              "hf:bartowski/Llama-3.2-1B-Instruct-GGUF:Q3_K_S")
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Q3_K_S" in err  # no size to plan it with
    assert "None" not in err


def test_a_misspelled_override_is_an_error_naming_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SPECCTL_SERVR__PORT", "9000")
    code, out, err = run_main(monkeypatch, capsys, "plan", "-p", "cpu-demo", "--hardware", CPU)
    assert code == 2 and out == ""
    assert err.startswith("specctl: error: $SPECCTL_SERVR__PORT") and "SPECCTL_SERVER__" in err


def test_down_all_with_nothing_running_says_so(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(monkeypatch, capsys, "down", "--all")
    assert code == 0 and out == "" and "nothing running" in err
    code, _, err = run_main(monkeypatch, capsys, "down")
    assert code == 2 and "--all" in err
