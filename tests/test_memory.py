"""The memory plan: budgets per machine kind, fitting by cache type and context, refusals."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specctl.adapters.llamacpp import LlamaCpp
from specctl.adapters.vllm import Vllm
from specctl.orchestrator.config.profiles import Memory
from specctl.orchestrator.contract.memory import Budget
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.errors import DoesNotFitError
from specctl.orchestrator.models.resolve import Resolver
from specctl.orchestrator.planning import memory
from specctl.orchestrator.planning.memory import estimate
from specctl.orchestrator.sizes import GIB
from tests.conftest import recorded

TARGET_70B = "hf:bartowski/Meta-Llama-3.1-70B-Instruct-GGUF:Q4_K_M"
DRAFT_1B = "hf:bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0"
LLAMACPP_TYPES = LlamaCpp.cache_types
CTX = 8192


@pytest.fixture
def pair(tmp_path: Path) -> tuple[ModelInfo, ModelInfo]:
    resolver = Resolver(models_dir=tmp_path / "models", hf_hub=tmp_path / "hub")
    return resolver.resolve(TARGET_70B), resolver.resolve(DRAFT_1B)


def _total(pair: tuple[ModelInfo, ModelInfo], context: int, cache_type: str) -> int:
    return estimate(pair[0], pair[1], context, cache_type, Budget(1 << 50, "any")).total_bytes


def test_70b_pair_fits_the_m3_ultra(pair: tuple[ModelInfo, ModelInfo]) -> None:
    hw = recorded("macos_m3_ultra_96g")
    budget = memory.budget_for(hw, Memory())
    plan, notes = memory.plan(*pair, CTX, Memory(), budget, LLAMACPP_TYPES)
    assert 40 * GIB <= plan.total_bytes <= 55 * GIB
    assert plan.fits
    assert plan.context == CTX
    assert plan.cache_type == "f16"
    assert plan.budget.limit == 72 * GIB
    assert plan.target_bytes == pytest.approx(42.72e9, abs=0.01e9)  # Q4_K_M, 0.6055 B/weight
    assert plan.draft_bytes == pytest.approx(1.32e9, abs=0.01e9)
    assert len(notes) == 1
    assert notes[0].startswith(f"Memory: {plan.total_bytes / GIB:.1f} GiB of 72.0 GiB")


def test_kv_cache_is_layers_x_kv_heads_x_head_dim_x_2_x_context(
        pair: tuple[ModelInfo, ModelInfo]) -> None:
    target, draft = pair
    plan = estimate(target, draft, CTX, "f16", Budget(100 * GIB, "x"))
    assert plan.kv_target_bytes == 80 * 8 * 128 * 2 * 2 * CTX
    assert plan.kv_draft_bytes == 16 * 8 * 64 * 2 * 2 * CTX
    q8 = estimate(target, draft, CTX, "q8_0", Budget(100 * GIB, "x"))
    assert q8.kv_target_bytes == 80 * 8 * 128 * 2 * CTX * 34 // 32  # 34 bytes per 32 values
    assert plan.total_bytes == (plan.target_bytes + plan.draft_bytes + plan.kv_target_bytes
                                + plan.kv_draft_bytes + plan.compute_bytes)


def test_no_draft_means_no_draft_memory(pair: tuple[ModelInfo, ModelInfo]) -> None:
    alone = estimate(pair[0], None, CTX, "f16", Budget(100 * GIB, "x"))
    assert alone.draft_bytes == 0 and alone.kv_draft_bytes == 0
    assert alone.total_bytes < _total(pair, CTX, "f16")


def test_70b_pair_does_not_fit_a_small_cpu_box(pair: tuple[ModelInfo, ModelInfo]) -> None:
    hw = recorded("linux_cpu_2c_24g")
    budget = memory.budget_for(hw, Memory())
    with pytest.raises(DoesNotFitError) as info:
        memory.plan(*pair, CTX, Memory(), budget, LLAMACPP_TYPES)
    message = str(info.value)
    numbers = re.search(r"needs ([\d.]+) GiB .* budget is ([\d.]+) GiB", message)
    assert numbers is not None, message
    needed, available = float(numbers.group(1)), float(numbers.group(2))
    assert available == pytest.approx(21.4, abs=0.05)
    assert needed > 40
    assert "23.4 GiB RAM - 2.0 GiB reserve" in message


def test_tight_budget_quantises_the_cache_first(pair: tuple[ModelInfo, ModelInfo]) -> None:
    f16, q8 = _total(pair, CTX, "f16"), _total(pair, CTX, "q8_0")
    assert q8 < f16
    budget = Budget((f16 + q8) // 2, "test budget")
    plan, notes = memory.plan(*pair, CTX, Memory(), budget, LLAMACPP_TYPES)
    assert (plan.cache_type, plan.context) == ("q8_0", CTX)
    assert any("KV cache quantised to q8_0" in n and f"{f16 / GIB:.1f} GiB at f16" in n
               for n in notes)
    assert not any("Context lowered" in n for n in notes)


def test_tighter_budget_shortens_the_context(pair: tuple[ModelInfo, ModelInfo]) -> None:
    # fits neither type at 8192, q8_0 at 4096 but not f16 at 4096
    low, high = _total(pair, 4096, "q8_0"), min(_total(pair, 4096, "f16"),
                                                 _total(pair, CTX, "q8_0"))
    assert low < high
    plan, notes = memory.plan(*pair, CTX, Memory(), Budget((low + high) // 2, "test"),
                              LLAMACPP_TYPES)
    assert (plan.cache_type, plan.context) == ("q8_0", 4096)
    assert any("KV cache quantised to q8_0" in n for n in notes)
    assert any("Context lowered from 8192 to 4096 tokens" in n for n in notes)


def test_8bit_cache_at_shorter_context_before_4bit(pair: tuple[ModelInfo, ModelInfo]) -> None:
    # q4_0 at 8192 would fit, but q8_0 at 2048 fits too and is preferred (quality)
    budget = Budget(max(_total(pair, 2048, "q8_0"), _total(pair, CTX, "q4_0")) + 1, "test")
    plan, _ = memory.plan(*pair, CTX, Memory(), budget, LLAMACPP_TYPES)
    assert plan.cache_type != "q4_0"
    assert plan.context < CTX


def test_4bit_cache_as_a_last_resort(pair: tuple[ModelInfo, ModelInfo]) -> None:
    budget = Budget((_total(pair, 2048, "q8_0") + _total(pair, 2048, "q4_0")) // 2, "test")
    plan, notes = memory.plan(*pair, CTX, Memory(), budget, LLAMACPP_TYPES)
    assert plan.cache_type == "q4_0"
    assert plan.fits
    # the longest context that fits at q4_0
    assert plan.context == CTX or _total(pair, plan.context * 2, "q4_0") > budget.limit
    assert any("quantised to q4_0" in n for n in notes)


def test_never_below_min_context(pair: tuple[ModelInfo, ModelInfo]) -> None:
    mem = Memory(min_context=4096)
    budget = Budget(_total(pair, 2048, "q4_0") + 1, "test")  # only 2048 would fit
    assert budget.limit < _total(pair, 4096, "q4_0")
    with pytest.raises(DoesNotFitError):
        memory.plan(*pair, CTX, mem, budget, LLAMACPP_TYPES)


def test_explicit_cache_type_is_never_changed(pair: tuple[ModelInfo, ModelInfo]) -> None:
    f16, q8 = _total(pair, CTX, "f16"), _total(pair, CTX, "q8_0")
    budget = Budget((f16 + q8) // 2, "test")
    plan, notes = memory.plan(*pair, CTX, Memory(cache_type="f16"), budget, LLAMACPP_TYPES)
    assert plan.cache_type == "f16"  # auto would have picked q8_0 at full context
    assert plan.context == 4096
    assert not any("quantised" in n for n in notes)
    assert any("Context lowered from 8192 to 4096" in n for n in notes)


def test_explicit_cache_type_refuses_rather_than_quantise(
        pair: tuple[ModelInfo, ModelInfo]) -> None:
    budget = Budget((_total(pair, 2048, "f16") + _total(pair, 2048, "q8_0")) // 2, "test")
    auto, _ = memory.plan(*pair, CTX, Memory(), budget, LLAMACPP_TYPES)
    assert auto.cache_type == "q8_0"
    with pytest.raises(DoesNotFitError, match="f16"):
        memory.plan(*pair, CTX, Memory(cache_type="f16"), budget, LLAMACPP_TYPES)


def test_explicit_q8_cache(pair: tuple[ModelInfo, ModelInfo]) -> None:
    plan, notes = memory.plan(*pair, CTX, Memory(cache_type="q8_0"), Budget(100 * GIB, "big"),
                              LLAMACPP_TYPES)
    assert (plan.cache_type, plan.context) == ("q8_0", CTX)
    assert len(notes) == 1


def test_cuda_budget_is_vram_times_utilisation() -> None:
    hw = recorded("linux_1x_h100_80g")
    budget = memory.budget_for(hw, Memory(gpu_utilization=0.9))
    assert budget.limit == round(hw.gpus[0].memory_bytes * 0.9)
    assert budget.devices == 1
    assert "79.6 GiB x 0.9 utilisation" in budget.why
    assert memory.budget_for(hw, Memory(gpu_utilization=0.5)).limit == round(79.6 * GIB / 2)


def test_cuda_budget_counts_the_gpus_used() -> None:
    hw = recorded("linux_8x_h100_80g")
    all_gpus = memory.budget_for(hw, Memory())
    assert all_gpus.limit == 8 * round(79.6 * GIB * 0.9)
    assert all_gpus.devices == 8
    two = memory.budget_for(hw, Memory(), devices=2)
    assert two.limit == 2 * round(79.6 * GIB * 0.9)
    assert two.per_device == (round(79.6 * GIB * 0.9),) * 2
    assert two.devices == 2
    assert two.why.startswith("2x NVIDIA H100")


def test_metal_budget_is_the_working_set() -> None:
    budget = memory.budget_for(recorded("macos_m3_ultra_96g"), Memory())
    assert budget.limit == 72 * GIB
    assert budget.host == 0  # unified memory: nothing to spill into
    assert "Metal working-set limit" in budget.why


def test_cpu_budget_is_ram_minus_reserve() -> None:
    hw = recorded("linux_cpu_2c_24g")
    assert memory.budget_for(hw, Memory()).limit == hw.cpu.ram_bytes - 2 * GIB
    assert memory.budget_for(hw, Memory(ram_reserve_gb=4)).limit == hw.cpu.ram_bytes - 4 * GIB


@pytest.mark.parametrize("name", ["linux_1x_h100_80g", "macos_m3_ultra_96g", "linux_cpu_2c_24g"])
def test_profile_budget_caps_the_machine(name: str) -> None:
    budget = memory.budget_for(recorded(name), Memory(budget_gb=12.5))
    assert budget.limit == round(12.5 * GIB)
    assert "memory.budget_gb = 12.5 GiB" in budget.why


def test_profile_budget_above_the_machine_is_ignored() -> None:
    hw = recorded("linux_1x_h100_80g")
    budget = memory.budget_for(hw, Memory(budget_gb=500))
    assert budget.limit == round(hw.gpus[0].memory_bytes * 0.9)


def test_profile_budget_can_make_a_plan_refuse(pair: tuple[ModelInfo, ModelInfo]) -> None:
    budget = memory.budget_for(recorded("macos_m3_ultra_96g"), Memory(budget_gb=30))
    with pytest.raises(DoesNotFitError,
                       match=r"budget is 30\.0 GiB \(profile memory.budget_gb = 30\.0 GiB"):
        memory.plan(*pair, CTX, Memory(budget_gb=30), budget, LLAMACPP_TYPES)


def test_vllm_cache_types_use_fp8(pair: tuple[ModelInfo, ModelInfo]) -> None:
    budget = Budget((_total(pair, CTX, "f16") + _total(pair, CTX, "fp8")) // 2, "test")
    plan, _ = memory.plan(*pair, CTX, Memory(), budget, Vllm.cache_types)
    assert plan.cache_type == "fp8"


def test_to_json(pair: tuple[ModelInfo, ModelInfo]) -> None:
    plan = estimate(*pair, CTX, "f16", Budget(72 * GIB, "why"))
    data = plan.to_json()
    assert data["total_gib"] == round(plan.total_bytes / GIB, 2)
    assert data["total_bytes"] == plan.total_bytes
    assert data["budget_gib"] == 72.0 and data["budget_bytes"] == 72 * GIB
    assert data["fits"] is True
    assert not [k for k in data if k.endswith("_gb")]  # every figure says its unit
    assert data["budget"] == "why"
    assert data["context"] == CTX
    assert data["cache_type"] == "f16"
