"""draft = "auto" on llama.cpp finds what the target carries or has published beside it: MTP
layers in the target GGUF (`<arch>.nextn_predict_layers`), an EAGLE-3 head converted to GGUF,
an MTP sidecar file in the target's repo; each judged by the backend's methods, ranked with the
draft models, the reason shown, and the argv made of flags the build has.

The Hub is tests/fake_hf_hub.py, a STAND-IN (no network here) that the real `huggingface_hub`
client talks to; the repos (tests/hub_repos.py) serve real GGUF metadata headers.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specctl.adapters.llamacpp import LlamaCpp
from tests.cli import specctl
from tests.fake_hf_hub import FakeHub
from tests.hub_repos import (
    EAGLE3_GGUF,
    EAGLE3_TARGET,
    MTP_TARGET,
    SIDECAR_TARGET,
    add_spec_heads,
    build,
)
from tests.test_hub import M3_ULTRA, env_for


@pytest.fixture(scope="module")
def hub_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return add_spec_heads(build(tmp_path_factory.mktemp("hub") / "root"))


@pytest.fixture
def hub(hub_root: Path) -> Iterator[FakeHub]:
    with FakeHub(hub_root) as running:
        yield running


def plan_of(tmp_path: Path, target: str, env: dict[str, str]) -> dict[str, Any]:
    profile = tmp_path / "p.toml"
    profile.write_text(f'target = "{target}"\ndraft = "auto"\nbackend = ["llamacpp"]\n')
    done = specctl("plan", "--profile", str(profile), "--hardware", M3_ULTRA, "--json", env=env)
    assert done.returncode == 0, done.stderr
    got: dict[str, Any] = json.loads(done.stdout)
    return got


def candidates(target: str, env: dict[str, str]) -> dict[str, dict[str, Any]]:
    done = specctl("drafts", "--target", target, "--backend", "llamacpp", "--json", env=env)
    assert done.returncode == 0, done.stderr
    return {c["model"]: c for c in json.loads(done.stdout)["candidates"]}


def flags_known(argv: list[str]) -> None:
    """Every flag is one the build lists in its --help (the same check launch makes)."""
    flags = LlamaCpp().assumed().flags
    unknown = [a for a in argv if a.startswith("-") and not a[1:].isdigit() and a not in flags]
    assert not unknown, unknown


def test_mtp_layers_in_the_target_gguf_are_offered_and_picked(hub: FakeHub,
                                                              tmp_path: Path) -> None:
    repo = MTP_TARGET[0]
    target = f"hf:{repo}:Q4_K_M"
    env = env_for(hub, tmp_path)
    found = candidates(target, env)
    mtp = found["mtp"]
    assert mtp["compatible"] and mtp["method"] == "mtp"
    assert "1 MTP layer(s) (GGUF nextn_predict_layers)" in mtp["reason"]
    got = plan_of(tmp_path, target, env)
    assert got["method"] == "mtp" and got["draft"] is None
    reasons = " ".join(got["reasons"])
    assert 'Draft "auto"' in reasons and "nextn_predict_layers" in reasons
    argv = got["argv"]
    pairs = set(itertools.pairwise(argv))
    assert ("--spec-type", "draft-mtp") in pairs and ("--spec-draft-n-max", "1") in pairs
    assert ("-hf", f"{repo}:Q4_K_M") in pairs
    assert "-md" not in argv and "-hfd" not in argv
    flags_known(argv)


def test_an_eagle3_gguf_head_published_for_the_target_is_offered(hub: FakeHub,
                                                                 tmp_path: Path) -> None:
    env = env_for(hub, tmp_path)
    target = f"hf:{EAGLE3_TARGET}:Q4_K_M"
    found = candidates(target, env)
    head = found[f"hf:{EAGLE3_GGUF[0]}:Q8_0"]
    assert head["compatible"] and head["method"] == "eagle3", head
    assert "EAGLE-3 head trained for" in head["reason"]
    # ranked with the draft models of the same vocabulary, above them
    order = [c for c in found.values() if c["compatible"]]
    assert order[0]["model"] == head["model"]
    got = plan_of(tmp_path, target, env)
    assert got["method"] == "eagle3"
    argv = got["argv"]
    pairs = set(itertools.pairwise(argv))
    assert ("--spec-type", "draft-eagle3") in pairs
    assert ("-hfd", f"{EAGLE3_GGUF[0]}:Q8_0") in pairs
    flags_known(argv)
    # the same head is not offered for another model
    other = candidates("hf:bartowski/Meta-Llama-3.1-70B-Instruct-GGUF:Q4_K_M", env)
    assert not other.get(head["model"], {"compatible": False})["compatible"]


def test_an_mtp_sidecar_in_the_targets_repo_is_offered(hub: FakeHub, tmp_path: Path) -> None:
    repo = SIDECAR_TARGET[0]
    env = env_for(hub, tmp_path)
    found = candidates(f"hf:{repo}:Q4_K_M", env)
    side = found[f"hf:{repo}:MTP"]
    assert side["compatible"] and side["method"] == "mtp", side
    assert "target's own repo" in side["reason"]
    got = plan_of(tmp_path, f"hf:{repo}:Q4_K_M", env)
    assert got["method"] == "mtp"
    pairs = set(itertools.pairwise(got["argv"]))
    assert ("--spec-type", "draft-mtp") in pairs
    assert ("-hfd", repo) in pairs  # llama-server finds the sidecar in the repo itself
    assert got["memory"]["draft_gib"] == pytest.approx(410_000_000 / 2**30, rel=0.05)
    flags_known(got["argv"])


def test_the_model_files_of_a_repo_leave_its_sidecars_out(hub: FakeHub, tmp_path: Path) -> None:
    """`hf:repo` with one quantisation and a sidecar is still one model file."""
    repo = SIDECAR_TARGET[0]
    got = plan_of(tmp_path, f"hf:{repo}", env_for(hub, tmp_path))
    assert got["target"]["size_gib"] == pytest.approx(5_100_000_000 / 2**30, rel=0.05)
