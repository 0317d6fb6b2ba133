"""The Hub's failures, mapped once (models/hub.py): unreachable fails fast in one line with no
retry spam, 401 says the token is wrong, 403 on a gated repo says where to request access.
The Hub is tests/fake_hf_hub.py driven by the real `huggingface_hub` client."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from specctl.orchestrator.runtime.servers import free_port
from tests.cli import specctl
from tests.conftest import HARDWARE
from tests.fake_hf_hub import FakeHub, gate
from tests.hub_repos import build

M3 = str(HARDWARE / "macos_m3_ultra_96g.json")
LLAMA70 = "hf:bartowski/Meta-Llama-3.1-70B-Instruct-GGUF:Q4_K_M"
GATED = "bartowski/Llama-3.2-1B-Instruct-GGUF"


@pytest.fixture(scope="module")
def hub_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build(tmp_path_factory.mktemp("hub") / "root")
    gate(root / GATED, "manual")
    return root


@pytest.fixture
def hub(hub_root: Path) -> Iterator[FakeHub]:
    with FakeHub(hub_root, tokens=["hf_granted"], ungranted_tokens=["hf_nogrant"]) as running:
        yield running


def env_for(endpoint: str, tmp_path: Path, token: str | None = None) -> dict[str, str]:
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0", "NO_COLOR": "1",
           "SPECCTL_CACHE_DIR": str(tmp_path / "cache"), "HF_HOME": str(tmp_path / "hf"),
           "COLUMNS": "200"}
    if token:
        env["HF_TOKEN"] = token
    return env


def test_an_unreachable_hub_fails_fast_without_retries(tmp_path: Path) -> None:
    env = env_for(f"http://127.0.0.1:{free_port()}", tmp_path)  # nothing listens there
    done = specctl("drafts", "--target", LLAMA70, "--backend", "llamacpp", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert "Retrying" not in done.stderr and "Retry" not in done.stderr  # was five lines, 24 s
    rows = json.loads(done.stdout)["candidates"]
    note = next(c for c in rows if c["source"] == "hub")
    assert "cannot reach the Hugging Face Hub" in note["reason"]
    plan = specctl("plan", LLAMA70, "--hardware", M3, env=env)
    assert plan.returncode == 0 and "Retry" not in plan.stderr
    assert " ".join(plan.stdout.split()).count("cannot reach the Hugging Face Hub") == 1
    unknown = specctl("plan", "hf:nobody/Unknown-Model-GGUF:Q4_K_M", "--hardware", M3, env=env)
    assert unknown.returncode == 1 and "Retry" not in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1
    assert "cannot reach the Hugging Face Hub" in unknown.stderr


def test_a_wrong_token_is_called_wrong(hub: FakeHub, tmp_path: Path) -> None:
    done = specctl("plan", LLAMA70, "--hardware", M3, "--draft", "ngram",
                   env=env_for(hub.url, tmp_path, "hf_not_a_token"))
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1
    assert "401" in done.stderr and "token" in done.stderr and "wrong" in done.stderr
    assert "try again later" not in done.stderr


@pytest.mark.parametrize(("token", "words"), [
    ("hf_nogrant", ["your token has no access yet", "request access on"]),
    (None, ["is gated", "request access on", "HF_TOKEN"]),
])
def test_a_gated_repo_says_where_to_request_access(hub: FakeHub, tmp_path: Path,
                                                   token: str | None, words: list[str]) -> None:
    done = specctl("models", "pull", f"hf:{GATED}:Q8_0", env=env_for(hub.url, tmp_path, token))
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert all(w in done.stderr for w in words), done.stderr
    assert f"{hub.url}/{GATED}" in done.stderr
