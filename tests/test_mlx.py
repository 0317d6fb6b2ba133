"""MLX-LM (`mlx_lm.server`): argv and refusals from plans (no MLX needed), the shipped Mac profile
planned against the stand-in Hub, and - marked `mlx` - the real server from a separate env
(scripts/mlx-cpu-env .venv-mlx: MLX's Linux CPU build and tiny models sharing one tokenizer):
`up`, the openai client, `status`, kill -9 and restart, `down`, a short `bench`, refusals.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest
from openai import OpenAI
from pydantic import ValidationError

from specctl.adapters.mlx import (
    NO_COUNTERS,
    RECORDED,
    SERVED_MODEL,
    Mlx,
    MlxOptions,
    installed_of,
    recorded_flags,
    script_python,
)
from specctl.orchestrator.contract import registry
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.contract.launch import Endpoint, Installed
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.errors import BackendError, ProfileError
from specctl.orchestrator.models import compat
from specctl.orchestrator.runtime import procs
from specctl.orchestrator.runtime.servers import free_port
from specctl.orchestrator.sizes import GIB
from tests import plans
from tests.cli import ROOT, run_state, specctl, status_row
from tests.conftest import HARDWARE, recorded
from tests.fake_hf_hub import FakeHub
from tests.hub_mlx_repos import DRAFT, TARGET
from tests.hub_mlx_repos import build as build_mlx_repos

M3_ULTRA = str(HARDWARE / "macos_m3_ultra_96g.json")
PYTHON = "/opt/mlx/bin/python"
MLX_PY = Path(os.environ.get("SPECCTL_MLX_PYTHON", ROOT / ".venv-mlx" / "bin" / "python"))
TINY = MLX_PY.parent.parent / "tiny-models"


# -- plans and argv, no MLX needed ---------------------------------------------------------

def mlx_model(name: str, **changes: Any) -> ModelInfo:
    """An MLX model folder as the resolver describes one."""
    info = plans.target(ref=f"/models/{name}", name=name, path=Path("/models") / name,
                        architecture="llama", tokenizer="hf:bpe", quant="4BIT")
    return replace(info, **changes)


def mlx_plan(**changes: Any) -> Plan:
    base = plans.plan(backend="mlx", target=mlx_model("Llama-3.1-8B-Instruct-4bit"),
                      draft=mlx_model("Llama-3.2-1B-Instruct-4bit"))
    return base.but(**changes)


def installed(flags: frozenset[str] | None = None, version: str = RECORDED) -> Installed:
    return installed_of(version, PYTHON, recorded_flags() if flags is None else flags)


def after(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_the_registry_finds_mlx_by_its_names() -> None:
    assert "mlx" in registry.names()
    assert registry.canonical("mlx-lm") == registry.canonical("mlx_lm") == "mlx"
    cls = registry.adapter_classes()["mlx"]
    assert cls.formats == frozenset({"hf"}) and cls.vocab_rule == "identical"
    assert cls.default_quant == "4BIT" and cls.cache_types[0] == "f16"
    assert cls.preference == {"metal": 1}
    assert registry.default_order("metal")[:2] == ("llamacpp", "mlx")
    assert "mlx" not in registry.default_order("cpu")


def test_a_draft_plan_gives_the_documented_argv_and_a_readiness_request() -> None:
    launch = Mlx().launch(mlx_plan(), installed())
    argv = launch.argv
    assert list(argv[:14]) == [
        PYTHON, "-m", "mlx_lm", "server", "--model", "/models/Llama-3.1-8B-Instruct-4bit",
        "--host", "127.0.0.1", "--port", "8090",
        "--draft-model", "/models/Llama-3.2-1B-Instruct-4bit", "--num-draft-tokens", "3"]
    flags = {a for a in argv if a.startswith("--")}
    assert flags <= recorded_flags(), flags - recorded_flags()  # all in the recorded --help
    assert after(argv, "--allowed-origins") == "http://127.0.0.1:8090"  # not mlx's "*"
    assert after(argv, "--decode-concurrency") == "1"
    assert int(after(argv, "--prompt-cache-bytes")) == round((0.11 + 0.05) * 1e9)
    assert "--kv-bits" not in argv and "--trust-remote-code" not in argv
    assert launch.env == {"HF_HUB_OFFLINE": "1"}
    assert launch.model == SERVED_MODEL == "default_model"
    assert launch.health_url == "http://127.0.0.1:8090/health"
    assert launch.base_url == "http://127.0.0.1:8090/v1" and launch.metrics_url is None
    assert not launch.env_from
    (ready,) = launch.setup  # /health answers 200 before the model has loaded
    assert ready.method == "POST" and ready.url == "http://127.0.0.1:8090/v1/chat/completions"
    assert ready.body["model"] == "default_model" and ready.body["max_tokens"] == 1


def test_no_draft_flags_without_speculation() -> None:
    for plan in (mlx_plan().baseline(), mlx_plan(k=0), mlx_plan(method="none", draft=None)):
        argv = Mlx().launch(plan, installed()).argv
        assert "--draft-model" not in argv and "--num-draft-tokens" not in argv


def test_a_hub_model_not_on_disk_is_named_by_its_repo_id() -> None:
    target = mlx_model("x", ref=f"hf:{TARGET}", path=None)
    draft = mlx_model("y", ref=f"hf:{DRAFT}:4BIT", path=None)
    argv = Mlx().launch(mlx_plan(target=target, draft=draft), Mlx().assumed()).argv
    assert argv[0] == "mlx_lm.server"  # planned for another machine: the console script
    assert after(argv, "--model") == TARGET and after(argv, "--draft-model") == DRAFT
    store = mlx_model("z", ref="ollama:llama3", path=None)
    with pytest.raises(BackendError, match="neither on disk nor a Hugging Face repo"):
        Mlx().launch(mlx_plan(target=store), installed())


@pytest.mark.parametrize("method", ["ngram", "eagle", "eagle3", "mtp", "medusa"])
def test_methods_mlx_cannot_do_are_refused_by_name(method: str) -> None:
    with pytest.raises(BackendError, match=f"cannot speculate with '{method}'.*draft, none"):
        Mlx().launch(mlx_plan(method=method), installed())


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::", "example.org"])
def test_a_host_beyond_loopback_is_refused_even_with_a_key(host: str) -> None:
    with pytest.raises(BackendError, match="no authentication"):
        Mlx().launch(mlx_plan(host=host, api_key_env="MLX_KEY"), installed())


def test_loopback_hosts_are_served() -> None:
    assert after(Mlx().launch(mlx_plan(host="localhost"), installed()).argv, "--host") == \
        "localhost"
    launch = Mlx().launch(mlx_plan(host="::1"), installed())
    assert launch.base_url == "http://[::1]:8090/v1"


@pytest.mark.parametrize(("cache", "bits"), [("q8_0", "8"), ("q4_0", "4")])
def test_a_quantised_kv_cache_maps_to_kv_bits_from_the_first_token(cache: str, bits: str) -> None:
    argv = Mlx().launch(mlx_plan(memory=plans.memory(cache_type=cache)), installed()).argv
    assert after(argv, "--kv-bits") == bits and after(argv, "--kv-group-size") == "64"
    assert after(argv, "--quantized-kv-start") == "0"


def test_a_kv_cache_type_mlx_lacks_is_refused() -> None:
    with pytest.raises(BackendError, match="no 'fp8' KV cache"):
        Mlx().launch(mlx_plan(memory=plans.memory(cache_type="fp8")), installed())


def test_the_mlx_section_reaches_argv() -> None:
    opts = MlxOptions(max_tokens=2048, trust_remote_code=True, prompt_cache_size=2,
                      quantized_kv_start=512, allowed_origins=("https://app.example:8443",))
    plan = mlx_plan(options=opts, memory=plans.memory(cache_type="q8_0"), parallel=12)
    argv = Mlx().launch(plan, installed()).argv
    assert after(argv, "--max-tokens") == "2048" and "--trust-remote-code" in argv
    assert after(argv, "--prompt-cache-size") == "2"
    assert after(argv, "--quantized-kv-start") == "512"
    assert after(argv, "--allowed-origins") == "https://app.example:8443"
    assert after(argv, "--decode-concurrency") == "12"
    assert after(argv, "--prompt-concurrency") == "8"


@pytest.mark.parametrize("bad", [
    {"max_tokens": 0}, {"max_tokens": True}, {"max_tokens": "64"}, {"prompt_cache_size": -1},
    {"quantized_kv_start": -5}, {"allowed_origins": ["*"]}, {"allowed_origins": ["a b"]},
    {"kv_bits": 8}])
def test_bad_mlx_sections_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        MlxOptions.model_validate(bad)


def test_a_version_without_a_flag_is_refused_or_the_nicety_dropped() -> None:
    old = frozenset({"--model", "--host", "--port", "--draft-model", "--num-draft-tokens"})
    argv = Mlx().launch(mlx_plan(), installed(old, "0.20.0")).argv
    assert "--allowed-origins" not in argv and "--decode-concurrency" not in argv
    with pytest.raises(BackendError, match=r"0\.20\.0 has no --kv-bits"):
        Mlx().launch(mlx_plan(memory=plans.memory(cache_type="q4_0")), installed(old, "0.20.0"))
    opts = MlxOptions(allowed_origins=("https://a.example",))
    with pytest.raises(BackendError, match="has no --allowed-origins"):
        Mlx().launch(mlx_plan(options=opts), installed(old, "0.20.0"))


def test_check_refuses_gguf_and_clusters_and_notes_the_prompt_cache() -> None:
    mac, opts = recorded("macos_m3_ultra_96g"), MlxOptions()
    with pytest.raises(ProfileError, match="GGUF"):
        Mlx().check(opts, mac, plans.target(), None)
    with pytest.raises(ProfileError, match=r"draft .* GGUF"):
        Mlx().check(opts, mac, mlx_model("t"), plans.draft())
    with pytest.raises(ProfileError, match="one machine"):
        Mlx().check(opts, replace(mac, nodes=2), mlx_model("t"), None)
    assert Mlx().check(opts, mac, mlx_model("t"), None) == []
    notes = Mlx().check(MlxOptions(prompt_cache_size=2), mac, mlx_model("t"), mlx_model("d"))
    assert any("one request at a time" in n and "up to 2" in n for n in notes)
    f32 = Mlx().check(opts, mac, mlx_model("t", quant="FLOAT32"), None)
    assert any("twice" in n for n in f32)


def test_the_draft_must_have_the_targets_vocabulary() -> None:
    why = Mlx().draft_problem(MlxOptions(), mlx_model("t"), mlx_model("d", vocab_size=32000),
                             compat.vocab)
    assert why is not None and "identical" in why


def test_no_draft_counters_and_no_server_timing() -> None:
    stats = Mlx().spec_stats(Endpoint("http://127.0.0.1:1/v1"))
    assert stats.source == NO_COUNTERS and stats.acceptance_rate is None
    assert Mlx().decode_timing({"usage": {"completion_tokens": 3}}) is None


def fake_python(folder: Path, version: str, help_text: str) -> Path:
    """An 'interpreter' that answers the probe and `-m mlx_lm server --help`."""
    path = folder / "python"
    path.write_text(f'#!/bin/sh\nif [ "$1" = "-c" ]; then echo "{version} Device(gpu, 0)"; '
                    f'exit 0; fi\nif [ "$4" = "--help" ]; then echo "{help_text}"; exit 0; fi\n'
                    "exit 2\n")
    path.chmod(0o755)
    return path


def test_probe_asks_the_configured_python(tmp_path: Path) -> None:
    py = fake_python(tmp_path, "0.31.0", "usage: x [--model MODEL] [--port PORT] [--kv-bits K]")
    found = Mlx(python=py).probe()
    assert found is not None and found.version == "0.31.0" and found.path == str(py)
    assert found.dialect == "mlx_lm-0.31.0" and found.methods == frozenset({"none", "draft"})
    assert found.flags == {"--model", "--port", "--kv-bits"}  # its own --help, not recorded
    same = Mlx(python=fake_python(tmp_path, RECORDED, "")).probe()
    assert same is not None and same.flags == recorded_flags()
    assert Mlx(python=tmp_path / "missing").probe() is None
    assert Mlx(python=Path(sys.executable)).probe() is None  # this env has no mlx_lm


def test_assumed_is_the_recorded_dialect() -> None:
    found = Mlx().assumed()
    assert found.assumed and found.version == RECORDED and found.path is None
    assert {"--draft-model", "--num-draft-tokens", "--kv-bits"} <= found.flags


def test_settings_name_the_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPECCTL_MLX_PYTHON", "venv/bin/python")
    made = Mlx.create(Dirs.from_env())
    assert isinstance(made, Mlx) and made.python == tmp_path / "venv" / "bin" / "python"
    assert made.candidates() == [tmp_path / "venv" / "bin" / "python"]


def test_the_python_behind_a_console_script(tmp_path: Path) -> None:
    direct = tmp_path / "a"
    direct.write_text("#!/opt/venv/bin/python3.11\nimport sys\n")
    assert script_python(direct) == Path("/opt/venv/bin/python3.11")
    launcher = tmp_path / "b"  # pip's form for interpreter paths with spaces or too long
    launcher.write_text("#!/bin/sh\n'''exec' \"/long path/bin/python\" \"$0\" \"$@\"\n' '''\n")
    assert script_python(launcher) == Path("/long path/bin/python")
    launcher.write_text("#!/bin/sh\n'''exec' /very/long/bin/python \"$0\" \"$@\"\n' '''\n")
    assert script_python(launcher) == Path("/very/long/bin/python")
    env = tmp_path / "c"
    env.write_text(f"#!/usr/bin/env {Path(sys.executable).name}\n")
    assert script_python(env) is not None
    assert script_python(tmp_path / "missing") is None


# -- planning with the CLI, no MLX needed ----------------------------------------------------

def tiny_folder(folder: Path, vocab: int = 64) -> Path:
    """A minimal Hugging Face model folder (config, tokenizer, weights), never loaded."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
        "vocab_size": vocab, "torch_dtype": "bfloat16", "bos_token_id": 0, "eos_token_id": 1,
        "quantization": {"group_size": 64, "bits": 4}}))
    (folder / "tokenizer.json").write_text(json.dumps({"model": {
        "type": "BPE", "vocab": {f"t{i}": i for i in range(vocab)}, "merges": []}}))
    (folder / "model.safetensors").write_bytes(bytes(4096))
    return folder


def plan_profile(tmp_path: Path, host: str, key: str = "") -> subprocess.CompletedProcess[str]:
    profile = tmp_path / "mac.toml"
    target, draft = tiny_folder(tmp_path / "t"), tiny_folder(tmp_path / "d")
    profile.write_text(f'target = "{target}"\ndraft = "{draft}"\nk = 3\nbackend = ["mlx"]\n'
                       f'[server]\nhost = "{host}"\n{key}')
    return specctl("plan", "--profile", str(profile), "--hardware", M3_ULTRA, "--json")


def test_a_local_pair_plans_on_the_recorded_mac(tmp_path: Path) -> None:
    done = plan_profile(tmp_path, "127.0.0.1")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["backend"] == "mlx" and got["method"] == "draft" and got["k"] == 3
    assert got["target"]["quant"] == "4BIT" and got["model"] == "default_model"
    assert got["argv"][:3] == ["mlx_lm.server", "--model", str(tmp_path / "t")]
    assert got["env"] == {"HF_HUB_OFFLINE": "1"}


def test_a_profile_on_0000_is_refused(tmp_path: Path) -> None:
    for extra in ("", 'api_key_env = "MLX_KEY"\n'):  # a key would not help: none is checked
        refused = plan_profile(tmp_path, "0.0.0.0", extra)
        assert refused.returncode != 0
        lines = [ln for ln in refused.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "checks no API key" in lines[0], refused.stderr
        assert "api_key_env" not in lines[0]  # no advice that would not help


# -- the shipped Mac profile against the stand-in Hub -----------------------------------------

@pytest.fixture(scope="module")
def mlx_hub_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_mlx_repos(tmp_path_factory.mktemp("mlxhub") / "root")


def hub_env(hub: FakeHub, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0",
            "HF_HOME": str(tmp_path / "hf-home"), "SPECCTL_CACHE_DIR": str(tmp_path / "cache"),
            "HF_HUB_DISABLE_TELEMETRY": "1", "NO_COLOR": "1", "COLUMNS": "200"}


def test_the_shipped_mlx_profile_plans_on_the_m3_ultra_from_the_hub(
        mlx_hub_root: Path, tmp_path: Path) -> None:
    with FakeHub(mlx_hub_root) as hub:
        done = specctl("plan", "-p", "m3-ultra-70b-mlx", "--hardware", M3_ULTRA, "--json",
                       env=hub_env(hub, tmp_path))
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["backend"] == "mlx" and got["method"] == "draft" and got["k"] > 0
    assert got["target"]["quant"] == got["draft"]["quant"] == "4BIT"
    assert got["target"]["vocab_size"] == got["draft"]["vocab_size"] == 128256
    assert (got["target"]["layers"], got["target"]["kv_heads"], got["target"]["head_dim"]) == \
        (80, 8, 128)
    assert (got["draft"]["layers"], got["draft"]["kv_heads"], got["draft"]["head_dim"]) == \
        (16, 8, 64)
    mem = got["memory"]
    assert mem["target_gib"] == pytest.approx((39.7) * 1e9 / GIB, abs=0.1)
    assert mem["draft_gib"] == pytest.approx((0.70) * 1e9 / GIB, abs=0.02)
    # K and V, f16, 8192 tokens: 80 x 8 x 128 x 2 x 2 B and 16 x 8 x 64 x 2 x 2 B per token
    assert mem["kv_target_gib"] == pytest.approx(80 * 8 * 128 * 4 * 8192 / GIB, abs=0.01)
    assert mem["kv_draft_gib"] == pytest.approx(16 * 8 * 64 * 4 * 8192 / GIB, abs=0.01)
    assert mem["cache_type"] == "f16" and mem["context"] == 8192
    assert mem["budget_gib"] == 72.0
    assert mem["total_gib"] == pytest.approx(44.2e9 / GIB, abs=0.3)
    argv = got["argv"]
    assert argv[0] == "mlx_lm.server"
    assert after(tuple(argv), "--model") == TARGET
    assert after(tuple(argv), "--draft-model") == DRAFT
    assert after(tuple(argv), "--num-draft-tokens") == str(got["k"])
    reasons = " ".join(got["reasons"])
    assert "metadata from the Hub" in reasons and "token lists compared" in reasons


# -- the real mlx_lm.server (marker mlx: scripts/mlx-cpu-env .venv-mlx) ----------------------

def ours(state_dir: str) -> set[int]:
    """Processes started for a test: they inherit its SPECCTL_STATE_DIR."""
    found = set()
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and \
                    proc.environ().get("SPECCTL_STATE_DIR") == state_dir:
                found.add(proc.pid)
        except psutil.Error:
            continue
    return found


def mlx_env(base: Path) -> dict[str, str]:
    assert MLX_PY.is_file() and (TINY / "draft").is_dir(), \
        f"{MLX_PY} or {TINY} missing: run scripts/mlx-cpu-env .venv-mlx"
    return {**os.environ, "SPECCTL_MLX_PYTHON": str(MLX_PY),
            "SPECCTL_STATE_DIR": str(base / "state"), "SPECCTL_CONFIG_DIR": str(base / "config"),
            "SPECCTL_MAX_RESTARTS": "2", "SPECCTL_RESTART_BACKOFF": "0.2",
            "SPECCTL_STOP_GRACE": "3", "SPECCTL_HEALTH_TIMEOUT": "60", "HF_HUB_OFFLINE": "1",
            "NO_COLOR": "1", "COLUMNS": "200"}


def tiny_profile(folder: Path, target: str = "target", host: str = "127.0.0.1",
                 extra: str = "") -> Path:
    path = folder / "tinymlx.toml"
    path.write_text(f'target = "{TINY / target}"\ndraft = "{TINY / "draft"}"\nk = 3\n'
                    f'backend = ["mlx"]\n[server]\nhost = "{host}"\nport = {free_port()}\n'
                    f'context = 1024\n{extra}')
    return path


def complete(url: str, prompt: str = "Write a Python function that reverses a string.") -> str:
    client = OpenAI(base_url=url, api_key="unused", timeout=120)
    reply = client.chat.completions.create(
        model="default_model", messages=[{"role": "user", "content": prompt}], max_tokens=16,
        temperature=0)
    assert reply.usage is not None and reply.usage.completion_tokens == 16  # never stops early
    return reply.choices[0].message.content or ""


@pytest.fixture(scope="module")
def served_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    base = tmp_path_factory.mktemp("mlxserve")
    env = mlx_env(base)
    done = specctl("up", "--profile", str(tiny_profile(base)), "--no-provision", env=env,
                   timeout=300)
    try:
        assert done.returncode == 0, done.stderr + done.stdout
        yield env
    finally:
        specctl("down", "--all", env=env)
        time.sleep(0.2)
        left = ours(env["SPECCTL_STATE_DIR"])
        assert not left, f"processes left behind: {left}"


@pytest.mark.mlx
@pytest.mark.server
def test_real_up_serves_the_openai_client_and_status_shows_it(
        served_env: dict[str, str]) -> None:
    run = run_state(served_env, "tinymlx")
    url = run["url"]
    assert url == f"http://127.0.0.1:{run['port']}/v1" and run["status"] == "running"
    assert len(complete(url)) > 0
    row = status_row(served_env, "tinymlx")
    assert row["status"] == "running" and row["url"] == url and row["restarts"] == 0
    assert row["speculation"].startswith("draft draft, k=3")
    assert row["acceptance_rate"] is None  # mlx_lm.server counts nothing
    argv = run["plan"]["argv"]
    assert argv[:4] == [str(MLX_PY), "-m", "mlx_lm", "server"]
    assert argv[argv.index("--draft-model") + 1] == str(TINY / "draft")
    assert argv[argv.index("--num-draft-tokens") + 1] == "3"
    assert run["plan"]["model"] == "default_model"


@pytest.mark.mlx
@pytest.mark.server
def test_real_kill_9_of_the_server_is_restarted_and_serves_again(
        served_env: dict[str, str]) -> None:
    before = run_state(served_env, "tinymlx")
    pid = before["server_pid"]  # the server's leash (runtime/leash.py); the engine is its child
    assert isinstance(pid, int)
    engine = psutil.Process(pid).children()[0]
    assert engine.cmdline()[1:4] == ["-m", "mlx_lm", "server"]
    os.kill(engine.pid, signal.SIGKILL)  # the engine dies, as a crash would end it
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        now = run_state(served_env, "tinymlx")
        if now["server_pid"] != pid and now["status"] == "running":
            break
        time.sleep(0.3)
    else:
        pytest.fail(f"not restarted: {run_state(served_env, 'tinymlx')}")
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert status_row(served_env, "tinymlx")["restarts"] == 1
    assert len(complete(before["url"], "Say hello.")) > 0


@pytest.mark.mlx
@pytest.mark.server
def test_real_down_leaves_no_process(served_env: dict[str, str]) -> None:
    run = run_state(served_env, "tinymlx")
    pgid, sup = run["server_pgid"], run["supervisor_pid"]
    done = specctl("down", "tinymlx", env=served_env)
    assert done.returncode == 0 and "stopped" in done.stdout
    assert procs.group_members(pgid) == []
    assert not psutil.pid_exists(sup) or psutil.Process(sup).status() == psutil.STATUS_ZOMBIE
    assert not (Path(served_env["SPECCTL_STATE_DIR"]) / "runs" / "tinymlx.json").exists()
    assert not ours(served_env["SPECCTL_STATE_DIR"])


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    e = mlx_env(tmp_path)
    yield e
    specctl("down", "--all", env=e)
    time.sleep(0.2)
    left = ours(e["SPECCTL_STATE_DIR"])
    assert not left, f"processes left behind: {left}"


@pytest.mark.mlx
@pytest.mark.server
def test_real_bench_with_the_draft_prints_a_table_and_writes_json(
        env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = specctl("bench", "--profile", str(tiny_profile(tmp_path)), "--suite", "code",
                   "--prompts", "1", "--repeats", "1", "--precision", "0", "--max-tokens", "16",
                   "--output", str(out),
                   env=env, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    print(done.stdout)  # the measured table, for the record (pytest -s)
    assert "tinymlx on mlx: draft k=3 vs baseline" in done.stdout
    assert "speedup" in done.stdout and "overall" in done.stdout
    result = json.loads(out.read_text())
    assert result["backend"] == "mlx" and result["backend_version"] == RECORDED
    row = result["configs"]["draft k=3"]["overall"]
    assert row["n"] == 1 and row["baseline_tps"] > 0 and row["tps"] > 0 and row["speedup"] > 0
    assert row["acceptance"] is None and row["drafted"] == 0  # no counters: said, not guessed


@pytest.mark.mlx
@pytest.mark.server
def test_real_corrupt_target_fails_the_start_and_leaves_nothing(
        env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in (TINY / "target").iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    weights = bad / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    profile = tmp_path / "tinymlx.toml"
    profile.write_text(tiny_profile(tmp_path).read_text().replace(str(TINY / "target"),
                                                                   str(bad)))
    env = {**env, "SPECCTL_HEALTH_TIMEOUT": "10"}
    done = specctl("up", "--profile", str(profile), "--no-provision", env=env, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    log = (Path(env["SPECCTL_STATE_DIR"]) / "logs" / "tinymlx.log").read_text()
    assert "load_safetensors" in log  # the real cause is in the server's log
    assert not ours(env["SPECCTL_STATE_DIR"])  # the server that stayed up (503) was stopped


@pytest.mark.mlx
@pytest.mark.server
def test_real_up_on_0000_is_refused_before_anything_starts(
        env: dict[str, str], tmp_path: Path) -> None:
    profile = tiny_profile(tmp_path, host="0.0.0.0", extra='api_key_env = "MLX_KEY"\n')
    done = specctl("up", "--profile", str(profile), "--no-provision",
                   env={**env, "MLX_KEY": "secret"})
    assert done.returncode != 0 and "checks no API key" in done.stderr
    assert not ours(env["SPECCTL_STATE_DIR"])
