"""Plan values built directly, for decision and argv tests that need no model files or servers.

The defaults describe the cpu-demo pair as `specctl plan -p cpu-demo` resolves it on the recorded
2-core machine (Qwen2.5-Coder-1.5B F16 target, the 0.5B Q4_K_M draft); paths are never read.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from specctl.orchestrator.contract import registry
from specctl.orchestrator.contract.memory import Budget, MemoryPlan
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.contract.options import Options
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.sizes import from_gib
from tests.conftest import recorded

MODELS = Path("/models")


def target(**changes: Any) -> ModelInfo:
    info = ModelInfo(
        ref="testbed:qwen-1.5b-f16", name="Qwen2.5 Coder 1.5B Instruct",
        path=MODELS / "qwen2.5-coder-1.5b-instruct-f16.gguf", architecture="qwen2", layers=28,
        heads=12, kv_heads=2, head_dim=128, vocab_size=151936, vocab_type="bpe",
        tokenizer="gguf:gpt2/qwen2", params_b=1.54, quant="F16", size_bytes=3_560_000_000,
        family="qwen2.5", bos_id=151643, eos_id=151645, add_bos=False, source="file")
    return replace(info, **changes)


def draft(**changes: Any) -> ModelInfo:
    info = target(ref="testbed:qwen-0.5b-q4", name="Qwen2.5 Coder 0.5B Instruct",
                  path=MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", layers=24, heads=14,
                  kv_heads=2, head_dim=64, params_b=0.49, quant="Q4_K_M",
                  size_bytes=491_400_064)
    return replace(info, **changes)


def memory(context: int = 4096, cache_type: str = "f16") -> MemoryPlan:
    return MemoryPlan(target_bytes=3_560_000_000, draft_bytes=490_000_000,
                      kv_target_bytes=110_000_000, kv_draft_bytes=50_000_000,
                      compute_bytes=500_000_000, context=context, cache_type=cache_type,
                      budget=Budget(from_gib(21.5), "23.5 GiB RAM - 2.0 GiB reserve"))


def plan(hardware: str = "linux_cpu_2c_24g", options: Options | None = None,
         **changes: Any) -> Plan:
    """A cpu-demo-like plan on a recorded machine; `changes` replace any field. The options are
    the backend's own defaults unless given."""
    backend = str(changes.pop("backend", "llamacpp"))
    if options is None:
        options = registry.adapter_classes()[backend].options()
    base = Plan(profile="cpu-demo", backend=backend, hardware=recorded(hardware),
                target=target(), draft=draft(), method="draft", k=3, k_source="profile",
                memory=memory(), port=8090, threads=2, options=options)
    return base.but(**changes)
