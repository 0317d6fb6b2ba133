"""draft = "auto" when a candidate the catalog names cannot be read on the Hub (renamed, deleted,
gated, a mirror without it): that candidate is one rejection with the Hub's reason, shown by
`drafts` and `plan`, and the ranking goes on to the next (before, the whole plan failed with
"no Hugging Face repo ..." or "... is gated").

The Hub is tests/fake_hf_hub.py, the stand-in the real `huggingface_hub` client talks to. On
llama.cpp, Qwen's GGUF of Qwen2.5-Coder-7B ranks the catalog's drafts: bartowski's Coder 0.5B
first, then bartowski's Qwen2.5 0.5B. On vLLM, the catalog's best draft for Llama 3.1 8B is the
EAGLE-3 head yuhuili/EAGLE3-LLaMA3.1-Instruct-8B; the next is Llama 3.2 1B (the Hub's search).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from specctl.orchestrator.errors import ModelError
from specctl.orchestrator.models.hub import Hub
from tests.cli import specctl
from tests.conftest import HARDWARE
from tests.fake_hf_hub import STUB_SUFFIX, FakeHub, gate
from tests.hub_repos import add_coder, add_llama_family, build

GRANTED, UNGRANTED = "hf_granted", "hf_nogrant"
CODER = "hf:Qwen/Qwen2.5-Coder-7B-Instruct-GGUF:Q4_K_M"
CODER_DRAFT = "hf:bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q8_0"
NEXT_DRAFT = "hf:bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q8_0"
M3_ULTRA = str(HARDWARE / "macos_m3_ultra_96g.json")
LLAMA = "hf:meta-llama/Llama-3.1-8B-Instruct"
HEAD = "hf:yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
ONE_B = "hf:meta-llama/Llama-3.2-1B-Instruct"
H100 = str(HARDWARE / "linux_1x_h100_80g.json")


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return add_llama_family(add_coder(build(tmp_path_factory.mktemp("hub") / "root")))


@pytest.fixture
def root(repos: Path, tmp_path: Path) -> Path:
    """This test's own copy of the Hub's repos, to delete or gate one in."""
    return Path(shutil.copytree(repos, tmp_path / "root", symlinks=True))


def run(root: Path, tmp_path: Path, target: str, backend: str, hardware: str,
        token: str | None = None) -> tuple[dict[str, Any], dict[str, dict[str, Any]], str]:
    """`plan --json` and `drafts --json` against the stand-in Hub: the plan, the candidates by
    reference, and the plan's line on the draft it picked."""
    profile = tmp_path / "p.toml"
    profile.write_text(f'target = "{target}"\ndraft = "auto"\nbackend = ["{backend}"]\n')
    with FakeHub(root, tokens=[GRANTED], ungranted_tokens=[UNGRANTED]) as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0",
               "HF_HOME": str(tmp_path / "hf-home"), "SPECCTL_CACHE_DIR": str(tmp_path / "c"),
               "HF_HUB_DISABLE_TELEMETRY": "1", "NO_COLOR": "1"}
        env.pop("HF_TOKEN", None)
        if token:
            env["HF_TOKEN"] = token
        planned = specctl("plan", "-p", str(profile), "--hardware", hardware, "--json", env=env)
        listed = specctl("drafts", "--target", target, "--backend", backend, "--json", env=env)
    assert planned.returncode == 0, planned.stderr
    assert listed.returncode == 0, listed.stderr
    plan = json.loads(planned.stdout)
    found = {c["model"]: c for c in json.loads(listed.stdout)["candidates"]}
    why = next(r for r in plan["reasons"] if r.startswith('Draft "auto"'))
    return plan, found, why


def coder(root: Path, tmp_path: Path, token: str | None = None) -> tuple[
        dict[str, Any], dict[str, dict[str, Any]], str]:
    return run(root, tmp_path, CODER, "llamacpp", M3_ULTRA, token)


def test_with_every_candidate_on_the_hub_the_catalogs_best_is_picked(root: Path,
                                                                     tmp_path: Path) -> None:
    plan, found, why = coder(root, tmp_path)
    assert plan["draft"]["ref"] == CODER_DRAFT and "passed over" not in why
    assert found[CODER_DRAFT]["compatible"] and found[NEXT_DRAFT]["compatible"]


def test_a_deleted_draft_is_one_rejection_and_the_next_is_picked(root: Path,
                                                                 tmp_path: Path) -> None:
    shutil.rmtree(root / "bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF")  # or renamed, or a
    plan, found, why = coder(root, tmp_path)  # mirror without it: the Hub has no such repo
    assert plan["method"] == "draft" and plan["draft"]["ref"] == NEXT_DRAFT
    gone = found[CODER_DRAFT]
    assert not gone["compatible"] and gone["score"] == 0
    assert gone["reason"].startswith("cannot be read from the Hub: no Hugging Face repo "
                                     "bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF")
    assert found[NEXT_DRAFT]["compatible"]
    assert "Qwen2.5-0.5B-Instruct" in why
    assert f"passed over {CODER_DRAFT}: no Hugging Face repo" in why


@pytest.mark.parametrize(("token", "words"), [
    (None, "is gated: request access on"),  # 401: no token
    (UNGRANTED, "is gated and your token has no access yet"),  # 403: a token without access
])
def test_a_gated_draft_is_one_rejection_and_the_next_is_picked(
        root: Path, tmp_path: Path, token: str | None, words: str) -> None:
    gate(root / "bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF")
    plan, found, why = coder(root, tmp_path, token)
    assert plan["draft"]["ref"] == NEXT_DRAFT
    gated = found[CODER_DRAFT]
    assert not gated["compatible"]
    assert gated["reason"].startswith(
        f"cannot be read from the Hub: bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF {words}")
    assert f"passed over {CODER_DRAFT}" in why and words in why


def test_with_access_the_gated_draft_is_picked(root: Path, tmp_path: Path) -> None:
    gate(root / "bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF")
    plan, found, _ = coder(root, tmp_path, GRANTED)
    assert plan["draft"]["ref"] == CODER_DRAFT and found[CODER_DRAFT]["compatible"]


def test_a_deleted_head_on_vllm_is_one_rejection_and_a_draft_model_is_picked(
        root: Path, tmp_path: Path) -> None:
    plan, found, _ = run(root, tmp_path, LLAMA, "vllm", H100)
    assert plan["method"] == "eagle3" and plan["draft"]["ref"] == HEAD
    shutil.rmtree(root / "yuhuili")
    (tmp_path / "again").mkdir()
    plan, found, why = run(root, tmp_path / "again", LLAMA, "vllm", H100)
    assert plan["method"] == "draft" and plan["draft"]["ref"] == ONE_B
    assert not found[HEAD]["compatible"] and found[ONE_B]["compatible"]
    assert found[HEAD]["reason"].startswith("cannot be read from the Hub: no Hugging Face repo")
    assert f"passed over {HEAD}: no Hugging Face repo" in why


def test_a_repo_the_hub_does_not_have_leaves_the_hub_reachable(
        root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 401/404 is the Hub's answer, not its silence: the next repo is still asked (before, the
    error marked the Hub unreachable for the rest of the command, so every later candidate was
    planned from the catalog)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # the suite runs offline
    shutil.rmtree(root / "yuhuili")
    with FakeHub(root) as running:
        hub = Hub(tmp_path / "hub", endpoint=running.url)
        with pytest.raises(ModelError, match="no Hugging Face repo"):
            hub.repo("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
        assert hub.unreachable == ""
        assert hub.repo("meta-llama/Llama-3.2-1B-Instruct").name.endswith("1B-Instruct")


def test_a_repo_without_the_catalogs_quant_gives_its_best(root: Path, tmp_path: Path) -> None:
    """A mirror with Q4_K_M and no Q8_0: the draft is taken at Q4_K_M, the rule Hub search
    uses (before: rejected, "has no Q8_0 file; choose one of Q4_K_M", and the next taken)."""
    repo = root / "bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF"
    stub = "Qwen2.5-Coder-0.5B-Instruct-{}.gguf" + STUB_SUFFIX  # the stand-in's file sidecar
    (repo / stub.format("Q8_0")).rename(repo / stub.format("Q4_K_M"))
    plan, found, why = coder(root, tmp_path)
    took = CODER_DRAFT.replace(":Q8_0", ":Q4_K_M")
    assert plan["draft"]["ref"] == took and "passed over" not in why
    assert found[took]["compatible"] and "took Q4_K_M" in found[took]["reason"]
