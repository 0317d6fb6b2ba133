"""The resolved plan: everything an adapter needs, decided once, frozen, with the reasons."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from specctl.orchestrator.machine.hardware import Hardware
from specctl.orchestrator.models.resolve import ModelInfo
from specctl.orchestrator.planning.memory import MemoryPlan

Method = Literal["draft", "ngram", "eagle", "eagle3", "mtp", "none"]


@dataclass(frozen=True)
class Plan:
    profile: str
    backend: str
    hardware: Hardware
    target: ModelInfo
    draft: ModelInfo | None
    method: Method
    k: int
    k_source: str
    memory: MemoryPlan
    host: str = "127.0.0.1"
    port: int = 8080
    threads: int | None = None
    parallel: int = 1
    gpu_layers: int = 0
    gpu_utilization: float = 0.9
    p_min: float | None = None
    n_min: int | None = None
    ngram_min: int = 2
    ngram_max: int = 4
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    draft_tensor_parallel: int | None = None
    rpc_workers: tuple[str, ...] = ()
    tensor_split: tuple[float, ...] = ()
    draft_local: bool = True
    ray_address: str | None = None
    heterogeneous_vocab: bool = False
    api_key_env: str | None = None
    reasons: tuple[str, ...] = ()

    @property
    def context(self) -> int:
        return self.memory.context

    @property
    def cache_type(self) -> str:
        return self.memory.cache_type

    @property
    def speculative(self) -> bool:
        return self.method != "none" and self.k > 0

    def but(self, **changes: Any) -> Plan:
        """A copy with some fields changed (bench and tune vary k, method, port)."""
        return replace(self, **changes)

    def baseline(self) -> Plan:
        """The same plan without speculation: the no-draft baseline."""
        return replace(self, method="none", draft=None, k=0, k_source="baseline")

    def describe_spec(self) -> str:
        if not self.speculative:
            return "speculation off"
        if self.method == "ngram":
            return f"n-gram prompt lookup, k={self.k}"
        what = self.draft.name if self.draft else self.method
        extra = f", p-min {self.p_min}" if self.p_min is not None else ""
        return f"{self.method} {what}, k={self.k} ({self.k_source}){extra}"
