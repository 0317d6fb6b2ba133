"""planner.resolve: backend choice, draft checks, memory, k, security, and the reasons."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from specctl.adapters.llamacpp import LlamaCpp
from specctl.adapters.ollama import Ollama
from specctl.adapters.vllm import Vllm
from specctl.orchestrator.app import App
from specctl.orchestrator.config.profiles import profile_model
from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.contract.launch import Installed
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.errors import (
    BackendError,
    DoesNotFitError,
    IncompatibleDraftError,
    ProfileError,
)
from specctl.orchestrator.measure.results import tuned
from specctl.orchestrator.models.resolve import Resolver
from specctl.orchestrator.planning import costmodel, drafts, planner
from specctl.orchestrator.sizes import GIB
from tests.conftest import HARDWARE, recorded

TARGET_70B = "hf:bartowski/Meta-Llama-3.1-70B-Instruct-GGUF:Q4_K_M"
DRAFT_1B = "hf:bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0"
MAC = "macos_m3_ultra_96g"


def registry() -> dict[str, Adapter]:
    return {"llamacpp": LlamaCpp(), "vllm": Vllm(), "ollama": Ollama()}


def built_for(data: dict[str, Any], machine: str, hub: Path) -> planner.Built:
    """The planner's first two stages on a recorded machine (no draft candidates gathered)."""
    profile = profile_model().model_validate({"name": "test", **data})
    resolver = Resolver(models_dir=Dirs.from_env().models, hf_hub=hub)
    facts = planner.Facts(recorded(machine), registry(), None, resolver)
    return planner.build(planner.choose(profile, facts))


def plan_for(data: dict[str, Any], machine: str, hub: Path,
             saved: planner.Saved = None) -> tuple[Plan, Installed]:
    """The plan (with `saved`, the saved tune looked up for it) and the build it is for."""
    built = built_for(data, machine, hub)
    return planner.finish(built, saved), built.installed


def saved_tune(**changes: Any) -> tuned.Result:
    """A saved `specctl tune` result, as measure/results/tuned.py reads one back."""
    return tuned.Result.from_json({
        "profile": "test", "method": "draft", "k": 3, "p_min": 0.4, "speedup": 1.7,
        "summary": "k=3 p-min 0.4: 1.70x", "alpha": 0.7, "cost": 0.1, "verify": {"3": 1.7},
        "baseline_tps": 10.0, **changes})


def mac_profile(**changes: Any) -> dict[str, Any]:
    return {"target": TARGET_70B, "draft": DRAFT_1B, "backend": ["llamacpp"], **changes}


def test_70b_on_the_m3_ultra(tmp_path: Path) -> None:
    plan, installed = plan_for(mac_profile(), MAC, tmp_path)
    assert plan.backend == "llamacpp"
    assert installed.assumed
    assert plan.method == "draft"
    assert plan.draft is not None and plan.draft.name == "Llama-3.2-1B-Instruct"
    assert 1 <= plan.k <= drafts.MAX_PREDICTED_K
    assert plan.k_source == "cost model"
    assert 40 * GIB <= plan.memory.total_bytes <= 55 * GIB
    argv = LlamaCpp().launch(plan, installed).argv
    assert ("--fit", "on") in set(itertools.pairwise(argv))  # llama.cpp fits it to Metal
    assert "-ngl" not in argv  # llama.cpp's --fit leaves alone what is set: nothing
    off, _ = plan_for(mac_profile(llamacpp={"fit": "off"}), MAC, tmp_path)
    argv = LlamaCpp().launch(off, installed).argv
    assert ("-ngl", "999") in set(itertools.pairwise(argv))  # all layers on the GPU
    assert "--fit" not in argv
    assert plan.threads is None  # only CPU plans pin threads
    assert plan.reasons[0].startswith("Backend llamacpp")
    assert any(r.startswith("Draft Llama-3.2-1B-Instruct is compatible") for r in plan.reasons)
    assert any(r.startswith("Memory: ") for r in plan.reasons)
    assert plan.reasons[-1].startswith("Speculation: draft Llama-3.2-1B-Instruct")
    assert "cost model" in plan.reasons[-1]


def test_auto_k_follows_the_cost_model(tmp_path: Path) -> None:
    plan, _ = plan_for(mac_profile(), MAC, tmp_path)
    assert plan.draft is not None
    c = plan.draft.size_bytes / plan.target.size_bytes
    alpha = drafts.ALPHA_SAME_FAMILY  # a Llama draft for a Llama target
    expected = costmodel.best(costmodel.curve(alpha, c, drafts.MAX_PREDICTED_K))
    assert plan.k == expected.k
    said = plan.reasons[-1]  # what it assumed, and no speedup the machine has not measured
    assert f"acceptance {alpha}" in said and "not measured here" in said
    assert "predicted" not in said and f"{expected.speedup:.2f}x" not in said


def test_k_from_the_profile(tmp_path: Path) -> None:
    plan, _ = plan_for(mac_profile(k=3), MAC, tmp_path)
    assert (plan.k, plan.k_source) == (3, "profile")
    assert "k=3 from the profile" in plan.reasons[-1]


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "my-server.example.com", "::"])
def test_non_loopback_host_needs_an_api_key(host: str, tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"server\.api_key_env") as info:
        plan_for(mac_profile(server={"host": host}), MAC, tmp_path)
    assert f"server.host = {host}" in str(info.value)


def test_non_loopback_host_with_an_api_key(tmp_path: Path) -> None:
    plan, installed = plan_for(
        mac_profile(server={"host": "0.0.0.0", "api_key_env": "SPECCTL_TEST_KEY"}), MAC,
        tmp_path)
    assert plan.host == "0.0.0.0"
    assert plan.api_key_env == "SPECCTL_TEST_KEY"
    launch = LlamaCpp().launch(plan, installed)
    assert launch.env_from == {"LLAMA_API_KEY": "SPECCTL_TEST_KEY"}


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_hosts_need_no_key(host: str, tmp_path: Path) -> None:
    plan, _ = plan_for(mac_profile(server={"host": host}), MAC, tmp_path)
    assert plan.host == host


def test_draft_none(tmp_path: Path) -> None:
    plan, installed = plan_for(mac_profile(draft="none"), MAC, tmp_path)
    assert plan.method == "none"
    assert plan.draft is None
    assert plan.k == 0
    assert not plan.speculative
    assert plan.memory.draft_bytes == 0
    assert plan.reasons[-1] == 'Speculation off: draft = "none".'  # no stutter
    argv = LlamaCpp().launch(plan, installed).argv
    for flag in ("-md", "-hfd", "--spec-type", "--spec-draft-n-max"):
        assert flag not in argv


def test_draft_ngram(tmp_path: Path) -> None:
    plan, installed = plan_for(mac_profile(draft="ngram"), MAC, tmp_path)
    assert plan.method == "ngram"
    assert plan.draft is None
    assert plan.k == planner.DEFAULT_K["ngram"]
    argv = LlamaCpp().launch(plan, installed).argv
    assert ("--spec-type", "ngram-simple") in set(itertools.pairwise(argv))
    assert "-md" not in argv and "-hfd" not in argv


def test_draft_auto_needs_a_named_draft(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="name a draft model"):
        plan_for(mac_profile(draft="auto"), MAC, tmp_path)


@pytest.mark.server  # reads the real testbed files
def test_incompatible_draft_from_a_profile_file(tmp_path: Path) -> None:
    path = tmp_path / "bad-pair.toml"
    path.write_text('target = "testbed:qwen-1.5b-q4"\ndraft = "testbed:smollm2-135m"\n'
                    'backend = ["llamacpp"]\n[server]\ncontext = 4096\n')
    with pytest.raises(IncompatibleDraftError) as info:
        App.from_env().resolve(str(path), HARDWARE / "linux_cpu_2c_24g.json")
    message = str(info.value)
    assert "vocab sizes differ by 102784" in message
    assert "on llamacpp" in message
    assert "same model family" in message


def test_vllm_refuses_the_padded_qwen_pair(tmp_path: Path) -> None:
    # the shipped profile uses llama.cpp because vLLM needs identical vocabularies
    data = {"target": "hf:bartowski/Qwen2.5-Coder-32B-Instruct-GGUF:Q4_K_M",
            "draft": "hf:bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q8_0"}
    originals = {"target": "hf:Qwen/Qwen2.5-Coder-32B-Instruct",
                 "draft": "hf:Qwen/Qwen2.5-Coder-0.5B-Instruct"}
    with pytest.raises(IncompatibleDraftError,
                       match=r"needs identical vocabularies.*\[vllm\] heterogeneous_vocab"):
        plan_for({**originals, "backend": ["vllm"]}, "linux_1x_rtx4090_24g", tmp_path)
    with pytest.raises(ProfileError, match=r"is a GGUF file, which vllm cannot load; use "
                       r"hf:Qwen/Qwen2\.5-Coder-32B-Instruct as the target"):
        plan_for({**data, "backend": ["vllm"]}, "linux_1x_rtx4090_24g", tmp_path)
    plan, _ = plan_for({**data, "backend": ["llamacpp"], "memory": {"gpu_utilization": 0.95}},
                       "linux_1x_rtx4090_24g", tmp_path)
    assert plan.backend == "llamacpp"


def test_default_backend_on_cuda_is_vllm(tmp_path: Path) -> None:
    data = {"target": "hf:hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4",
            "draft": "hf:meta-llama/Llama-3.2-1B-Instruct"}
    plan, installed = plan_for(data, "linux_1x_h100_80g", tmp_path)
    assert plan.backend == "vllm"
    assert installed.version == "0.33.0"
    assert "the default for CUDA machines (vllm > llamacpp > ollama)" in plan.reasons[0]


def test_default_backend_on_metal_is_llamacpp(tmp_path: Path) -> None:
    plan, _ = plan_for({"target": TARGET_70B, "draft": DRAFT_1B}, MAC, tmp_path)
    assert plan.backend == "llamacpp"


def test_backend_that_cannot_run_here(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="none of vllm runs on a metal machine"):
        plan_for(mac_profile(backend=["vllm"]), MAC, tmp_path)


def test_does_not_fit_names_profile_and_machine(tmp_path: Path) -> None:
    with pytest.raises(DoesNotFitError) as info:
        plan_for(mac_profile(), "linux_cpu_2c_24g", tmp_path)
    message = str(info.value)
    assert message.startswith("test on linux_cpu_2c_24g: needs ")
    assert "budget is 21.4 GiB" in message
    assert "system RAM" not in message  # a CPU machine has nothing to spill into


def test_profile_budget_shortens_context(tmp_path: Path) -> None:
    plan, _ = plan_for(mac_profile(memory={"budget_gb": 44.0}), MAC, tmp_path)
    assert plan.memory.budget.limit == 44 * GIB
    assert plan.memory.fits
    assert (plan.context, plan.cache_type) != (8192, "f16")
    assert any("to fit" in r for r in plan.reasons)


def test_tensor_parallel_budget_uses_that_many_gpus(tmp_path: Path) -> None:
    data = {"target": "hf:meta-llama/Llama-3.1-70B-Instruct",
            "draft": "hf:meta-llama/Llama-3.2-1B-Instruct", "backend": ["vllm"]}
    with pytest.raises(DoesNotFitError):  # 141 GB of BF16 weights on one H100, as asked
        plan_for({**data, "vllm": {"tensor_parallel": 1}}, "linux_8x_h100_80g", tmp_path)
    plan, installed = plan_for({**data, "vllm": {"tensor_parallel": 4}}, "linux_8x_h100_80g",
                               tmp_path)
    assert plan.memory.budget.devices == 4
    assert plan.memory.budget.limit == 4 * round(79.6 * GIB * 0.9)
    argv = Vllm().launch(plan, installed).argv
    assert ("--tensor-parallel-size", "4") in set(itertools.pairwise(argv))


def test_tuned_result_replaces_the_cost_model(tmp_path: Path) -> None:
    built = built_for(mac_profile(), MAC, tmp_path)
    assert built.tunable  # the command looks a saved tune up for this plan
    plan = planner.finish(built, saved_tune())
    installed = built.installed  # looked up for the backend build it will run on
    assert (plan.k, plan.p_min, plan.k_source) == (3, 0.4, "tuned")
    assert plan.draft is not None
    assert "(tuned)" in plan.reasons[-1]
    assert "k=3 p-min 0.4: 1.70x" in plan.reasons[-1]  # the tune summary
    argv = LlamaCpp().launch(plan, installed).argv
    assert ("--spec-draft-p-min", "0.4") in set(itertools.pairwise(argv))


def test_tuned_result_is_not_asked_when_k_is_fixed(tmp_path: Path) -> None:
    built = built_for(mac_profile(k=2), MAC, tmp_path)
    assert not built.tunable  # a fixed k must not be replaced: none is looked up
    plan = planner.finish(built, saved_tune())
    assert plan.k == 2


def test_vllm_speculative_config(tmp_path: Path) -> None:
    data = {"target": "hf:hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4",
            "draft": "hf:meta-llama/Llama-3.2-1B-Instruct", "backend": ["vllm"], "k": 4}
    plan, installed = plan_for(data, "linux_1x_h100_80g", tmp_path)
    argv = Vllm().launch(plan, installed).argv
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "draft_model", "num_speculative_tokens": 4,
                    "model": "meta-llama/Llama-3.2-1B-Instruct"}
    ngram, installed = plan_for({**data, "draft": "ngram"}, "linux_1x_h100_80g", tmp_path)
    argv = Vllm().launch(ngram, installed).argv
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["method"] == "ngram"
    assert spec["prompt_lookup_min"] == 2 and spec["prompt_lookup_max"] == 4
