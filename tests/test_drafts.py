"""Draft selection on the real testbed GGUF files, and `draft = "auto"` in a plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specctl.orchestrator.app import App
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.models import catalog, testbed
from specctl.orchestrator.planning import drafts, search
from tests.cli import specctl


def _tb(key: str) -> Path:
    return testbed.path_of(key, Dirs.from_env().models)


@pytest.mark.server
def test_drafts_command_ranks_the_qwen_draft_and_rejects_the_others_with_reasons(
        tmp_path: Path) -> None:
    folder = tmp_path / "gguf"
    folder.mkdir()
    for key in ("qwen-0.5b-q4", "smollm2-135m", "gemma3-270m"):
        (folder / _tb(key).name).symlink_to(_tb(key))
    done = specctl("drafts", "--target", str(_tb("qwen-1.5b-f16")), "--models-dir",
                   str(folder), "--json")
    assert done.returncode == 0, done.stderr
    cands = json.loads(done.stdout)["candidates"]
    mine = {Path(c["path"]).name: c for c in cands if c["path"] and
            Path(c["path"]).parent == folder}
    qwen = mine[_tb("qwen-0.5b-q4").name]
    assert qwen["compatible"] and qwen["score"] > 1.0
    assert mine[_tb("smollm2-135m").name]["compatible"] is False
    assert "vocab sizes differ by 102784" in mine[_tb("smollm2-135m").name]["reason"]
    assert "vocab type differs" in mine[_tb("gemma3-270m").name]["reason"]
    assert cands[0]["compatible"]
    scores = [c["score"] for c in cands if c["compatible"]]
    assert scores == sorted(scores, reverse=True)
    for c in cands:
        assert {"model", "path", "compatible", "reason", "score"} <= set(c)


def test_catalog_pairs_are_offered_for_a_model_not_on_disk() -> None:
    app = App.from_env()
    backend = app.backends()["llamacpp"]
    target = app.resolver().resolve("hf:bartowski/Meta-Llama-3.1-70B-Instruct-GGUF:Q4_K_M")
    ranked = app.draft_candidates(target, backend)
    ok = [c.name for c in ranked if c.compatible]
    assert "Llama-3.2-1B-Instruct" in ok and "Llama-3.2-3B-Instruct" in ok
    qwen = next(c for c in ranked if c.name == "Qwen2.5-0.5B-Instruct")
    assert not qwen.compatible and "vocab" in qwen.reason


def known_as(candidate: drafts.Candidate, name: str) -> bool:
    """The candidate is the catalog's `name` (a file on disk says its own name, e.g. the
    testbed's "Qwen2.5 Coder 0.5B Instruct AWQ")."""
    known = catalog.lookup(candidate.name)
    return known is not None and known.name == name


def test_vllm_rule_refuses_the_padded_qwen_vocab_but_llamacpp_accepts_it() -> None:
    app = App.from_env()
    target = app.resolver().resolve("hf:Qwen/Qwen2.5-Coder-32B-Instruct", "BF16")
    for name, expect in (("vllm", False), ("llamacpp", True)):
        ranked = app.draft_candidates(target, app.backends()[name])
        small = next(c for c in ranked if known_as(c, "Qwen2.5-Coder-0.5B-Instruct") and (
            name == "llamacpp" or c.path is None))  # vLLM: the Hub's, not a GGUF on disk
        assert small.compatible is expect, small.reason
    vllm_small = next(c for c in app.draft_candidates(target, app.backends()["vllm"])
                      if known_as(c, "Qwen2.5-Coder-0.5B-Instruct") and c.path is None)
    assert "152064" in vllm_small.reason and "151936" in vllm_small.reason


def test_eagle3_heads_only_for_their_target_on_vllm() -> None:
    app = App.from_env()
    target = app.resolver().resolve("hf:meta-llama/Llama-3.1-8B-Instruct", "BF16")
    ranked = app.draft_candidates(target, app.backends()["vllm"])
    head = next(c for c in ranked if c.name == "EAGLE3-LLaMA3.1-Instruct-8B")
    assert head.compatible and head.method == "eagle3"
    other = next(c for c in ranked if c.name == "EAGLE3-LLaMA3.3-Instruct-70B")
    assert not other.compatible


@pytest.mark.server
def test_draft_auto_picks_the_qwen_draft_on_disk_and_says_why(tmp_path: Path) -> None:
    profile = tmp_path / "auto.toml"
    profile.write_text('target = "testbed:qwen-1.5b-f16"\ndraft = "auto"\nk = 3\n')
    plan = App.from_env().resolve(str(profile)).plan
    assert plan.draft is not None and plan.draft.path == _tb("qwen-0.5b-q4")
    assert any(r.startswith('Draft "auto"') for r in plan.reasons)


def test_draft_auto_without_a_draft_on_disk_picks_a_known_one_to_download(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline, with nothing on disk: the catalog's draft, to be fetched before `up` serves."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "empty-ollama"))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SPECCTL_CACHE_DIR", str(tmp_path / "cache"))
    app = App.from_env()
    target = app.resolver().resolve("hf:bartowski/Meta-Llama-3.1-70B-Instruct-GGUF:Q4_K_M")
    found = app.draft_candidates(target, app.backends()["llamacpp"],
                                 methods=frozenset({"draft"}), room=60 << 30)
    pick = search.pick(target, "llamacpp", found)
    assert pick.method == "draft" and pick.ref is not None
    assert pick.ref.startswith("hf:bartowski/Llama-3.2") and "to download" in pick.why
    ranked = app.draft_candidates(target, app.backends()["llamacpp"])
    assert drafts.best_on_disk(ranked) is None
    assert any(c.source == "hub" and "not searched" in c.reason for c in ranked)  # offline
