"""What machine this is: CUDA GPUs, Apple Silicon, CPU. A frozen value; detectors are injectable.

Detection never changes the environment. `load(path)` reads a recorded machine (JSON) so any
command can plan for a machine the user does not have yet. Memory is bytes (orchestrator.sizes):
a GPU's total and what other processes already use (nvidia-smi `memory.used`); `visible` keeps
the GPUs CUDA_VISIBLE_DEVICES lets a server see.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specctl.orchestrator.contract.hardware import AppleSilicon, Cpu, Gpu, Hardware
from specctl.orchestrator.errors import HardwareError, first_problem
from specctl.orchestrator.files import UnreadableError, read_text
from specctl.orchestrator.sizes import GIB, MIB, from_gib

SIMD_FLAGS = ("avx", "avx2", "avx512f", "avx512_bf16", "avx_vnni", "fma", "f16c", "neon", "sve")


MAX_GPUS = 64  # per machine
MAX_BYTES = 1 << 56  # 64 PiB: beyond any one device or machine
_LEGACY = {"memory_gb": "memory_bytes", "used_gb": "used_bytes", "ram_gb": "ram_bytes",
           "unified_memory_gb": "unified_memory_bytes",
           "metal_working_set_gb": "metal_working_set_bytes"}


def _from_legacy(data: Any) -> Any:
    """Files recorded before sizes were bytes carry GiB as `*_gb`: read as bytes."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for old, new in _LEGACY.items():
        value = out.get(old)
        if old in out and new not in out and isinstance(value, int | float) \
                and not isinstance(value, bool) and 0 <= value <= MAX_BYTES / GIB:
            out[new] = from_gib(out.pop(old))
    return out


class _Recorded(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        return _from_legacy(data)


class _Gpu(_Recorded):
    name: str = Field(max_length=256)
    memory_bytes: int = Field(gt=0, le=MAX_BYTES)
    index: int = Field(0, ge=0, lt=MAX_GPUS)
    used_bytes: int = Field(0, ge=0, le=MAX_BYTES)

    @model_validator(mode="after")
    def _within(self) -> _Gpu:
        if self.used_bytes > self.memory_bytes:
            raise ValueError("used_bytes is above memory_bytes")
        return self


class _Apple(_Recorded):
    chip: str = Field(max_length=256)
    unified_memory_bytes: int = Field(gt=0, le=MAX_BYTES)
    metal_working_set_bytes: int = Field(gt=0, le=MAX_BYTES)

    @model_validator(mode="after")
    def _within(self) -> _Apple:
        if self.metal_working_set_bytes > self.unified_memory_bytes:
            raise ValueError("metal_working_set_bytes is above unified_memory_bytes")
        return self


class _Cpu(_Recorded):
    model: str = Field(max_length=256)
    cores: int = Field(ge=1, le=4096)
    ram_bytes: int = Field(gt=0, le=MAX_BYTES)
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
    apple = (AppleSilicon(m.apple.chip, m.apple.unified_memory_bytes,
                          m.apple.metal_working_set_bytes) if m.apple else None)
    return Hardware(name=m.name, os=m.os, arch=m.arch,
                    cpu=Cpu(m.cpu.model, m.cpu.cores, m.cpu.ram_bytes, tuple(m.cpu.flags)),
                    gpus=tuple(Gpu(g.name, g.memory_bytes, g.index, g.used_bytes)
                               for g in m.gpus),
                    apple=apple, source=source)


def visible(hw: Hardware, cuda_visible: str | None) -> Hardware:
    """The machine as a server started here sees it: only the GPUs CUDA_VISIBLE_DEVICES names,
    in its order (unset: all; empty or -1: none). Indices are nvidia-smi's; anything else (UUIDs,
    MIG ids) is one line saying so."""
    if cuda_visible is None or not hw.gpus:
        return hw
    wanted: list[int] = []
    for item in (x.strip() for x in cuda_visible.split(",") if cuda_visible.strip()):
        if not item.lstrip("-").isdigit():
            raise HardwareError(f"CUDA_VISIBLE_DEVICES={cuda_visible}: specctl reads GPU indices "
                                "(e.g. 0,1), not UUIDs; use indices or unset it")
        if int(item) < 0:
            break  # CUDA stops at the first invalid index
        wanted.append(int(item))
    by_index = {g.index: g for g in hw.gpus}
    if any(i not in by_index for i in wanted):
        missing = ", ".join(str(i) for i in wanted if i not in by_index)
        raise HardwareError(f"CUDA_VISIBLE_DEVICES={cuda_visible} names GPU {missing}, which "
                            f"{hw.name} does not have (it has {len(hw.gpus)}: "
                            f"{', '.join(str(g.index) for g in hw.gpus)})")
    gpus = tuple(by_index[i] for i in dict.fromkeys(wanted))
    if len(gpus) == len(hw.gpus):
        return hw
    hidden = [str(g.index) for g in hw.gpus if g not in gpus]
    note = (f"CUDA_VISIBLE_DEVICES={cuda_visible}: {len(gpus)} of {len(hw.gpus)} GPUs visible "
            f"(hidden: {', '.join(hidden)})")
    return replace(hw, gpus=gpus, visibility=note)


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
    """Every GPU nvidia-smi lists (it ignores CUDA_VISIBLE_DEVICES: see `visible`), its total
    and what other processes use, in MiB as nvidia-smi reports them."""
    out = run(["nvidia-smi", "--query-gpu=index,name,memory.total,memory.used",
               "--format=csv,noheader,nounits"])
    if not out:
        return ()
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4 and parts[0].isdigit() and parts[2].isdigit():
            used = int(parts[3]) if parts[3].isdigit() else 0
            gpus.append(Gpu(name=parts[1], memory_bytes=int(parts[2]) * MIB,
                            index=int(parts[0]), used_bytes=min(used, int(parts[2])) * MIB))
    return tuple(gpus)


def metal_working_set(unified: int) -> int:
    """Apple's default recommendedMaxWorkingSetSize: ~2/3 of memory up to 36 GiB, ~3/4 above."""
    return round(unified * (0.75 if unified > 36 * GIB else 0.67))


def detect_apple(run: Runner = run_quiet, system: str = platform.system(),
                 machine: str = platform.machine()) -> AppleSilicon | None:
    if system != "Darwin" or machine != "arm64":
        return None
    chip = (run(["sysctl", "-n", "machdep.cpu.brand_string"]) or "Apple Silicon").strip()
    mem = run(["sysctl", "-n", "hw.memsize"])
    total = int(mem) if mem and mem.strip().isdigit() else psutil.virtual_memory().total
    wired = run(["sysctl", "-n", "iogpu.wired_limit_mb"])
    limit = (min(int(wired) * MIB, total) if wired and wired.strip().isdigit() and int(wired) > 0
             else metal_working_set(total))
    return AppleSilicon(chip=chip, unified_memory_bytes=total, metal_working_set_bytes=limit)


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
               ram_bytes=psutil.virtual_memory().total,
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
