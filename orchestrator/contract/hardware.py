"""The machine as the core and the adapters speak of it: CPU, GPUs, Apple Silicon; frozen
values (machine/hardware.py detects and records them)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from specctl.orchestrator.sizes import GIB, gib

Kind = Literal["cuda", "metal", "cpu"]


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_bytes: int
    index: int = 0
    used_bytes: int = 0  # by other processes when it was detected or recorded

    @property
    def free_bytes(self) -> int:
        return max(self.memory_bytes - self.used_bytes, 0)


@dataclass(frozen=True)
class AppleSilicon:
    chip: str
    unified_memory_bytes: int
    metal_working_set_bytes: int


@dataclass(frozen=True)
class Cpu:
    model: str
    cores: int
    ram_bytes: int
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Hardware:
    name: str
    os: str
    arch: str
    cpu: Cpu
    gpus: tuple[Gpu, ...] = ()
    apple: AppleSilicon | None = None
    source: str = field(default="detected", compare=False)
    nodes: int = field(default=1, compare=False)  # machines planned as one (a cluster)
    gpus_per_node: int = field(default=0, compare=False)  # in a cluster: the fewest per node
    visibility: str = field(default="", compare=False)  # what CUDA_VISIBLE_DEVICES hid

    @property
    def kind(self) -> Kind:
        if self.gpus:
            return "cuda"
        if self.apple is not None:
            return "metal"
        return "cpu"

    @property
    def gpu_memory_bytes(self) -> int:
        return sum(g.memory_bytes for g in self.gpus)

    def fingerprint(self) -> str:
        """Stable id of what matters for speed: CPU, SIMD, GPUs, Apple chip."""
        key = json.dumps(
            [self.arch, self.cpu.model, self.cpu.cores, sorted(self.cpu.flags),
             [(g.name, round(g.memory_bytes / GIB)) for g in self.gpus],
             self.apple.chip if self.apple else None],
        )
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    def describe(self) -> str:
        if self.kind == "cuda":
            g = self.gpus[0]
            used = sum(x.used_bytes for x in self.gpus)
            return (f"{len(self.gpus)}x {g.name} ({gib(g.memory_bytes)} each"
                    + (f", {gib(used)} in use by other processes" if used >= GIB // 20 else "")
                    + ")")
        if self.apple is not None:
            return (f"{self.apple.chip}, {gib(self.apple.unified_memory_bytes)} unified memory "
                    f"(Metal working set {gib(self.apple.metal_working_set_bytes)})")
        return f"CPU {self.cpu.model}, {self.cpu.cores} cores, {gib(self.cpu.ram_bytes)} RAM"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for derived in ("source", "nodes", "gpus_per_node", "visibility"):
            data.pop(derived)
        return data
