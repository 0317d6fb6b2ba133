"""Plans that say the truth (issue 54): no quantisation invented offline, no context beyond the
model's trained one, and what fitting memory changed (the KV cache's type, the context) on the
plan's main lines, not only under "why"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli import run_main
from tests.ggufs import write_gguf

HUB_MODEL = "hf:Qwen/Qwen2.5-Coder-7B-Instruct-GGUF"  # in the catalog; the Hub is offline here


def plan(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
         *args: str) -> tuple[int, str, str]:
    monkeypatch.setenv("COLUMNS", "200")
    return run_main(monkeypatch, capsys, "plan", *args)


def test_an_unknown_quant_offline_is_refused(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plan(monkeypatch, capsys, f"{HUB_MODEL}:Q9_K")
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, (code, err)
    assert "Q9_K" in err and "GiB" not in err


def test_a_catalog_size_is_said_to_be_an_estimate_on_the_main_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plan(monkeypatch, capsys, f"{HUB_MODEL}:Q5_K_M", "--draft", "none")
    assert code == 0, err
    target = next(ln for ln in out.splitlines() if ln.startswith("target"))
    assert "about" in target and "estimate" in target, target


def test_a_context_beyond_the_trained_one_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = plan(monkeypatch, capsys, f"{HUB_MODEL}:Q4_K_M", "--ctx", "10000000")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (code, err)
    assert "32768" in err and "--ctx" in err


def test_the_default_context_is_held_to_the_models_and_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    model = write_gguf(tmp_path / "short.gguf", context=2048)
    code, out, err = plan(monkeypatch, capsys, str(model), "--draft", "none", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["context"] == 2048
    assert any("trained for 2048" in n for n in data["notices"]), data["notices"]
    code, out, err = plan(monkeypatch, capsys, str(model), "--draft", "none", "--ctx", "4096")
    assert code == 2 and "2048" in err


def test_a_kv_cache_quantised_to_fit_is_on_the_main_lines(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "tight.toml"
    profile.write_text(f'target = "{HUB_MODEL}:Q8_0"\ndraft = "none"\n[server]\ncontext = 32768\n'
                       "[memory]\nbudget_gb = 9\n")
    code, out, err = plan(monkeypatch, capsys, "-p", str(profile))
    assert code == 0, err
    note = next(ln for ln in out.splitlines() if ln.startswith("note"))
    assert "KV cache q8_0, not f16" in note and "context 16384 tokens, not 32768" in note
