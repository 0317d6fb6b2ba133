"""The open world: plans, drafts and pulls for models on the Hugging Face Hub.

The Hub here is tests/fake_hf_hub.py, a STAND-IN (huggingface.co cannot be reached from this
machine) that the real `huggingface_hub` client talks to over HTTP; its repos (tests/hub_repos.py)
list the real file sizes and serve real GGUF metadata headers. `specctl` runs as a subprocess
with HF_ENDPOINT pointing at it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.models import digest, testbed
from specctl.orchestrator.runtime.servers import free_port
from specctl.orchestrator.sizes import GIB
from tests.cli import specctl
from tests.conftest import HARDWARE
from tests.fake_hf_hub import FakeHub
from tests.hub_repos import add_eagle3, add_file, add_medusa, build

M3_ULTRA = str(HARDWARE / "macos_m3_ultra_96g.json")
SEED = ('target = "hf:bartowski/Qwen2.5-72B-Instruct-GGUF:Q4_K_M"\n'
        'draft = "hf:bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M"\nk = 4\n')
LLAMA = 'target = "hf:bartowski/Meta-Llama-3.1-70B-Instruct-GGUF:Q4_K_M"\ndraft = "auto"\n'


@pytest.fixture(scope="module")
def hub_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("hub") / "root")


@pytest.fixture
def hub(hub_root: Path) -> Iterator[FakeHub]:
    with FakeHub(hub_root) as running:
        yield running


def env_for(hub: FakeHub, tmp_path: Path, offline: bool = False) -> dict[str, str]:
    return {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "1" if offline else "0",
            "HF_HOME": str(tmp_path / "hf-home"), "SPECCTL_CACHE_DIR": str(tmp_path / "cache"),
            "HF_HUB_DISABLE_TELEMETRY": "1", "NO_COLOR": "1", "COLUMNS": "200"}


def plan(tmp_path: Path, text: str, env: dict[str, str]) -> dict[str, Any]:
    profile = tmp_path / "p.toml"
    profile.write_text(text)
    done = specctl("plan", "--profile", str(profile), "--hardware", M3_ULTRA, "--json", env=env)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_the_seed_pair_plans_from_the_hub_with_real_sizes(hub: FakeHub, tmp_path: Path) -> None:
    got = plan(tmp_path, SEED, env_for(hub, tmp_path))
    assert got["backend"] == "llamacpp"
    assert got["target"]["size_gib"] == pytest.approx((47.42) * 1e9 / GIB, rel=0.05)
    assert got["draft"]["size_gib"] == pytest.approx((4.68) * 1e9 / GIB, rel=0.05)
    assert got["memory"]["target_gib"] == pytest.approx((47.42) * 1e9 / GIB, rel=0.05)
    assert got["memory"]["draft_gib"] == pytest.approx((4.68) * 1e9 / GIB, rel=0.05)
    assert got["target"]["layers"] == 80 and got["draft"]["layers"] == 28
    argv = got["argv"]
    assert argv[argv.index("-hf") + 1] == "bartowski/Qwen2.5-72B-Instruct-GGUF:Q4_K_M"
    assert argv[argv.index("-hfd") + 1] == "bartowski/Qwen2.5-7B-Instruct-GGUF:Q4_K_M"
    reasons = " ".join(got["reasons"])
    assert "metadata from the Hub" in reasons and "token lists compared" in reasons


def test_draft_auto_finds_a_same_tokenizer_draft_on_the_hub(hub: FakeHub,
                                                            tmp_path: Path) -> None:
    env = env_for(hub, tmp_path)
    got = plan(tmp_path, LLAMA, env)
    assert got["target"]["size_gib"] == pytest.approx((42.52) * 1e9 / GIB, rel=0.05)
    assert got["draft"]["ref"].startswith("hf:bartowski/Llama-3.2-")
    assert any(r.startswith('Draft "auto"') and "hub" in r for r in got["reasons"])
    done = specctl("drafts", "--target", "hf:bartowski/Meta-Llama-3.1-70B-Instruct-GGUF:Q4_K_M",
                   "--backend", "llamacpp", "--json", env=env)
    assert done.returncode == 0, done.stderr
    found = {c["model"]: c for c in json.loads(done.stdout)["candidates"]}
    llama2 = found["hf:bartowski/Llama-2-7b-Chat-GGUF:Q4_K_M"]
    assert not llama2["compatible"] and "vocab type differs" in llama2["reason"]
    assert found["hf:bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0"]["compatible"]
    assert found["ngram"]["compatible"] and found["ngram"]["method"] == "ngram"


def test_offline_with_a_warm_cache_makes_no_request(hub: FakeHub, tmp_path: Path) -> None:
    online = [plan(tmp_path, text, env_for(hub, tmp_path)) for text in (SEED, LLAMA)]
    hub.reset_counts()
    again = [plan(tmp_path, text, env_for(hub, tmp_path)) for text in (SEED, LLAMA)]
    offline = [plan(tmp_path, text, env_for(hub, tmp_path, offline=True))
               for text in (SEED, LLAMA)]
    assert hub.total_requests == 0
    for a, b, c in zip(online, again, offline, strict=True):
        assert a["argv"] == b["argv"] == c["argv"]
        assert a["memory"] == b["memory"] == c["memory"]


def test_offline_with_a_cold_cache_says_so_in_one_line(hub: FakeHub, tmp_path: Path) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text(SEED)
    done = specctl("plan", "--profile", str(profile), "--hardware", M3_ULTRA,
                   env=env_for(hub, tmp_path, offline=True))
    assert done.returncode != 0 and hub.total_requests == 0
    line = done.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "bartowski/Qwen2.5-7B-Instruct-GGUF" in line and "HF_HUB_OFFLINE" in line


@pytest.mark.parametrize(("ref", "words"), [
    ("hf:bartowski/Qwen2.5-72B-Instruct-GGUF:IQ1_S", ["no IQ1_S file", "Q4_K_M, Q8_0"]),
    ("hf:bartowski/No-Such-Model-GGUF:Q4_K_M", ["no Hugging Face repo", "log in"]),
])
def test_hub_mistakes_are_one_line(hub: FakeHub, tmp_path: Path, ref: str,
                                   words: list[str]) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text(f'target = "{ref}"\ndraft = "ngram"\n')
    done = specctl("plan", "--profile", str(profile), "--hardware", M3_ULTRA,
                   env=env_for(hub, tmp_path))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    for word in words:
        assert word in done.stderr


def test_a_gated_repo_says_log_in(hub_root: Path, tmp_path: Path) -> None:
    gated = hub_root.parent / "gated-root"
    build(gated)
    (gated / "bartowski/Meta-Llama-3.1-70B-Instruct-GGUF/.gated").write_text("manual")
    with FakeHub(gated) as running:
        profile = tmp_path / "p.toml"
        profile.write_text(LLAMA)
        done = specctl("plan", "--profile", str(profile), "--hardware", M3_ULTRA,
                       env=env_for(running, tmp_path))
    assert done.returncode != 0
    assert "is gated" in done.stderr and "HF_TOKEN" in done.stderr


def smollm_repo(root: Path) -> str:
    source = testbed.path_of("smollm2-135m", Dirs.from_env().models)
    add_file(root, "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF", source,
             "SmolLM2-135M-Instruct-Q4_1.gguf")
    return "hf:HuggingFaceTB/SmolLM2-135M-Instruct-GGUF:Q4_1"


@pytest.mark.server
def test_pull_resumes_after_the_server_is_killed_halfway_and_checks_the_file(
        hub_root: Path, tmp_path: Path) -> None:
    ref = smollm_repo(hub_root)
    size = testbed.BY_KEY["smollm2-135m"].size
    with FakeHub(hub_root) as running:
        env = env_for(running, tmp_path)
        blobs = tmp_path / "hf-home" / "hub" / "models--HuggingFaceTB--SmolLM2-135M-Instruct-GGUF"

        def kill_halfway() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                parts = list(blobs.glob("blobs/*.incomplete")) if blobs.is_dir() else []
                if parts and parts[0].stat().st_size > size // 3:
                    running.stop()
                    time.sleep(2)
                    running.start()
                    return
                time.sleep(0.01)

        killer = threading.Thread(target=kill_halfway)
        killer.start()
        done = specctl("models", "pull", ref, env=env, timeout=300)
        killer.join()
        assert done.returncode == 0, done.stderr
        ranged = [r for r in running.log if r.method == "GET" and "range" in r.headers
                  and r.path.endswith("Q4_1.gguf")]
        assert any(r.headers["range"].startswith("bytes=") and r.headers["range"] != "bytes=0-"
                   for r in ranged), "the download did not resume"
    local = Path(done.stdout.strip().splitlines()[-1].split(": ", 1)[1])
    assert local.stat().st_size == size
    assert digest.sha256_file(local) == testbed.BY_KEY["smollm2-135m"].sha256
    again = specctl("models", "pull", ref, env=env)
    assert again.returncode == 0 and "already on disk" in again.stderr


@pytest.mark.server
def test_up_pulls_a_draft_that_is_only_on_the_hub_and_serves_with_it(
        hub_root: Path, tmp_path: Path) -> None:
    ref = smollm_repo(hub_root)
    with FakeHub(hub_root) as running:
        env = {**env_for(running, tmp_path), "SPECCTL_STATE_DIR": str(tmp_path / "state")}
        env["SPECCTL_CACHE_DIR"] = str(Dirs.from_env().cache)  # the llama.cpp build and models
        profile = tmp_path / "hubdraft.toml"
        port = free_port()
        profile.write_text(f'target = "testbed:smollm2-135m"\ndraft = "{ref}"\nk = 3\n'
                           f'[server]\ncontext = 1024\nport = {port}\n')
        refused = specctl("up", "--profile", str(profile), "--no-download", env=env)
        assert refused.returncode != 0 and "downloads are off" in refused.stderr
        try:
            done = specctl("up", "--profile", str(profile), env=env)
            assert done.returncode == 0, done.stderr
            assert "pulling hf:HuggingFaceTB/SmolLM2-135M-Instruct-GGUF" in done.stderr
            reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=120,
                                  json={"messages": [{"role": "user", "content": "Count to 9"}],
                                        "max_tokens": 16, "temperature": 0}).json()
            assert reply["timings"]["draft_n"] > 0
        finally:
            specctl("down", "--all", env=env)


def test_a_medusa_repo_is_planned_on_its_base_model(hub_root: Path, tmp_path: Path) -> None:
    """The shipped TGI profile: Medusa heads whose repo names its base model."""
    add_medusa(hub_root)
    with FakeHub(hub_root) as running:
        done = specctl("plan", "-p", "cuda-h100-tgi-medusa", "--hardware",
                       str(HARDWARE / "linux_1x_h100_80g.json"), "--json",
                       env=env_for(running, tmp_path))
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["method"] == "medusa" and got["target"]["layers"] == 32
    assert got["target"]["size_gib"] == pytest.approx((13.48 + 1.34) * 1e9 / GIB, rel=0.05)
    argv = got["argv"]
    assert "--speculate" in argv and int(argv[argv.index("--speculate") + 1]) <= 5


def test_eagle3_heads_published_for_the_target_are_found_on_the_hub(hub_root: Path,
                                                                     tmp_path: Path) -> None:
    add_eagle3(hub_root)
    with FakeHub(hub_root) as running:
        env = env_for(running, tmp_path)
        done = specctl("drafts", "--target", "hf:meta-llama/Llama-3.1-8B-Instruct",
                       "--backend", "vllm", "--json", env=env)
        assert done.returncode == 0, done.stderr
        found = {c["model"]: c for c in json.loads(done.stdout)["candidates"]}
        head = found["hf:yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"]
        assert head["compatible"] and head["method"] == "eagle3"
        other = found.get("hf:yuhuili/EAGLE3-LLaMA3.3-Instruct-70B", {"compatible": False})
        assert not other["compatible"]  # a head for another model
        profile = tmp_path / "eagle.toml"
        profile.write_text('target = "hf:meta-llama/Llama-3.1-8B-Instruct"\ndraft = "auto"\n'
                           'backend = ["vllm"]\n')
        plan = specctl("plan", "-p", str(profile), "--hardware",
                       str(HARDWARE / "linux_1x_h100_80g.json"), "--json", env=env)
    assert plan.returncode == 0, plan.stderr
    got = json.loads(plan.stdout)
    assert got["method"] == "eagle3" and got["draft"]["ref"].endswith("EAGLE3-LLaMA3.1-Instruct-8B")
    spec = json.loads(got["argv"][got["argv"].index("--speculative-config") + 1])
    assert spec["method"] == "eagle3" and spec["model"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


H100 = str(HARDWARE / "linux_1x_h100_80g.json")


def test_a_gguf_target_on_vllm_is_planned_on_the_original_its_card_names(
        hub_root: Path, tmp_path: Path) -> None:
    from tests.hub_repos import add_base_model

    add_base_model(hub_root)
    profile = tmp_path / "gguf-on-vllm.toml"
    profile.write_text('target = "hf:bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0"\n'
                       'draft = "none"\nbackend = ["vllm"]\n')
    with FakeHub(hub_root) as hub:
        done = specctl("plan", "--profile", str(profile), "--hardware", H100, "--json",
                       env=env_for(hub, tmp_path))
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["target"]["ref"] == "hf:meta-llama/Llama-3.2-1B-Instruct"
    assert got["target"]["size_gib"] == pytest.approx(2_471_645_608 / GIB, abs=0.01)
    assert got["argv"][got["argv"].index("serve") + 1] == "meta-llama/Llama-3.2-1B-Instruct"
    assert any("is a GGUF, which vllm cannot load; planned on "
               "hf:meta-llama/Llama-3.2-1B-Instruct" in r for r in got["reasons"])
    # without a card naming it: one line naming the repo to use, from the catalog
    profile.write_text('target = "hf:bartowski/Meta-Llama-3.1-70B-Instruct-GGUF:Q4_K_M"\n'
                       'draft = "none"\nbackend = ["vllm"]\n')
    with FakeHub(hub_root) as hub:
        done = specctl("plan", "--profile", str(profile), "--hardware", H100,
                       env=env_for(hub, tmp_path))
    assert done.returncode != 0
    line = done.stderr.strip()
    assert "\n" not in line
    assert ("is a GGUF file, which vllm cannot load; use hf:meta-llama/Llama-3.1-70B-Instruct "
            "as the target") in line
