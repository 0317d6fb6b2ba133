"""The resolved plan: everything an adapter needs, decided once, frozen, with the reasons.

The core fields are what every backend has; `options` is the chosen backend's own section of the
profile (a contract.options.Options subclass), filled in by its hooks, read only by its
adapter."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from specctl.orchestrator.contract.hardware import Hardware
from specctl.orchestrator.contract.launch import Installed, Launch
from specctl.orchestrator.contract.memory import MemoryPlan
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.contract.options import Options
from specctl.orchestrator.sizes import in_gib

Method = Literal["draft", "ngram", "eagle", "eagle3", "mtp", "medusa", "none", "dflash",
                 "dspark", "ngram-mod", "ngram-map-k", "ngram-map-k4v", "ngram-cache"]
# Methods that draft from the text itself (no model): "ngram" is prompt lookup on every backend
# that has one; the others are llama.cpp's own n-gram drafters.
NGRAMS: frozenset[str] = frozenset({"ngram", "ngram-mod", "ngram-map-k", "ngram-map-k4v",
                                    "ngram-cache"})
# Methods that read a draft file (a model, a head, a sidecar); "mtp" may (a sidecar) or may not.
WITH_DRAFT: frozenset[str] = frozenset({"draft", "eagle", "eagle3", "dflash", "dspark"})


@dataclass(frozen=True)
class Step:
    """One more draftless method chained after the plan's own (where the engine takes a list):
    the engine drafts with whichever proposes, each with its own k."""

    method: Method
    k: int

    def describe(self) -> str:
        return self.method if self.method == "ngram-cache" else f"{self.method} k={self.k}"


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
    gpu_utilization: float = 0.9
    p_min: float | None = None
    ngram_min: int = 2
    ngram_max: int = 4
    api_key_env: str | None = None
    # k by how many requests run at once: ((first, last, k), ...), inclusive, from 1; k may be
    # 0 (no drafts at that batch size). Measured by `tune`; a backend that cannot switch k per
    # batch size uses `k` (tuned for the profile's concurrency).
    k_by_batch: tuple[tuple[int, int, int], ...] = ()
    chain: tuple[Step, ...] = ()  # more methods after `method` (llama.cpp: --spec-type a,b)
    options: Options = field(default_factory=Options)
    extra_args: tuple[str, ...] = ()  # passed to the engine as given (its adapter checks them)
    reasons: tuple[str, ...] = ()
    # what the plan changed of what was asked (a context held to the model's, a KV cache
    # quantised to fit): said on the plan's main lines, not only among the reasons
    notices: tuple[str, ...] = ()

    @property
    def context(self) -> int:
        return self.memory.context

    @property
    def cache_type(self) -> str:
        return self.memory.cache_type

    @property
    def speculative(self) -> bool:
        return self.method != "none" and self.k > 0

    @property
    def methods(self) -> tuple[Method, ...]:
        """The method and the ones chained after it (one, the common case)."""
        return (self.method, *(s.method for s in self.chain))

    def but(self, **changes: Any) -> Plan:
        """A copy with some fields changed (bench and tune vary k, method, port)."""
        return replace(self, **changes)

    def baseline(self) -> Plan:
        """The same plan without speculation: the no-draft baseline."""
        return replace(self, method="none", draft=None, k=0, k_source="baseline", chain=())

    def describe_spec(self) -> str:
        if not self.speculative:
            return "speculation off"
        chained = "".join(f" + {s.describe()}" for s in self.chain)
        if self.method == "ngram":
            return f"n-gram prompt lookup, k={self.k}{chained}"
        source = "untuned: cost model" if self.k_source == "cost model" else self.k_source
        if self.method in NGRAMS:
            return f"{Step(self.method, self.k).describe()} ({source}){chained}"
        what = f"{self.method} {self.draft.name}" if self.draft else self.method  # no "mtp mtp"
        extra = f", p-min {self.p_min}" if self.p_min is not None else ""
        return f"{what}, k={self.k} ({source}){extra}{chained}"

    def short(self) -> str:
        """The methods as a list: 'draft k=4 + ngram-mod k=16'."""
        if not self.speculative:
            return "off"
        head = Step(self.method, self.k).describe()
        extra = f" p-min {self.p_min}" if self.p_min is not None else ""
        return head + extra + "".join(f" + {s.describe()}" for s in self.chain)


def model_json(info: ModelInfo | None) -> dict[str, Any] | None:
    if info is None:
        return None
    return {"ref": info.ref, "name": info.name, "path": str(info.path) if info.path else None,
            "quant": info.quant, "size_gib": in_gib(info.size_bytes),
            "architecture": info.architecture, "layers": info.layers,
            "kv_heads": info.kv_heads, "head_dim": info.head_dim, "vocab_size": info.vocab_size}


def plan_json(plan: Plan, installed: Installed, launch: Launch) -> dict[str, Any]:
    """The plan as `plan --json` prints it and a run's state records it."""
    return {
        "profile": plan.profile, "hardware": plan.hardware.name, "backend": plan.backend,
        "backend_version": installed.version, "dialect": installed.dialect,
        "engine": installed.path,
        "target": model_json(plan.target), "draft": model_json(plan.draft),
        "method": plan.method, "methods": list(plan.methods), "spec": plan.short(),
        "chain": [{"method": s.method, "k": s.k} for s in plan.chain],
        "k": plan.k, "k_source": plan.k_source, "p_min": plan.p_min,
        "context": plan.context, "options": plan.options.model_dump(mode="json"),
        "extra_args": list(plan.extra_args), "argv": list(launch.argv), "env": dict(launch.env),
        "env_from": dict(launch.env_from), "url": launch.base_url, "model": launch.model,
        "memory": plan.memory.to_json(), "reasons": list(plan.reasons),
        "notices": list(plan.notices),
    }
