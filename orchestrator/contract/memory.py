"""The memory a plan may use (its budget) and what it takes (its breakdown), in bytes: computed
by planning/memory.py, read by the adapters that place the model (flags, layers in RAM)."""

from __future__ import annotations

from dataclasses import dataclass

from specctl.orchestrator.sizes import gib, in_gib

# How much faster a GPU reads its own memory than a CPU reads system RAM: typical of both
# consumer (RTX 4090 ~1 TB/s vs dual-channel DDR5 ~90 GB/s) and server machines (H100 3.35 TB/s
# vs 12-channel DDR5 ~400 GB/s); decode is memory-bound, so it is the cost of a layer in RAM.
GPU_OVER_RAM = 10


@dataclass(frozen=True)
class Budget:
    limit: int  # bytes the plan may use on its devices
    why: str
    devices: int = 1
    per_device: tuple[int, ...] = ()  # each GPU's share of `limit` (CUDA), in order
    host: int = 0  # system RAM a backend that spills may use for the target's rest


@dataclass(frozen=True)
class MemoryPlan:
    target_bytes: int
    draft_bytes: int
    kv_target_bytes: int
    kv_draft_bytes: int
    compute_bytes: int
    context: int
    cache_type: str
    budget: Budget
    layers: int = 0  # the target's layers
    host_bytes: int = 0  # of the target, placed in system RAM (spilled)
    gpu_layers: int | None = None  # target layers on the devices when spilled by layers
    cpu_moe_layers: int = 0  # layers whose MoE experts stay in system RAM
    slots: int = 1  # concurrent requests the KV holds, each up to `context` (kv_per_slot)

    @property
    def total_bytes(self) -> int:
        return (self.target_bytes + self.draft_bytes + self.kv_target_bytes
                + self.kv_draft_bytes + self.compute_bytes)

    @property
    def device_bytes(self) -> int:
        return self.total_bytes - self.host_bytes

    @property
    def fits(self) -> bool:
        return self.device_bytes <= self.budget.limit and self.host_bytes <= max(
            self.budget.host, 0)

    @property
    def split(self) -> tuple[float, ...]:
        """Each device's share of the target's layers: proportional to its budget."""
        per = self.budget.per_device
        total = sum(per)
        return tuple(round(p / total, 3) for p in per) if len(per) > 1 and total else ()

    @property
    def speed(self) -> float:
        """Decode speed relative to the whole target on the devices (1.0: not spilled)."""
        if not self.host_bytes:
            return 1.0
        read = self.target_bytes + self.kv_target_bytes
        on_host = self.host_bytes if self.gpu_layers is not None else self._experts_read()
        return read / (read - on_host + on_host * GPU_OVER_RAM)

    def _experts_read(self) -> int:
        """An MoE reads a few of its experts per token: about 1/8 of what was spilled."""
        return self.host_bytes // 8

    def breakdown(self) -> str:
        kv = self.kv_target_bytes + self.kv_draft_bytes
        text = (f"target {gib(self.target_bytes)} + draft {gib(self.draft_bytes)} + KV "
                f"{gib(kv)} ({self._tokens()} tokens, {self.cache_type}) + compute "
                f"{gib(self.compute_bytes)}")
        if self.host_bytes:
            text += f"; {gib(self.host_bytes)} of the target in system RAM"
        return text

    def _tokens(self) -> str:
        return f"{self.slots} x {self.context}" if self.slots > 1 else str(self.context)

    def placement(self) -> str:
        """What runs where, and what it costs, in words."""
        if self.gpu_layers is not None:
            return (f"{self.gpu_layers} of {self.layers} target layers on the GPU, the rest "
                    f"({gib(self.host_bytes)}) in system RAM: expect about {self.speed:.0%} of "
                    "full-GPU speed; the draft stays on the GPU")
        if self.cpu_moe_layers:
            return (f"MoE experts of {self.cpu_moe_layers} of {self.layers} layers in system "
                    f"RAM ({gib(self.host_bytes)}), attention and the rest on the GPU: expect "
                    f"about {self.speed:.0%} of full-GPU speed; the draft stays on the GPU")
        return ""

    def to_json(self) -> dict[str, float | int | str | bool | list[float] | None]:
        return {"target_gib": in_gib(self.target_bytes), "draft_gib": in_gib(self.draft_bytes),
                "kv_target_gib": in_gib(self.kv_target_bytes),
                "kv_draft_gib": in_gib(self.kv_draft_bytes),
                "compute_gib": in_gib(self.compute_bytes), "total_gib": in_gib(self.total_bytes),
                "device_gib": in_gib(self.device_bytes), "host_gib": in_gib(self.host_bytes),
                "budget_gib": in_gib(self.budget.limit), "budget": self.budget.why,
                "total_bytes": self.total_bytes, "device_bytes": self.device_bytes,
                "budget_bytes": self.budget.limit, "fits": self.fits,
                "context": self.context, "slots": self.slots, "cache_type": self.cache_type,
                "gpu_layers": self.gpu_layers, "cpu_moe_layers": self.cpu_moe_layers,
                "split": list(self.split)}
