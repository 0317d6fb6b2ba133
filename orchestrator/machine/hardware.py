"""What machine this is: CUDA GPUs, Apple Silicon, CPU. A frozen value; detectors are injectable.

Detection never changes the environment. `load(path)` reads a recorded machine (JSON) so any
command can plan for a machine the user does not have yet.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import psutil
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specctl.orchestrator.errors import HardwareError, first_problem
from specctl.orchestrator.files import UnreadableError, read_text

GIB = 1024**3
Kind = Literal["cuda", "metal", "cpu"]
SIMD_FLAGS = ("avx", "avx2", "avx512f", "avx512_bf16", "avx_vnni", "fma", "f16c", "neon", "sve")


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_gb: float
    index: int = 0


@dataclass(frozen=True)
class AppleSilicon:
    chip: str
    unified_memory_gb: float
    metal_working_set_gb: float


@dataclass(frozen=True)
class Cpu:
    model: str
    cores: int
    ram_gb: float
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

    @property
    def kind(self) -> Kind:
        if self.gpus:
            return "cuda"
        if self.apple is not None:
            return "metal"
        return "cpu"

    @property
    def gpu_memory_gb(self) -> float:
        return sum(g.memory_gb for g in self.gpus)

    def fingerprint(self) -> str:
        """Stable id of what matters for speed: CPU, SIMD, GPUs, Apple chip."""
        key = json.dumps(
            [self.arch, self.cpu.model, self.cpu.cores, sorted(self.cpu.flags),
             [(g.name, round(g.memory_gb)) for g in self.gpus],
             self.apple.chip if self.apple else None],
        )
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    def describe(self) -> str:
        if self.kind == "cuda":
            g = self.gpus[0]
            return f"{len(self.gpus)}x {g.name} ({g.memory_gb:.0f} GB each)"
        if self.apple is not None:
            return (f"{self.apple.chip}, {self.apple.unified_memory_gb:.0f} GB unified memory "
                    f"(Metal working set {self.apple.metal_working_set_gb:.0f} GB)")
        return f"CPU {self.cpu.model}, {self.cpu.cores} cores, {self.cpu.ram_gb:.0f} GB RAM"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for derived in ("source", "nodes", "gpus_per_node"):
            data.pop(derived)
        return data


MAX_GPUS = 64  # per machine
MAX_GB = 1 << 16


class _Recorded(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class _Gpu(_Recorded):
    name: str = Field(max_length=256)
    memory_gb: float = Field(gt=0, le=MAX_GB)
    index: int = Field(0, ge=0, lt=MAX_GPUS)


class _Apple(_Recorded):
    chip: str = Field(max_length=256)
    unified_memory_gb: float = Field(gt=0, le=MAX_GB)
    metal_working_set_gb: float = Field(gt=0, le=MAX_GB)

    @model_validator(mode="after")
    def _within(self) -> _Apple:
        if self.metal_working_set_gb > self.unified_memory_gb:
            raise ValueError("metal_working_set_gb is above unified_memory_gb")
        return self


class _Cpu(_Recorded):
    model: str = Field(max_length=256)
    cores: int = Field(ge=1, le=4096)
    ram_gb: float = Field(gt=0, le=MAX_GB)
    flags: list[str] = Field(default_factory=list, max_length=1024)


class _Machine(_Recorded):
    """A recorded machine as `to_json` writes it: the one model a file is validated by."""

    name: str = Field(max_length=256)
    os: str = Field(max_length=64)
    arch: str = Field(max_length=64)
    cpu: _Cpu
    gpus: list[_Gpu] = Field(default_factory=list, max_length=MAX_GPUS)
    apple: _Apple | None = None


def from_json(data: Any, source: str = "recorded") -> Hardware:
    try:
        m = _Machine.model_validate(data)
    except ValidationError as exc:
        raise HardwareError(f"{source}: not a recorded machine ({first_problem(exc)}); see "
                            "tests/fixtures/hardware/*.json for the format") from None
    apple = (AppleSilicon(m.apple.chip, m.apple.unified_memory_gb, m.apple.metal_working_set_gb)
             if m.apple else None)
    return Hardware(name=m.name, os=m.os, arch=m.arch,
                    cpu=Cpu(m.cpu.model, m.cpu.cores, m.cpu.ram_gb, tuple(m.cpu.flags)),
                    gpus=tuple(Gpu(g.name, g.memory_gb, g.index) for g in m.gpus),
                    apple=apple, source=source)


def load(path: Path) -> Hardware:
    """Read a recorded machine (written by `specctl doctor --record FILE`): bounded, validated;
    anything else is one line naming the file."""
    try:
        data = json.loads(read_text(path, limit=1 << 20))
    except FileNotFoundError:
        raise HardwareError(f"hardware file {path} not found; pass a JSON file written by "
                            "`specctl doctor --record FILE`") from None
    except UnreadableError as exc:
        raise HardwareError(f"hardware file {exc}; pass a JSON file written by "
                            "`specctl doctor --record FILE`") from None
    except ValueError as exc:
        raise HardwareError(f"hardware file {path} is not valid JSON ({exc})") from None
    except RecursionError:  # [[[[...]]]]
        raise HardwareError(f"hardware file {path} is nested too deeply to be a machine") from None
    return from_json(data, source=str(path))


Runner = Callable[[Sequence[str]], str | None]


def run_quiet(argv: Sequence[str]) -> str | None:
    """Run a probe command; None when it is missing or fails. Never raises."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def detect_nvidia(run: Runner = run_quiet) -> tuple[Gpu, ...]:
    out = run(["nvidia-smi", "--query-gpu=index,name,memory.total",
               "--format=csv,noheader,nounits"])
    if not out:
        return ()
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[2].replace(".", "").isdigit():
            gpus.append(Gpu(name=parts[1], memory_gb=round(float(parts[2]) / 1024, 1),
                            index=int(parts[0])))
    return tuple(gpus)


def metal_working_set_gb(unified_gb: float) -> float:
    """Apple's default recommendedMaxWorkingSetSize: ~2/3 of memory up to 36 GB, ~3/4 above."""
    return round(unified_gb * (0.75 if unified_gb > 36 else 0.67), 1)


def detect_apple(run: Runner = run_quiet, system: str = platform.system(),
                 machine: str = platform.machine()) -> AppleSilicon | None:
    if system != "Darwin" or machine != "arm64":
        return None
    chip = (run(["sysctl", "-n", "machdep.cpu.brand_string"]) or "Apple Silicon").strip()
    mem = run(["sysctl", "-n", "hw.memsize"])
    total = int(mem) if mem and mem.strip().isdigit() else psutil.virtual_memory().total
    unified = total / GIB
    wired = run(["sysctl", "-n", "iogpu.wired_limit_mb"])
    limit = (int(wired) / 1024 if wired and wired.strip().isdigit() and int(wired) > 0
             else metal_working_set_gb(unified))
    return AppleSilicon(chip=chip, unified_memory_gb=round(unified, 1),
                        metal_working_set_gb=round(limit, 1))


def detect_cpu(cpuinfo: Path = Path("/proc/cpuinfo"), run: Runner = run_quiet) -> Cpu:
    model, flags = platform.processor() or platform.machine(), set[str]()
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                model = value.strip()
            elif key.strip() in ("flags", "Features"):
                flags |= set(value.split())
    elif platform.system() == "Darwin":
        model = (run(["sysctl", "-n", "machdep.cpu.brand_string"]) or model).strip()
        flags |= {"neon"} if platform.machine() == "arm64" else set()
    if platform.machine() in ("arm64", "aarch64") and "asimd" in flags:
        flags.add("neon")
    return Cpu(model=model, cores=psutil.cpu_count(logical=False) or os.cpu_count() or 1,
               ram_gb=round(psutil.virtual_memory().total / GIB, 1),
               flags=tuple(sorted(flags & set(SIMD_FLAGS))))


@dataclass(frozen=True)
class Detectors:
    """What `detect` calls; tests pass their own."""

    cpu: Callable[[], Cpu] = detect_cpu
    nvidia: Callable[[], tuple[Gpu, ...]] = detect_nvidia
    apple: Callable[[], AppleSilicon | None] = detect_apple


def detect(detectors: Detectors = Detectors()) -> Hardware:
    return Hardware(name=platform.node() or "this-machine", os=platform.system().lower(),
                    arch=platform.machine(), cpu=detectors.cpu(), gpus=detectors.nvidia(),
                    apple=detectors.apple())
