"""The memory plan: a pure function from models, context and budget to a breakdown, or a refusal.

total = target weights + draft weights + KV cache of both (layers x KV heads x head size x 2 x
context x bytes of the cache type, shared by all sequences) + compute buffers. The budget is VRAM x
utilisation on CUDA, the Metal working-set limit on Apple Silicon, RAM minus a reserve on CPU.
To fit, it quantises the cache, then halves the context down to the profile's minimum.
"""

from __future__ import annotations

from dataclasses import dataclass

from specctl.orchestrator.config.profiles import Memory
from specctl.orchestrator.errors import DoesNotFitError
from specctl.orchestrator.machine.hardware import Hardware
from specctl.orchestrator.models.info import GB, ModelInfo

CACHE_BYTES = {"f16": 2.0, "bf16": 2.0, "fp8": 1.0, "q8_0": 1.0625, "q4_0": 0.5625}
COMPUTE_BASE_GB = 0.35
LOGITS_BATCH = 512


@dataclass(frozen=True)
class Budget:
    gb: float
    why: str
    devices: int = 1


@dataclass(frozen=True)
class MemoryPlan:
    target_gb: float
    draft_gb: float
    kv_target_gb: float
    kv_draft_gb: float
    compute_gb: float
    context: int
    cache_type: str
    budget: Budget

    @property
    def total_gb(self) -> float:
        return (self.target_gb + self.draft_gb + self.kv_target_gb + self.kv_draft_gb
                + self.compute_gb)

    @property
    def fits(self) -> bool:
        return self.total_gb <= self.budget.gb

    def breakdown(self) -> str:
        return (f"target {self.target_gb:.1f} + draft {self.draft_gb:.1f} + KV "
                f"{self.kv_target_gb + self.kv_draft_gb:.1f} ({self.context} tokens, "
                f"{self.cache_type}) + compute {self.compute_gb:.1f}")

    def to_json(self) -> dict[str, float | int | str]:
        return {"target_gb": round(self.target_gb, 2), "draft_gb": round(self.draft_gb, 2),
                "kv_target_gb": round(self.kv_target_gb, 2),
                "kv_draft_gb": round(self.kv_draft_gb, 2),
                "compute_gb": round(self.compute_gb, 2), "total_gb": round(self.total_gb, 2),
                "budget_gb": round(self.budget.gb, 2), "budget": self.budget.why,
                "context": self.context, "cache_type": self.cache_type}


def budget_for(hw: Hardware, mem: Memory, devices: int = 0) -> Budget:
    """What the plan may use on this machine; `devices` GPUs (0 = all) on CUDA."""
    if hw.kind == "cuda":
        used = hw.gpus[: devices or len(hw.gpus)]
        vram = sum(g.memory_gb for g in used)
        gb, why = vram * mem.gpu_utilization, (
            f"{len(used)}x {used[0].name}: {vram:.0f} GB VRAM x {mem.gpu_utilization} "
            "utilisation")
    elif hw.apple is not None:
        gb = hw.apple.metal_working_set_gb
        why = f"Metal working-set limit {gb:.0f} GB of {hw.apple.unified_memory_gb:.0f} GB unified"
    else:
        gb = hw.cpu.ram_gb - mem.ram_reserve_gb
        why = f"{hw.cpu.ram_gb:.1f} GB RAM - {mem.ram_reserve_gb:.1f} GB reserve"
    if mem.budget_gb is not None and mem.budget_gb < gb:
        gb, why = mem.budget_gb, f"profile memory.budget_gb = {mem.budget_gb}"
    return Budget(gb=gb, why=why, devices=len(hw.gpus[: devices or len(hw.gpus)]) or 1)


def _kv_gb(model: ModelInfo | None, context: int, cache_type: str) -> float:
    """KV for `context` tokens in all: llama.cpp shares -c across its slots, and vLLM needs room
    for one sequence of --max-model-len (it pages the rest into what is left)."""
    if model is None:
        return 0.0
    per_token = model.layers * model.kv_heads * model.head_dim * 2 * CACHE_BYTES[cache_type]
    return per_token * context / GB


def _compute_gb(model: ModelInfo | None) -> float:
    if model is None:
        return 0.0
    return COMPUTE_BASE_GB + model.vocab_size * LOGITS_BATCH * 4 / GB


def estimate(target: ModelInfo, draft: ModelInfo | None, context: int, cache_type: str,
             budget: Budget) -> MemoryPlan:
    return MemoryPlan(
        target_gb=target.weights_gb, draft_gb=draft.weights_gb if draft else 0.0,
        kv_target_gb=_kv_gb(target, context, cache_type),
        kv_draft_gb=_kv_gb(draft, context, cache_type),
        compute_gb=_compute_gb(target) + _compute_gb(draft) * 0.5,
        context=context, cache_type=cache_type, budget=budget,
    )


def plan(target: ModelInfo, draft: ModelInfo | None, context: int, mem: Memory, budget: Budget,
         cache_types: tuple[str, ...]) -> tuple[MemoryPlan, list[str]]:
    """Fit the pair: first as asked, then with a smaller cache type, then shorter contexts."""
    types = cache_types if mem.cache_type == "auto" else (mem.cache_type,)
    first = tried = estimate(target, draft, context, types[0], budget)
    # 8-bit cache at a shorter context before a 4-bit cache: q4_0 costs quality.
    for group in (types[:2], types[2:]):
        ctx = context
        while group and ctx >= min(mem.min_context, context):
            for ct in group:
                tried = estimate(target, draft, ctx, ct, budget)
                if tried.fits:
                    return tried, _notes(first, tried)
            ctx //= 2
    raise DoesNotFitError(
        f"needs {tried.total_gb:.1f} GB ({tried.breakdown()}) but the budget is "
        f"{budget.gb:.1f} GB ({budget.why}); use a smaller quantisation or model, a shorter "
        "context, or a machine with more memory")


def _notes(first: MemoryPlan, chosen: MemoryPlan) -> list[str]:
    notes = [f"Memory: {chosen.total_gb:.1f} GB of {chosen.budget.gb:.1f} GB "
             f"({chosen.budget.why}): {chosen.breakdown()}."]
    if chosen.cache_type != first.cache_type:
        notes.append(f"KV cache quantised to {chosen.cache_type} to fit (would need "
                     f"{first.total_gb:.1f} GB at {first.cache_type}).")
    if chosen.context != first.context:
        notes.append(f"Context lowered from {first.context} to {chosen.context} tokens to fit.")
    return notes
