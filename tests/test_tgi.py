"""TGI (text-generation-inference), validated, not run, here: there is no GPU and no container
engine on this machine. Every argv the adapter builds (native launcher, docker, podman; n-gram,
Medusa, none; 1x and 8x H100) is checked against the launcher options recorded from the v3.3.7
docs; the container command (mounts, ports, env by name, GPUs), the API key's path, the Medusa
rules, the full resolve path through the registry, the metrics parsing and the probe are checked
on their own.
"""

from __future__ import annotations

import itertools
import json
import re
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from specctl.adapters import prometheus
from specctl.adapters.tgi import (
    DIALECT,
    IMAGE,
    Mounted,
    Tgi,
    TgiOptions,
    parse_version,
    recorded,
    stats_from_metrics,
)
from specctl.adapters.tgi_container import default_hf_dirs
from specctl.adapters.tgi_launcher import validate
from specctl.orchestrator.app import App
from specctl.orchestrator.config import profiles
from specctl.orchestrator.contract import registry
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.contract.launch import Endpoint, Installed, Launch
from specctl.orchestrator.contract.memory import Budget
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.errors import BackendError, ProfileError
from specctl.orchestrator.runtime.server import server_env
from tests import plans
from tests.conftest import HARDWARE
from tests.conftest import recorded as machine

H100 = "linux_1x_h100_80g"
H100X8 = "linux_8x_h100_80g"
HF_HOME = "/home/me/.cache/huggingface"
TGI = Tgi()
ASSUMED = TGI.assumed()


def qwen7b(**changes: Any) -> ModelInfo:
    """Qwen2.5-Coder-7B-Instruct from the Hub (not on disk): 28 heads, 4 KV heads."""
    info = plans.target(ref="hf:Qwen/Qwen2.5-Coder-7B-Instruct", name="Qwen2.5-Coder-7B-Instruct",
                        path=None, layers=28, heads=28, kv_heads=4, vocab_size=152064,
                        params_b=7.62, quant="BF16", size_bytes=15_240_000_000)
    return replace(info, **changes)


def medusa(**changes: Any) -> ModelInfo:
    """A local Medusa folder (config.json with medusa_num_heads = 5)."""
    info = plans.target(ref="/models/medusa-vicuna-7b", name="medusa-vicuna-7b",
                        path=Path("/models/medusa-vicuna-7b"), architecture="llama", layers=32,
                        heads=32, kv_heads=32, vocab_size=32000, quant="F16", kind="medusa",
                        spec_heads=5)
    return replace(info, **changes)


def tgi_plan(hardware: str = H100, options: TgiOptions | None = None, **changes: Any) -> Plan:
    """A TGI plan on a recorded CUDA machine; n-gram k=4 on Qwen 7B unless changed."""
    base: dict[str, Any] = {"target": qwen7b(), "draft": None, "method": "ngram", "k": 4,
                            "port": 8080, "threads": None}
    return plans.plan(backend="tgi", hardware=hardware,
                      options=options or Mounted(hf_cache=HF_HOME), **(base | changes))


def launcher_args(launch: Launch, image: str = IMAGE) -> list[str]:
    """What text-generation-launcher receives: after the program, or after the image."""
    argv = list(launch.argv)
    return argv[argv.index(image) + 1:] if image in argv else argv[1:]


def value(argv: list[str] | tuple[str, ...], flag: str) -> str:
    argv = list(argv)
    return argv[argv.index(flag) + 1]


def pairs(argv: tuple[str, ...]) -> set[tuple[str, str]]:
    return set(itertools.pairwise(argv))


# --- every argv validates against the recorded launcher options ----------------------------

TARGETS = {"ngram": qwen7b(), "medusa": medusa(), "none": qwen7b()}


@pytest.mark.parametrize("engine", ["native", "docker", "podman"])
@pytest.mark.parametrize("method", ["ngram", "medusa", "none"])
@pytest.mark.parametrize(("hardware", "shards"), [(H100, None), (H100X8, 2), (H100X8, 4)])
def test_every_argv_validates(engine: str, method: str, hardware: str, shards: int | None) -> None:
    opts = Mounted.model_validate({"engine": engine, "num_shard": shards, "hf_cache": HF_HOME})
    plan = tgi_plan(hardware, opts, target=TARGETS[method], method=method,
                    k=0 if method == "none" else 3)
    TGI.check(opts, plan.hardware, plan.target, None)  # the backend's own rules pass
    launch = TGI.launch(plan, ASSUMED)
    args = launcher_args(launch)
    assert validate(args, recorded()) == [], args
    assert value(args, "--num-shard") == str(shards or 1)
    assert value(args, "--max-total-tokens") == "4096"
    assert value(args, "--max-input-tokens") == "4095"  # input < total
    assert value(args, "--max-batch-prefill-tokens") == "4095"  # >= input: no chunking
    assert value(args, "--cuda-memory-fraction") == "0.9"
    assert value(args, "--usage-stats") == "off"
    assert "--kv-cache-dtype" not in args
    if method == "none":
        assert "--speculate" not in args
    else:
        assert value(args, "--speculate") == "3"
    assert launch.argv[0] == ("text-generation-launcher" if engine == "native" else engine)
    assert launch.model == "tgi"
    assert launch.health_url == "http://127.0.0.1:8080/health"
    assert launch.base_url == "http://127.0.0.1:8080/v1"
    assert launch.metrics_url == "http://127.0.0.1:8080/metrics"


def test_native_argv() -> None:
    plan = tgi_plan(options=TgiOptions(engine="native"), port=8081)
    assert TGI.launch(plan, ASSUMED).argv == (
        "text-generation-launcher", "--model-id", "Qwen/Qwen2.5-Coder-7B-Instruct",
        "--hostname", "127.0.0.1", "--port", "8081", "--num-shard", "1",
        "--max-input-tokens", "4095", "--max-total-tokens", "4096",
        "--max-batch-prefill-tokens", "4095", "--cuda-memory-fraction", "0.9",
        "--usage-stats", "off", "--speculate", "4")


def test_docker_argv() -> None:
    plan = tgi_plan(port=8081)
    assert TGI.launch(plan, ASSUMED).argv == (
        "docker", "run", "--rm", "--name", "specctl-cpu-demo", "--gpus", "all",
        "--shm-size", "1g", "-p", "127.0.0.1:8081:80", "-v", f"{HF_HOME}:/data",
        "-e", "HF_TOKEN", "-e", "HF_HUB_OFFLINE", IMAGE,
        "--model-id", "Qwen/Qwen2.5-Coder-7B-Instruct", "--hostname", "0.0.0.0", "--port", "80",
        "--num-shard", "1", "--max-input-tokens", "4095", "--max-total-tokens", "4096",
        "--max-batch-prefill-tokens", "4095", "--cuda-memory-fraction", "0.9",
        "--usage-stats", "off", "--speculate", "4")


def test_a_medusa_target_not_speculating_is_told_zero() -> None:
    """TGI loads every Medusa head unless told `--speculate 0`: the baseline must say so."""
    plan = tgi_plan(target=medusa(), method="medusa", k=3).baseline()
    assert value(launcher_args(TGI.launch(plan, ASSUMED)), "--speculate") == "0"


def test_fp8_kv_cache_and_the_others() -> None:
    assert TGI.cache_types == ("f16", "fp8")
    assert recorded()["--kv-cache-dtype"].possible_values == ("fp8_e4m3fn", "fp8_e5m2")
    plan = tgi_plan(memory=plans.memory(cache_type="fp8"))
    assert value(TGI.launch(plan, ASSUMED).argv, "--kv-cache-dtype") == "fp8_e4m3fn"
    with pytest.raises(BackendError, match="no 'q8_0' KV cache"):
        TGI.launch(tgi_plan(memory=plans.memory(cache_type="q8_0")), ASSUMED)


def test_revision_and_prometheus_port() -> None:
    opts = TgiOptions(engine="native", revision="refs/pr/1", prometheus_port=9123)
    argv = TGI.launch(tgi_plan(options=opts), ASSUMED).argv
    assert ("--revision", "refs/pr/1") in pairs(argv)
    assert ("--prometheus-port", "9123") in pairs(argv)
    docker = TGI.launch(tgi_plan(options=opts.model_copy(update={"engine": "docker"})), ASSUMED)
    assert "--prometheus-port" not in docker.argv  # its own network namespace: no clash


# --- the container command --------------------------------------------------------------------


def test_container_mounts_env_ports_and_gpus() -> None:
    plan = tgi_plan(target=medusa(), method="medusa", k=3, port=8123, profile="my box")
    docker = TGI.launch(plan, ASSUMED).argv
    assert docker[:4] == ("docker", "run", "--rm", "--name")
    assert value(docker, "--name") == "specctl-my-box"
    assert ("--gpus", "all") in pairs(docker)
    assert ("--shm-size", "1g") in pairs(docker)
    assert ("-p", "127.0.0.1:8123:80") in pairs(docker)
    assert ("-v", f"{HF_HOME}:/data") in pairs(docker)
    assert ("-v", "/models/medusa-vicuna-7b:/models/medusa-vicuna-7b:ro") in pairs(docker)
    assert ("--model-id", "/models/medusa-vicuna-7b") in pairs(docker)
    envs = [docker[i + 1] for i, a in enumerate(docker) if a == "-e"]
    assert envs == ["HF_TOKEN", "HF_HUB_OFFLINE"]  # by name; no API_KEY without a key
    assert all("=" not in e for e in envs)
    assert docker.index(IMAGE) > max(i for i, a in enumerate(docker) if a in ("-v", "-e", "-p"))

    podman = TGI.launch(plan.but(options=Mounted(engine="podman", hf_cache=HF_HOME)),
                        ASSUMED).argv
    assert podman[0] == "podman"
    assert ("--device", "nvidia.com/gpu=all") in pairs(podman)  # CDI
    assert "--gpus" not in podman
    assert launcher_args(TGI.launch(plan, ASSUMED)) == [
        a for a in podman[podman.index(IMAGE) + 1:]]


def test_a_model_in_a_cache_snapshot_mounts_its_repo_folder() -> None:
    """Snapshot files are links into ../../blobs: the repo folder is mounted, not the snapshot."""
    snap = Path("/srv/hub/models--org--tiny/snapshots/0123abcd")
    argv = TGI.launch(tgi_plan(target=qwen7b(ref=str(snap), path=snap)), ASSUMED).argv
    assert ("-v", "/srv/hub/models--org--tiny:/models/models--org--tiny:ro") in pairs(argv)
    assert ("--model-id", "/models/models--org--tiny/snapshots/0123abcd") in pairs(argv)


def test_a_relative_model_folder_or_a_split_argument_is_refused() -> None:
    with pytest.raises(BackendError, match="absolute path"):
        TGI.launch(tgi_plan(target=qwen7b(ref="models/x", path=Path("models/x"))), ASSUMED)
    spaced = Mounted(hf_cache=HF_HOME, extra_args=("--otlp-service-name", "my tgi"))
    with pytest.raises(BackendError, match="split or globbed"):
        TGI.launch(tgi_plan(options=spaced), ASSUMED)
    # natively there is no shell in between: the same argument is fine
    native = spaced.model_copy(update={"engine": "native"})
    assert ("--otlp-service-name", "my tgi") in pairs(TGI.launch(tgi_plan(options=native),
                                                                 ASSUMED).argv)


@pytest.mark.parametrize(("host", "published", "url"), [
    ("127.0.0.1", "127.0.0.1:8080:80", "http://127.0.0.1:8080"),
    ("localhost", "127.0.0.1:8080:80", "http://localhost:8080"),
    ("0.0.0.0", "0.0.0.0:8080:80", "http://127.0.0.1:8080"),
    ("10.1.2.3", "10.1.2.3:8080:80", "http://10.1.2.3:8080"),
    ("::1", "[::1]:8080:80", "http://[::1]:8080"),
])
def test_the_published_port_binds_the_profiles_host(host: str, published: str, url: str
                                                    ) -> None:
    launch = TGI.launch(tgi_plan(host=host, api_key_env="TGI_KEY"), ASSUMED)
    assert ("-p", published) in pairs(launch.argv)
    assert launch.health_url == f"{url}/health"
    native = TGI.launch(tgi_plan(host=host, options=TgiOptions(engine="native")), ASSUMED)
    assert ("--hostname", host) in pairs(native.argv)


# --- the API key --------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["native", "docker", "podman"])
def test_the_api_key_never_enters_argv(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TGI_KEY", "s3cret-value")
    opts = Mounted.model_validate({"engine": engine, "hf_cache": HF_HOME})
    launch = TGI.launch(tgi_plan(options=opts, api_key_env="TGI_KEY"), ASSUMED)
    assert "s3cret-value" not in " ".join(launch.argv)
    assert "--api-key" not in launch.argv
    assert launch.env == {}
    assert launch.env_from == {"API_KEY": "TGI_KEY"}  # the launcher reads API_KEY (clap env)
    assert recorded()["--api-key"].env == "API_KEY"
    if engine != "native":
        assert ("-e", "API_KEY") in pairs(launch.argv)  # into the container by name
    env = server_env(launch, {"TGI_KEY": "s3cret-value", "PATH": "/bin"})
    assert env["API_KEY"] == "s3cret-value"  # the engine or launcher process gets it
    assert Endpoint.of(launch, {"TGI_KEY": "s3cret-value"}).api_key == "s3cret-value"


def test_extra_args_are_checked_against_the_recorded_options() -> None:
    opts = Mounted(hf_cache=HF_HOME, trust_remote_code=True,
                   extra_args=("--max-concurrent-requests", "64"))
    args = launcher_args(TGI.launch(tgi_plan(options=opts), ASSUMED))
    assert args[-2:] == ["--max-concurrent-requests", "64"]
    assert args.count("--trust-remote-code") == 1
    with pytest.raises(ValidationError, match="trust_remote_code = true"):
        TgiOptions(extra_args=("--trust-remote-code",))
    with pytest.raises(ValidationError, match="not a tuning flag"):
        TgiOptions(extra_args=("--weights-cache-override", "/"))
    with pytest.raises(ValidationError, match="unknown option --speculative-tokens"):
        TgiOptions(extra_args=("--speculative-tokens", "4"))
    with pytest.raises(ValidationError, match="api_key_env"):
        TgiOptions(extra_args=("--api-key", "s3cret"))
    with pytest.raises(ValidationError, match="--speculate is set from the profile"):
        TgiOptions(extra_args=("--speculate=2",))
    with pytest.raises(ValidationError, match="ambiguous"):
        TgiOptions(extra_args=("-p", "9000"))
    with pytest.raises(ValidationError, match="not a size"):
        TgiOptions(shm_size="lots")


# --- Medusa and the backend's rules ---------------------------------------------------------


def test_medusa_needs_heads_and_k_within_them() -> None:
    with pytest.raises(BackendError, match=r"has no Medusa heads.*FasterDecoding"):
        TGI.launch(tgi_plan(method="medusa", k=3), ASSUMED)
    with pytest.raises(BackendError, match=r"has 5 Medusa heads.*set k = 5 or less"):
        TGI.launch(tgi_plan(target=medusa(), method="medusa", k=6), ASSUMED)
    with pytest.raises(BackendError, match="never n-gram"):
        TGI.launch(tgi_plan(target=medusa(), method="ngram", k=3), ASSUMED)
    with pytest.raises(BackendError, match="no 'draft' speculation"):
        TGI.launch(tgi_plan(method="draft", draft=plans.draft()), ASSUMED)
    notes = TGI.check(TgiOptions(), machine(H100), medusa(), None)
    assert any("5 Medusa heads" in n for n in notes)


def test_check_the_machine_and_the_shards() -> None:
    with pytest.raises(ProfileError, match="NVIDIA CUDA GPUs"):
        TGI.check(TgiOptions(), machine("linux_cpu_2c_24g"), qwen7b(), None)
    with pytest.raises(ProfileError, match="NVIDIA CUDA GPUs"):
        TGI.check(TgiOptions(), machine("macos_m3_ultra_96g"), qwen7b(), None)
    with pytest.raises(ProfileError, match="num_shard = 2, but linux_1x_h100_80g has 1 GPUs"):
        TGI.check(TgiOptions(num_shard=2), machine(H100), qwen7b(), None)
    with pytest.raises(ProfileError, match=re.escape(
            "does not divide Qwen2.5-Coder-7B-Instruct's 28 attention heads")):
        TGI.check(TgiOptions(num_shard=8), machine(H100X8), qwen7b(), None)
    with pytest.raises(ProfileError, match="4 KV heads"):
        TGI.check(TgiOptions(num_shard=7), machine(H100X8), qwen7b(heads=28), None)
    assert TGI.check(TgiOptions(num_shard=4), machine(H100X8), qwen7b(), None)
    assert TGI.devices(TgiOptions()) == 1
    assert TGI.devices(TgiOptions(num_shard=4)) == 4


def test_the_shards_follow_the_planned_devices() -> None:
    """Without num_shard, the GPUs the memory budget counted (devices() = 1)."""
    plan = tgi_plan(H100X8, memory=replace(plans.memory(),
                                                 budget=Budget(143 << 30, "2 GPUs", devices=2)))
    assert value(TGI.launch(plan, ASSUMED).argv, "--num-shard") == "2"


def test_ranked_after_vllm_and_llamacpp_on_cuda_only() -> None:
    order = registry.default_order("cuda")
    assert order.index("tgi") > max(order.index("vllm"), order.index("llamacpp"))
    assert "tgi" not in registry.default_order("cpu") + registry.default_order("metal")
    assert TGI.runs_on == frozenset({"cuda"})
    assert (TGI.formats, TGI.vocab_rule, TGI.default_quant) == (frozenset({"hf"}), "identical",
                                                                 "BF16")
    assert "maintenance mode" in TGI.install_hint and "vLLM" in TGI.install_hint


# --- through the registry and the planner -----------------------------------------------------


def medusa_folder(root: Path, heads: int = 3) -> Path:
    """A tiny local Medusa model folder: a Llama-shaped config.json with medusa_num_heads."""
    folder = root / "medusa-tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
        "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
        "vocab_size": 1000, "torch_dtype": "bfloat16", "medusa_num_heads": heads,
        "medusa_num_layers": 1, "base_model_name_or_path": "org/tiny-llama"}))
    (folder / "medusa_lm_head.safetensors").write_bytes(b"\0" * 4096)
    return folder


def write_profile(root: Path, body: str) -> Path:
    path = root / "tgi-medusa.toml"
    path.write_text('backend = ["tgi"]\n' + body)
    return path


def test_resolve_a_local_medusa_folder_through_the_registry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hf_home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    folder = medusa_folder(tmp_path)
    profile = write_profile(tmp_path, f'target = "{folder}"\ndraft_method = "medusa"\nk = 2\n'
                                      '[server]\nport = 8123\ncontext = 1024\n')
    resolved = App.from_env().resolve(str(profile), HARDWARE / f"{H100}.json")
    plan = resolved.plan
    assert (plan.backend, plan.method, plan.k) == ("tgi", "medusa", 2)
    assert (plan.target.kind, plan.target.spec_heads) == ("medusa", 3)
    assert resolved.installed.assumed  # planned for a recorded machine: the newest dialect
    assert isinstance(plan.options, Mounted)
    assert plan.options.hf_cache == str(hf_home)  # filled in by the plan, not by launch
    assert any("mounted as /data" in r for r in plan.reasons)
    assert any("3 Medusa heads" in r for r in plan.reasons)
    argv = resolved.launch().argv
    assert argv[0] == "docker"
    assert ("-v", f"{folder}:/models/medusa-tiny:ro") in pairs(argv)
    assert ("-v", f"{hf_home}:/data") in pairs(argv)
    assert ("-p", "127.0.0.1:8123:80") in pairs(argv)
    args = launcher_args(resolved.launch())
    assert validate(args, recorded()) == []
    assert ("--model-id", "/models/medusa-tiny") in pairs(tuple(args))
    assert ("--speculate", "2") in pairs(tuple(args))
    assert ("--max-total-tokens", "1024") in pairs(tuple(args))

    native = write_profile(tmp_path, f'target = "{folder}"\ndraft_method = "medusa"\nk = 3\n'
                                     '[tgi]\nengine = "native"\nnum_shard = 1\n')
    resolved = App.from_env().resolve(str(native), HARDWARE / f"{H100X8}.json")
    assert isinstance(resolved.plan.options, TgiOptions)
    assert not isinstance(resolved.plan.options, Mounted)  # nothing to mount natively
    argv = resolved.launch().argv
    assert argv[:3] == ("text-generation-launcher", "--model-id", str(folder))
    assert ("--speculate", "3") in pairs(argv)
    assert validate(argv[1:], recorded()) == []


def test_resolve_refuses_too_many_medusa_tokens(tmp_path: Path) -> None:
    folder = medusa_folder(tmp_path, heads=2)
    profile = write_profile(tmp_path, f'target = "{folder}"\ndraft_method = "medusa"\nk = 4\n')
    resolved = App.from_env().resolve(str(profile), HARDWARE / f"{H100}.json")
    with pytest.raises(BackendError, match="has 2 Medusa heads"):
        resolved.launch()


def test_a_non_loopback_host_needs_an_api_key(tmp_path: Path) -> None:
    folder = medusa_folder(tmp_path)
    body = f'target = "{folder}"\ndraft_method = "medusa"\nk = 2\n[server]\nhost = "0.0.0.0"\n'
    with pytest.raises(ProfileError, match=re.escape(
            "exposes the server beyond this machine; set server.api_key_env")):
        App.from_env().resolve(str(write_profile(tmp_path, body)), HARDWARE / f"{H100}.json")
    keyed = write_profile(tmp_path, body + 'api_key_env = "TGI_KEY"\n')
    launch = App.from_env().resolve(str(keyed), HARDWARE / f"{H100}.json").launch()
    assert ("-p", "0.0.0.0:8080:80") in pairs(launch.argv)
    assert ("-e", "API_KEY") in pairs(launch.argv)
    assert launch.env_from == {"API_KEY": "TGI_KEY"}


def test_medusa_without_heads_is_refused_through_the_planner(tmp_path: Path) -> None:
    folder = medusa_folder(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    del config["medusa_num_heads"]
    (folder / "config.json").write_text(json.dumps(config))
    profile = write_profile(tmp_path, f'target = "{folder}"\ndraft_method = "medusa"\nk = 2\n')
    resolved = App.from_env().resolve(str(profile), HARDWARE / f"{H100}.json")
    with pytest.raises(BackendError, match="has no Medusa heads"):
        resolved.launch()


def test_the_shipped_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             isolated_dirs: Dirs) -> None:
    """cuda-h100-tgi-medusa plans once its model is in the local HF cache (the catalog does not
    know Medusa repos; see the profile)."""
    loaded = profiles.load("cuda-h100-tgi-medusa", isolated_dirs)
    assert loaded.description and loaded.backend == ["tgi"]
    assert (loaded.draft_method, loaded.k) == ("medusa", 3)
    hub = tmp_path / "hub"
    snap = hub / "models--FasterDecoding--medusa-vicuna-7b-v1.3" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({
        "medusa_num_heads": 5, "medusa_num_layers": 1,
        "base_model_name_or_path": "lmsys/vicuna-7b-v1.3"}))
    (snap / "medusa_lm_head.safetensors").write_bytes(b"\0" * 4096)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    resolved = App.from_env().resolve("cuda-h100-tgi-medusa", HARDWARE / f"{H100}.json")
    argv = resolved.launch().argv
    assert ("--model-id", "FasterDecoding/medusa-vicuna-7b-v1.3") in pairs(argv)
    assert ("--revision", "refs/pr/1") in pairs(argv)
    assert ("--speculate", "3") in pairs(argv)
    assert ("-v", f"{hub}:/data/hub") in pairs(argv)  # HF_HUB_CACHE outside HF_HOME
    assert validate(launcher_args(resolved.launch()), recorded()) == []


def test_default_hf_dirs(tmp_path: Path) -> None:
    home = Path("/home/me")
    assert default_hf_dirs({}, home) == (f"{HF_HOME}", None)
    assert default_hf_dirs({"HF_HOME": "/big/hf"}, home) == ("/big/hf", None)
    assert default_hf_dirs({"HF_HOME": "/big/hf", "HF_HUB_CACHE": "/big/hf/hub"}, home) == (
        "/big/hf", None)
    assert default_hf_dirs({"HF_HUB_CACHE": "/fast/hub"}, home) == (HF_HOME, "/fast/hub")


def test_resources_fill_the_cache_only_for_a_container(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", "/data1/hf")
    monkeypatch.setenv("HF_HUB_CACHE", "/data2/hub")
    budget = Budget(71 << 30, "1x H100")
    native = TGI.resources(TgiOptions(engine="native"), ASSUMED, machine(H100), budget)
    assert native.options is None and native.extra_bytes == 0
    found = TGI.resources(TgiOptions(), ASSUMED, machine(H100), budget).options
    assert isinstance(found, Mounted)
    assert (found.hf_cache, found.hf_hub_cache) == ("/data1/hf", "/data2/hub")
    mine = Mounted(hf_cache="/mine")
    assert TGI.resources(mine, ASSUMED, machine(H100), budget).options is None


# --- metrics --------------------------------------------------------------------------------

SUMMARY = """\
# HELP tgi_request_skipped_tokens Speculated tokens per request
# TYPE tgi_request_skipped_tokens summary
tgi_request_skipped_tokens{quantile="0"} 0
tgi_request_skipped_tokens{quantile="0.5"} 1.9990234375
tgi_request_skipped_tokens{quantile="0.9"} 3.0009765625
tgi_request_skipped_tokens{quantile="1"} 3
tgi_request_skipped_tokens_sum 377
tgi_request_skipped_tokens_count 212
# TYPE tgi_request_count counter
tgi_request_count 12
# TYPE tgi_request_generated_tokens histogram
tgi_request_generated_tokens_bucket{le="64"} 12
tgi_request_generated_tokens_bucket{le="+Inf"} 12
tgi_request_generated_tokens_sum 600
tgi_request_generated_tokens_count 12
"""


def test_spec_stats_from_the_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    stats = stats_from_metrics(SUMMARY)
    assert (stats.accepted, stats.drafted, stats.drafts) == (377, 0, 0)
    assert stats.acceptance_rate is None and stats.mean_accepted_length is None
    assert "does not count drafted tokens" in stats.source
    assert stats_from_metrics("# TYPE x counter\nx_total 1\n").accepted == 0  # not speculating
    untyped = "tgi_request_skipped_tokens_sum 5\ntgi_request_skipped_tokens_count 3\n"
    assert stats_from_metrics(untyped).accepted == 5
    seen: list[Endpoint] = []

    def fetch(endpoint: Endpoint, timeout: float = 5.0) -> str:
        seen.append(endpoint)
        return SUMMARY

    monkeypatch.setattr(prometheus, "fetch", fetch)
    launch = TGI.launch(tgi_plan(), ASSUMED)
    assert TGI.spec_stats(Endpoint.of(launch, {})).accepted == 377
    assert seen[0].metrics == "http://127.0.0.1:8080/metrics"
    with pytest.raises(BackendError, match="not Prometheus text"):
        stats_from_metrics("tgi_request_skipped_tokens_sum{ 3\n")


# --- probe ----------------------------------------------------------------------------------


def script(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_probe_finds_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert Tgi().probe() is None
    assert Tgi(launcher=tmp_path / "missing").probe() is None


def test_probe_the_launcher(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                            isolated_dirs: Dirs) -> None:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    monkeypatch.setenv("PATH", str(bin_))
    launcher = script(bin_, "text-generation-launcher",
                      'echo "text-generation-launcher 3.3.6-dev0"')
    script(bin_, "docker", "echo 27.3.1")
    found = Tgi().probe()
    assert found == Installed(backend="tgi", version="3.3.6-dev0", dialect=DIALECT,
                              path=str(launcher), flags=frozenset(recorded()),
                              methods=frozenset({"none", "ngram", "medusa"}))
    assert "--speculate" in found.flags and "--cuda-memory-fraction" in found.flags
    argv = TGI.launch(tgi_plan(options=TgiOptions()), found).argv
    assert argv[0] == str(launcher)  # auto: what was found
    monkeypatch.setenv("SPECCTL_TGI_LAUNCHER", str(launcher))
    assert Tgi.create(isolated_dirs).launcher == launcher


def test_probe_a_container_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    monkeypatch.setenv("PATH", str(bin_))
    script(bin_, "docker", 'echo "Cannot connect to the Docker daemon" >&2; exit 1')
    assert Tgi().probe() is None  # a client without its daemon cannot run anything
    podman = script(bin_, "podman", '[ "$1" = version ] && echo 5.2.2')
    found = Tgi().probe()
    assert found is not None
    assert (found.version, found.dialect, found.path) == ("3.3.7", DIALECT, str(podman))
    argv = TGI.launch(tgi_plan(options=Mounted(hf_cache=HF_HOME)), found).argv
    assert argv[0] == str(podman) and ("--device", "nvidia.com/gpu=all") in pairs(argv)
    assert TGI.launch(tgi_plan(), ASSUMED).argv[0] == "docker"  # nothing probed: docker


def test_parse_version() -> None:
    assert parse_version("text-generation-launcher 3.3.6-dev0\n") == "3.3.6-dev0"
    assert parse_version("3.2.1") == "3.2.1"
    assert parse_version("usage: ...") is None
    assert TGI.assumed().assumed and TGI.assumed().version == DIALECT
