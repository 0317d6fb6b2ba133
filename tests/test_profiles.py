"""Profiles: shipped ones load, typos name the key and file, env overrides, user shadowing."""

from __future__ import annotations

from pathlib import Path

import pytest

from specctl.orchestrator.config import profiles
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.errors import ProfileError

SHIPPED = ("cpu-demo", "cpu-demo-q4", "cuda-h100-llama70b", "cuda-rtx4090-qwen-coder",
           "m3-ultra-70b")
MINIMAL = 'target = "hf:org/model"\n'


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_available_lists_the_shipped_profiles(isolated_dirs: Dirs) -> None:
    found = profiles.available(isolated_dirs)
    assert set(SHIPPED) <= set(found)
    for name in SHIPPED:
        assert found[name].parent == profiles.shipped_dir()
        assert found[name].name == f"{name}.toml"


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_profile_loads(name: str, isolated_dirs: Dirs) -> None:
    profile = profiles.load(name, isolated_dirs)
    assert profile.name == name
    assert profile.target
    assert profile.description
    assert profile.backend, "shipped profiles name their backend"


def test_shipped_profile_values(isolated_dirs: Dirs) -> None:
    h100 = profiles.load("cuda-h100-llama70b", isolated_dirs)
    assert h100.backend == ["vllm"]
    assert h100.server.port == 8000
    assert h100.server.context == 16384
    assert h100.server.parallel == 8
    assert h100.memory.gpu_utilization == 0.9
    m3 = profiles.load("m3-ultra-70b", isolated_dirs)
    assert m3.k == "auto"
    assert m3.server.host == "127.0.0.1"  # default
    assert m3.memory.cache_type == "auto"
    assert not m3.draftless


def test_misspelled_key_names_the_key_and_the_file(tmp_path: Path, isolated_dirs: Dirs) -> None:
    path = _write(tmp_path / "typo.toml", MINIMAL + "[server]\nprot = 8080\n")
    with pytest.raises(ProfileError) as info:
        profiles.load(str(path), isolated_dirs)
    message = str(info.value)
    assert "server.prot" in message
    assert str(path) in message
    assert "\n" not in message


def test_misspelled_top_level_key(tmp_path: Path, isolated_dirs: Dirs) -> None:
    path = _write(tmp_path / "typo.toml", MINIMAL + "draft_modle = \"x\"\n")
    with pytest.raises(ProfileError, match="'draft_modle'") as info:
        profiles.load(str(path), isolated_dirs)
    assert str(path) in str(info.value)


def test_malformed_toml(tmp_path: Path, isolated_dirs: Dirs) -> None:
    path = _write(tmp_path / "broken.toml", 'target = "hf:org/model\n[server\n')
    with pytest.raises(ProfileError, match="not valid TOML") as info:
        profiles.load(str(path), isolated_dirs)
    assert str(path) in str(info.value)


def test_wrong_type_names_the_field(tmp_path: Path, isolated_dirs: Dirs) -> None:
    path = _write(tmp_path / "bad.toml", MINIMAL + "[server]\nport = \"eighty\"\n")
    with pytest.raises(ProfileError, match=r"'server\.port'"):
        profiles.load(str(path), isolated_dirs)


def test_missing_profile_file(tmp_path: Path, isolated_dirs: Dirs) -> None:
    with pytest.raises(ProfileError, match="not found"):
        profiles.load(str(tmp_path / "absent.toml"), isolated_dirs)


def test_unknown_name_suggests_close_names(isolated_dirs: Dirs) -> None:
    with pytest.raises(ProfileError) as info:
        profiles.load("cpu", isolated_dirs)
    message = str(info.value)
    assert "no profile named 'cpu'" in message
    assert "did you mean" in message
    assert "cpu-demo" in message
    assert "cpu-demo-q4" in message


def test_unknown_name_with_a_typo_suggests_the_profile(isolated_dirs: Dirs) -> None:
    with pytest.raises(ProfileError) as info:
        profiles.load("m3-ultra-07b", isolated_dirs)
    assert "did you mean m3-ultra-70b" in str(info.value)


def test_unknown_name_without_anything_close(isolated_dirs: Dirs) -> None:
    with pytest.raises(ProfileError, match="`specctl profiles` lists them") as info:
        profiles.load("zzzz", isolated_dirs)
    assert "did you mean" not in str(info.value)


def test_env_overrides_port_and_k(monkeypatch: pytest.MonkeyPatch, isolated_dirs: Dirs) -> None:
    monkeypatch.setenv("SPECCTL_SERVER__PORT", "9123")
    monkeypatch.setenv("SPECCTL_K", "5")
    profile = profiles.load("cpu-demo", isolated_dirs)
    assert profile.server.port == 9123
    assert profile.k == 5
    assert profile.server.context == 4096  # the rest of [server] is kept


def test_env_overrides_backend_list(monkeypatch: pytest.MonkeyPatch, isolated_dirs: Dirs) -> None:
    monkeypatch.setenv("SPECCTL_BACKEND", "vllm, llamacpp")
    assert profiles.load("cpu-demo", isolated_dirs).backend == ["vllm", "llamacpp"]


def test_env_override_k_auto(monkeypatch: pytest.MonkeyPatch, isolated_dirs: Dirs) -> None:
    monkeypatch.setenv("SPECCTL_K", "auto")
    assert profiles.load("cpu-demo", isolated_dirs).k == "auto"


def test_without_env_the_file_values_stay(isolated_dirs: Dirs) -> None:
    profile = profiles.load("cpu-demo", isolated_dirs)
    assert profile.server.port == 8090
    assert profile.k == "auto"


def test_env_override_k_zero_is_rejected(monkeypatch: pytest.MonkeyPatch,
                                         isolated_dirs: Dirs) -> None:
    monkeypatch.setenv("SPECCTL_K", "0")
    with pytest.raises(ProfileError, match="'k'"):
        profiles.load("cpu-demo", isolated_dirs)


@pytest.mark.parametrize("k", ["0", "33", "-1", '"many"'])
def test_bad_k_in_file_is_rejected(k: str, tmp_path: Path, isolated_dirs: Dirs) -> None:
    path = _write(tmp_path / "k.toml", MINIMAL + f"k = {k}\n")
    with pytest.raises(ProfileError, match="'k") as info:  # 'k' or 'k.int' (union member)
        profiles.load(str(path), isolated_dirs)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("k", [1, 8, 32])
def test_k_in_range_is_accepted(k: int, tmp_path: Path, isolated_dirs: Dirs) -> None:
    path = _write(tmp_path / "k.toml", MINIMAL + f"k = {k}\n")
    assert profiles.load(str(path), isolated_dirs).k == k


def test_user_profile_shadows_shipped(isolated_dirs: Dirs) -> None:
    user = _write(isolated_dirs.profiles / "cpu-demo.toml",
                  'description = "mine"\ntarget = "hf:org/model"\n')
    found = profiles.available(isolated_dirs)
    assert found["cpu-demo"] == user
    assert found["m3-ultra-70b"].parent == profiles.shipped_dir()
    profile = profiles.load("cpu-demo", isolated_dirs)
    assert profile.description == "mine"
    assert profile.target == "hf:org/model"
    assert profile.name == "cpu-demo"


def test_user_only_profile_is_listed_and_loads(isolated_dirs: Dirs) -> None:
    _write(isolated_dirs.profiles / "my-box.toml", MINIMAL + "[server]\nport = 9999\n")
    assert "my-box" in profiles.available(isolated_dirs)
    assert profiles.load("my-box", isolated_dirs).server.port == 9999


def test_profile_name_comes_from_the_file_unless_set(tmp_path: Path, isolated_dirs: Dirs) -> None:
    unnamed = _write(tmp_path / "box.toml", MINIMAL)
    named = _write(tmp_path / "other.toml", 'name = "custom"\n' + MINIMAL)
    assert profiles.load(str(unnamed), isolated_dirs).name == "box"
    assert profiles.load(str(named), isolated_dirs).name == "custom"


@pytest.mark.parametrize("draft", ["ngram", "none"])
def test_draftless(draft: str) -> None:
    assert profiles.Profile(target="x", draft=draft).draftless
    assert not profiles.Profile(target="x", draft="hf:org/draft").draftless
