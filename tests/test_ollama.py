"""Ollama: a real on-disk Ollama store (manifests + blobs) built from the testbed GGUFs, served
for real by llama.cpp with a draft; and Ollama as a backend against tests/fake_ollama.py, a FAKE
daemon (no Ollama server can be installed here) that speaks Ollama's HTTP protocol."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from specctl.adapters import ollama_store
from specctl.adapters.ollama import Ollama
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.errors import ModelError
from specctl.orchestrator.models import testbed
from specctl.orchestrator.runtime.servers import free_port
from tests.cli import ROOT, specctl
from tests.ggufs import write_gguf

FAKE = ROOT / "tests" / "fake_ollama.py"
SHIM = ROOT / "tests" / "bin"
MODELS = {"qwen2.5-coder:1.5b": "qwen-1.5b-q4", "qwen2.5-coder:0.5b": "qwen-0.5b-q4"}


def real_blobs() -> dict[str, tuple[str, Path]]:
    """The real testbed files (provisioned by CI) as the store's blobs."""
    models = Dirs.from_env().models
    return {name_tag: (testbed.BY_KEY[key].sha256, testbed.path_of(key, models))
            for name_tag, key in MODELS.items()}


def small_blobs(folder: Path) -> dict[str, tuple[str, Path]]:
    """Small GGUFs with the same shape of metadata (one tokenizer for both), for tests where
    nothing loads the weights: the fake daemon, the resolver."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for (name_tag, key), layers in zip(MODELS.items(), (28, 24), strict=True):
        path = write_gguf(folder / f"{key}.gguf", name=name_tag, block_count=layers)
        out[name_tag] = (hashlib.sha256(path.read_bytes()).hexdigest(), path)
    return out


def build_store(root: Path, blobs: dict[str, tuple[str, Path]]) -> Path:
    """A real Ollama store layout: manifests, and blobs named by their SHA-256 that link to
    `blobs`' files."""
    for name_tag, (digest, file) in blobs.items():
        name, tag = name_tag.split(":")
        blob = root / "blobs" / f"sha256-{digest}"
        blob.parent.mkdir(parents=True, exist_ok=True)
        if not blob.exists():
            blob.symlink_to(file)
        manifest = root / "manifests" / "registry.ollama.ai" / "library" / name / tag
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text(json.dumps({
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                       "digest": "sha256:" + "0" * 64, "size": 485},
            "layers": [{"mediaType": "application/vnd.ollama.image.model",
                        "digest": f"sha256:{digest}", "size": file.stat().st_size},
                       {"mediaType": "application/vnd.ollama.image.template",
                        "digest": "sha256:" + "1" * 64, "size": 1000}]}))
    return root


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return build_store(tmp_path / "ollama-models", small_blobs(tmp_path / "files"))


@pytest.fixture
def real_store(tmp_path: Path) -> Path:
    return build_store(tmp_path / "ollama-models", real_blobs())


def digest_of(store: Path, name: str, tag: str) -> str:
    manifest = store / "manifests/registry.ollama.ai/library" / name / tag
    return str(json.loads(manifest.read_text())["layers"][0]["digest"]).removeprefix("sha256:")


def test_resolver_finds_the_gguf_blob_of_an_ollama_model(store: Path) -> None:
    blob = ollama_store.blob_for("qwen2.5-coder:1.5b", store)
    assert blob is not None
    assert blob.name == f"sha256-{digest_of(store, 'qwen2.5-coder', '1.5b')}"
    assert ollama_store.blob_for("qwen2.5-coder:7b", store) is None
    assert dict(ollama_store.all_models(store)).keys() == set(MODELS)
    assert ollama_store.models_dir({"OLLAMA_MODELS": str(store)}, Path("/nowhere")) == store


def test_a_broken_store_gives_clear_errors(store: Path) -> None:
    manifest = store / "manifests/registry.ollama.ai/library/qwen2.5-coder/0.5b"
    manifest.write_text("{not json")
    with pytest.raises(ModelError, match="unreadable"):
        ollama_store.blob_for("qwen2.5-coder:0.5b", store)
    blob = store / "blobs" / f"sha256-{digest_of(store, 'qwen2.5-coder', '1.5b')}"
    blob.unlink()
    with pytest.raises(ModelError, match=r"ollama pull qwen2\.5-coder:1\.5b"):
        ollama_store.blob_for("qwen2.5-coder:1.5b", store)


@pytest.mark.server
def test_llamacpp_serves_ollama_models_with_a_draft(real_store: Path, tmp_path: Path) -> None:
    store = real_store
    env = {**os.environ, "OLLAMA_MODELS": str(store), "SPECCTL_STATE_DIR": str(tmp_path / "s")}
    profile = tmp_path / "from-ollama.toml"
    profile.write_text('target = "ollama:qwen2.5-coder:1.5b"\ndraft = "ollama:qwen2.5-coder:0.5b"'
                       f'\nk = 2\nbackend = ["llamacpp"]\n[server]\nport = {free_port()}\n'
                       'context = 1024\n')
    plan = json.loads(specctl("plan", "--profile", str(profile), "--json", env=env).stdout)
    assert plan["target"]["path"].endswith(testbed.BY_KEY["qwen-1.5b-q4"].sha256)
    drafts = specctl("drafts", "--target", "ollama:qwen2.5-coder:1.5b", "--json", env=env)
    found = [c for c in json.loads(drafts.stdout)["candidates"] if c["source"] == "ollama"]
    assert any(c["model"] == "ollama:qwen2.5-coder:0.5b" and c["compatible"] for c in found)
    try:
        done = specctl("up", "--profile", str(profile), "--no-provision", env=env)
        assert done.returncode == 0, done.stderr
        url = next(w for w in done.stdout.split() if w.startswith("http://"))
        reply = httpx.post(f"{url}/chat/completions", timeout=300, json={
            "messages": [{"role": "user", "content": "Write hello world in C."}],
            "max_tokens": 24, "temperature": 0}).json()
        assert reply["timings"]["draft_n"] > 0
    finally:
        specctl("down", "--all", env=env)


@pytest.fixture
def fake_daemon(store: Path) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "OLLAMA_HOST": f"127.0.0.1:{port}", "OLLAMA_MODELS": str(store),
           "FAKE_OLLAMA_VERSION": "0.32.14"}
    proc = subprocess.Popen([sys.executable, str(FAKE), "serve"], env=env,
                            stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            httpx.get(f"{url}/api/version", timeout=0.2)
            break
        except httpx.HTTPError:
            time.sleep(0.05)
    yield url
    proc.terminate()
    proc.wait(timeout=5)


def test_probe_detects_the_fake_daemon_through_the_client(fake_daemon: str) -> None:
    found = Ollama(url=fake_daemon).probe()
    assert found is not None and found.version == "0.32.14"
    assert "mtp" in found.methods
    assert Ollama(url=f"http://127.0.0.1:{free_port()}").probe() is None


@pytest.mark.server  # the tip needs the llama.cpp build next to the daemon
def test_doctor_shows_the_daemon(fake_daemon: str) -> None:
    done = specctl("doctor", env={**os.environ, "SPECCTL_OLLAMA_URL": fake_daemon})
    assert done.returncode == 0 and "ollama    ollama 0.32.14" in done.stdout
    assert "llama.cpp can serve your Ollama models with a draft" in done.stdout


@pytest.mark.parametrize(("version", "speculates"), [("0.32.14", True), ("0.30.0", False)])
def test_up_serves_through_ollama(store: Path, tmp_path: Path, version: str,
                                  speculates: bool) -> None:
    port = free_port()
    env = {**os.environ, "OLLAMA_MODELS": str(store), "FAKE_OLLAMA_VERSION": version,
           "FAKE_OLLAMA_PYTHON": sys.executable, "PATH": f"{SHIM}:{os.environ['PATH']}",
           "SPECCTL_STATE_DIR": str(tmp_path / "s"), "SPECCTL_OLLAMA_URL":
           f"http://127.0.0.1:{port}"}
    profile = tmp_path / "ollama.toml"
    profile.write_text('target = "ollama:qwen2.5-coder:1.5b"\ndraft = "auto"\n'
                       'draft_method = "mtp"\nk = 2\nbackend = ["ollama"]\n'
                       f'[server]\nport = {port}\n')
    # the daemon is started by `up` under supervision (the shim is the FAKE daemon)
    try:
        done = specctl("up", "--profile", str(profile), "--no-provision", env=env)
        assert done.returncode == 0, done.stderr
        state = json.loads((tmp_path / "s" / "runs" / "ollama.json").read_text())
        reasons = " ".join(state["plan"]["reasons"])
        model = state["plan"]["model"]
        tags = httpx.get(f"http://127.0.0.1:{port}/api/tags", timeout=5).json()["models"]
        if speculates:
            assert state["plan"]["method"] == "mtp" and model == "specctl-ollama"
            show = httpx.post(f"http://127.0.0.1:{port}/api/show", timeout=5,
                                 json={"model": model}).json()
            assert show["parameters"] == "draft_num_predict 2"
        else:
            assert state["plan"]["method"] == "none" and model == "qwen2.5-coder:1.5b"
            assert "Speculation unavailable" in reasons and "llama.cpp" in reasons
            assert "specctl-ollama" not in {t["name"] for t in tags}
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=5,
                              json={"model": model, "messages": [
                                  {"role": "user", "content": "hi"}]})
        assert reply.status_code == 200
    finally:
        specctl("down", "--all", env=env)


def test_bench_against_the_fake_daemon_asks_its_openai_api(store: Path, tmp_path: Path) -> None:
    """bench/tune reach a server through its adapter's API root (Ollama: /v1), not a URL cut
    from its health check (/api/version)."""
    env = {**os.environ, "OLLAMA_MODELS": str(store), "FAKE_OLLAMA_VERSION": "0.32.14",
           "FAKE_OLLAMA_PYTHON": sys.executable, "PATH": f"{SHIM}:{os.environ['PATH']}",
           "SPECCTL_STATE_DIR": str(tmp_path / "s"),
           "SPECCTL_OLLAMA_URL": f"http://127.0.0.1:{free_port()}"}
    profile = tmp_path / "ollama.toml"
    profile.write_text('target = "ollama:qwen2.5-coder:1.5b"\ndraft_method = "mtp"\nk = 2\n'
                       'backend = ["ollama"]\n')
    done = specctl("bench", "--profile", str(profile), "--prompts", "1", "--repeats", "1",
                   "--precision", "0",
                   "--suite", "chat", "--max-tokens", "8", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    logs = list((tmp_path / "s" / "logs").glob("ollama.bench-*.log"))
    assert len(logs) == 2  # the baseline and the MTP server
    for log in logs:
        asked = [ln for ln in log.read_text().splitlines() if "chat/completions" in ln]
        assert asked and all(ln.endswith("POST /v1/chat/completions") for ln in asked), asked


def test_models_pull_goes_through_the_daemon(tmp_path: Path) -> None:
    """`specctl models pull ollama:NAME` asks the daemon's /api/pull (the fake copies from a
    stand-in registry) and prints the GGUF blob; an unknown model is one line."""
    registry = build_store(tmp_path / "registry", small_blobs(tmp_path / "files"))
    store = tmp_path / "ollama-models"
    port = free_port()
    env = {**os.environ, "OLLAMA_HOST": f"127.0.0.1:{port}", "OLLAMA_MODELS": str(store),
           "FAKE_OLLAMA_REGISTRY": str(registry), "SPECCTL_OLLAMA_URL":
           f"http://127.0.0.1:{port}"}
    proc = subprocess.Popen([sys.executable, str(FAKE), "serve"], env=env,
                            stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                httpx.get(f"http://127.0.0.1:{port}/api/version", timeout=0.2)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        done = specctl("models", "pull", "ollama:qwen2.5-coder:0.5b", env=env)
        assert done.returncode == 0, done.stderr
        blob = Path(done.stdout.strip().splitlines()[-1].split(": ", 1)[1])
        assert blob.parent == store / "blobs" and blob.is_file()
        assert "bytes" in done.stderr  # progress from the daemon's stream: stderr
        missing = specctl("models", "pull", "ollama:nosuch:7b", env=env)
        assert missing.returncode != 0
        assert missing.stderr.count("\n") == 1 and "file does not exist" in missing.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=5)
