"""The memory plan: a pure function from models, context and budget to a breakdown, or a refusal.

All sizes are bytes (orchestrator.sizes); every comparison is between bytes; figures on screen
are GiB. total = target weights + draft weights + KV cache of both (layers x KV heads x head size
x 2 x context x bytes of the cache type, shared by all sequences) + compute buffers. The budget
is, per visible GPU, the smaller of its memory x utilisation and what other processes left free;
the Metal working-set limit on Apple Silicon; RAM minus a reserve on CPU.

To fit, it quantises the cache, then halves the context down to the profile's minimum. A backend
that can keep part of the target in system RAM (`spill`) is then offered that, before a refusal:
"experts" (an MoE's expert weights of the first N layers) before "layers" (the last layers
whole, weights and KV). The draft, the KV of the layers on the devices and the compute buffers
stay on the devices. Where the engine places the rest is the adapter's business (its flags).
The budget and the breakdown (`Budget`, `MemoryPlan`) are the contract's (contract/memory.py).
"""

from __future__ import annotations

from dataclasses import replace

from specctl.orchestrator.config.profiles import Memory
from specctl.orchestrator.contract.hardware import Hardware
from specctl.orchestrator.contract.memory import Budget, MemoryPlan
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.errors import DoesNotFitError
from specctl.orchestrator.sizes import from_gib, gib, gib_pair

# bytes per element, as fractions of 16ths: q8_0 is 34 bytes per 32 values, q4_0 18 per 32
CACHE_BYTES_16THS = {"f16": 32, "bf16": 32, "fp8": 16, "q8_0": 17, "q4_0": 9}
COMPUTE_BASE = 350 * (1 << 20)
LOGITS_BATCH = 512
# On a GPU other processes use, what the server's own CUDA context and workspace take from the
# free memory (the utilisation share covers it on a GPU of its own).
SHARED_RESERVE = 1 << 30


def budget_for(hw: Hardware, mem: Memory, devices: int = 0) -> Budget:
    """What the plan may use on this machine; `devices` GPUs (0 = all visible) on CUDA."""
    host = hw.cpu.ram_bytes - from_gib(mem.ram_reserve_gb)
    if hw.kind == "cuda":
        used = hw.gpus[: devices or len(hw.gpus)]
        share = [round(g.memory_bytes * mem.gpu_utilization) for g in used]
        free = [g.free_bytes - (SHARED_RESERVE if g.used_bytes else 0) for g in used]
        per = tuple(max(min(s, f), 0) for s, f in zip(share, free, strict=True))
        # what others use matters where it leaves less than the utilisation share
        taken = sum(g.used_bytes for g, s, f in zip(used, share, free, strict=True) if f < s)
        limit, why = sum(per), (
            f"{len(used)}x {used[0].name}: {gib(sum(g.memory_bytes for g in used))} x "
            f"{mem.gpu_utilization} utilisation" + (
                f", less {gib(taken)} in use by other processes and "
                f"{gib(SHARED_RESERVE)} for the server's CUDA context" if taken else ""))
        if hw.visibility:
            why += f"; {hw.visibility}"
    elif hw.apple is not None:
        limit = hw.apple.metal_working_set_bytes
        why = (f"Metal working-set limit {gib(limit)} of "
               f"{gib(hw.apple.unified_memory_bytes)} unified")
        per, host = (), 0  # the same memory: nothing to spill into
    else:
        limit = host
        why = f"{gib(hw.cpu.ram_bytes)} RAM - {gib(from_gib(mem.ram_reserve_gb))} reserve"
        per, host = (), 0
    if mem.budget_gb is not None and from_gib(mem.budget_gb) < limit:
        cap = from_gib(mem.budget_gb)
        per = tuple(p * cap // limit for p in per)
        limit, why = cap, f"profile memory.budget_gb = {mem.budget_gb} GiB"
    return Budget(limit=limit, why=why, devices=len(hw.gpus[: devices or len(hw.gpus)]) or 1,
                  per_device=per, host=max(host, 0))


def _kv(model: ModelInfo | None, context: int, cache_type: str) -> int:
    """KV for `context` tokens in all: llama.cpp shares -c across its slots, and vLLM needs room
    for one sequence of --max-model-len (it pages the rest into what is left)."""
    if model is None:
        return 0
    elements = model.layers * model.kv_heads * model.head_dim * 2 * context
    return elements * CACHE_BYTES_16THS[cache_type] // 16


def _compute(model: ModelInfo | None) -> int:
    if model is None:
        return 0
    return COMPUTE_BASE + model.vocab_size * LOGITS_BATCH * 4


def estimate(target: ModelInfo, draft: ModelInfo | None, context: int, cache_type: str,
             budget: Budget, slots: int = 1) -> MemoryPlan:
    """The breakdown for `slots` requests of up to `context` tokens each (slots > 1 only where
    each slot holds its own context: Adapter.kv_per_slot)."""
    return MemoryPlan(
        target_bytes=target.size_bytes, draft_bytes=draft.size_bytes if draft else 0,
        kv_target_bytes=_kv(target, context * slots, cache_type),
        kv_draft_bytes=_kv(draft, context * slots, cache_type),
        compute_bytes=_compute(target) + _compute(draft) // 2,
        context=context, cache_type=cache_type, budget=budget, layers=target.layers,
        slots=slots,
    )


def spilled(whole: MemoryPlan, target: ModelInfo, how: str) -> MemoryPlan | None:
    """`whole` with as little of the target in system RAM as makes the rest fit the devices
    ("experts": the MoE experts of the first N layers; "layers": the last layers whole), or
    None when even that does not fit."""
    layers = max(target.layers, 1)
    over = whole.total_bytes - whole.budget.limit
    if over <= 0:
        return whole
    if how == "experts":
        per_layer = int(target.size_bytes * target.expert_share) // layers
        if per_layer <= 0:
            return None
        n = -(-over // per_layer)  # ceiling
        if n > layers:
            return None
        plan = replace(whole, host_bytes=n * per_layer, cpu_moe_layers=n)
    else:
        per_layer = (whole.target_bytes + whole.kv_target_bytes) // layers
        n = -(-over // max(per_layer, 1))
        if n > layers:
            return None
        plan = replace(whole, host_bytes=n * per_layer, gpu_layers=layers - n)
    return plan if plan.fits else None


def plan(target: ModelInfo, draft: ModelInfo | None, context: int, mem: Memory, budget: Budget,
         cache_types: tuple[str, ...], spill: tuple[str, ...] = (),
         slots: tuple[int, ...] = (1,)) -> tuple[MemoryPlan, list[str]]:
    """Fit the pair: first as asked, then with fewer slots (`slots`: the counts that may be
    planned, most first: the engine's own default halved down to one, where the profile asked
    for "auto"), then with a smaller cache type, then shorter contexts; then with part of the
    target in system RAM, the ways the backend can (`spill`)."""
    cache_type = (cache_types if mem.cache_type == "auto" else (mem.cache_type,))[0]
    first = estimate(target, draft, context, cache_type, budget, slots[0])
    for n in slots:
        fewer = estimate(target, draft, context, cache_type, budget, n)
        if fewer.fits:
            return fewer, _notes(first, fewer)
    return _fit(target, draft, context, mem, budget, cache_types, spill, slots[-1], first)


def _fit(target: ModelInfo, draft: ModelInfo | None, context: int, mem: Memory, budget: Budget,
         cache_types: tuple[str, ...], spill: tuple[str, ...], slots: int,
         first: MemoryPlan) -> tuple[MemoryPlan, list[str]]:
    types = cache_types if mem.cache_type == "auto" else (mem.cache_type,)
    tried = estimate(target, draft, context, types[0], budget, slots)
    ways = [None, *(w for w in spill if budget.host > 0 and (
        w != "experts" or target.expert_share > 0))]
    for way in ways:
        # 8-bit cache at a shorter context before a 4-bit cache: q4_0 costs quality.
        for group in (types[:2], types[2:]):
            ctx = context
            while group and ctx >= min(mem.min_context, context):
                for ct in group:
                    tried = estimate(target, draft, ctx, ct, budget, slots)
                    chosen = tried if way is None else spilled(tried, target, way)
                    if chosen is not None and chosen.fits:
                        return chosen, _notes(first, chosen)
                ctx //= 2
    need, have = gib_pair(tried.total_bytes, budget.limit)
    spill_note = (f"; even with part of the target in {gib(budget.host)} of system RAM it does "
                  "not fit" if len(ways) > 1 else "")
    raise DoesNotFitError(
        f"needs {need} ({tried.breakdown()}) but the budget is {have} ({budget.why})"
        f"{spill_note}; use a smaller quantisation or model, a shorter context, or a machine "
        "with more memory")


def _notes(first: MemoryPlan, chosen: MemoryPlan) -> list[str]:
    used, have = gib_pair(chosen.device_bytes, chosen.budget.limit)
    notes = [f"Memory: {used} of {have} ({chosen.budget.why}): {chosen.breakdown()}."]
    if chosen.split:
        notes.append(f"Layers split across {len(chosen.split)} GPUs by free memory "
                     f"({', '.join(f'{s:.0%}' for s in chosen.split)}); the draft whole on the "
                     "one with the most room.")
    if chosen.placement():
        notes.append(f"Placement: {chosen.placement()}.")
    if chosen.cache_type != first.cache_type:
        notes.append(f"KV cache quantised to {chosen.cache_type} to fit (would need "
                     f"{gib(first.total_bytes)} at {first.cache_type}).")
    if chosen.slots != first.slots:
        notes.append(f"Slots lowered from {first.slots} to {chosen.slots} to fit (each holds "
                     f"{chosen.context} tokens).")
    if chosen.context != first.context:
        notes.append(f"Context lowered from {first.context} to {chosen.context} tokens to fit.")
    return notes
