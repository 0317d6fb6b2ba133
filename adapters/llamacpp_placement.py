"""Where llama.cpp puts the models: the memory plan's placement as llama-server flags, or
llama.cpp's own fitting; and what llama.cpp chose, read back from its log.

The memory plan (orchestrator/planning/memory) decides what runs where: the target's layers split
across the visible GPUs by free memory, the last layers in system RAM (`-ngl N`), or an MoE's
experts of the first N layers in system RAM (`--n-cpu-moe N`); the draft on the GPU with the most
room. A build with `--fit` (on by default since late 2025) measures the real buffers and fits
every argument left unset to the free device memory: specctl then leaves `-ngl`,
`--tensor-split` and `--n-cpu-moe` unset (llama.cpp refuses to fit around them) and passes the
margins the plan leaves (`--fit-target`, MiB per GPU) and the context it needs (`-c`,
`--fit-ctx`). `status` shows what it chose, read from the server's log.
"""

from __future__ import annotations

import re
from typing import Literal

from specctl.orchestrator.contract.hardware import Hardware
from specctl.orchestrator.contract.plan import Plan
from specctl.orchestrator.sizes import MIB, gib

Fit = Literal["auto", "on", "off"]
ALL = 999  # -ngl: every layer
LOCAL_DEVICE = {"cpu": "none", "cuda": "CUDA0", "metal": "MTL0"}  # "none": stay on the CPU
Flag = tuple[str, ...]


def uses_fit(fit: Fit, flags: frozenset[str], rpc: bool) -> bool:
    """llama.cpp fits the placement itself: the build has --fit, the profile did not turn it off,
    and no RPC workers (their split is specctl's, from what the workers report)."""
    return fit == "on" or (fit == "auto" and "--fit" in flags and not rpc)


def margins_mib(plan: Plan) -> list[int]:
    """Per visible GPU, what the plan leaves free (MiB): free memory less its budget share."""
    gpus, shares = plan.hardware.gpus, plan.memory.budget.per_device
    if not gpus or len(shares) != len(gpus):
        return []
    return [max(g.free_bytes - share, 0) // MIB for g, share in zip(gpus, shares, strict=True)]


def fit_note(hw: Hardware) -> str:
    """What the plan's reasons say when llama.cpp fits the placement itself."""
    where = ("the layers across the GPUs and into system RAM" if hw.kind == "cuda" else
             "what is left unset")
    return ("Placement: left to llama.cpp's own fitting (--fit, which this build has): it "
            f"measures the real buffers at start and places {where}, keeping the margins this "
            "plan leaves; the placement below is specctl's estimate, and `specctl status` shows "
            "what llama.cpp chose ([llamacpp] fit = \"off\" passes specctl's own).")


def target_flags(plan: Plan, fit: bool, rpc: bool) -> list[Flag]:
    """The target's placement. With `fit`, what llama.cpp needs to fit it the plan's way."""
    kind = plan.hardware.kind
    if fit:
        # the whole cache's context, as -c gives it (each slot its own plan.context)
        total = plan.context * max(plan.parallel, 1)
        out: list[Flag] = [("--fit", "on"), ("--fit-ctx", str(total))]
        margins = margins_mib(plan)
        if margins:
            out.append(("--fit-target", ",".join(str(m) for m in margins)))
        return out
    mem = plan.memory
    if kind == "cpu" and not rpc:
        return [("-ngl", "0")]
    out = [("-ngl", str(mem.gpu_layers if mem.gpu_layers is not None else ALL))]
    if mem.cpu_moe_layers:
        out.append(("--n-cpu-moe", str(mem.cpu_moe_layers)))
    if mem.split and kind == "cuda" and not rpc:  # with RPC workers: their split (-ts)
        out += [("--split-mode", "layer"),
                ("--tensor-split", ",".join(f"{s:g}" for s in mem.split))]
    return out


def draft_device(plan: Plan) -> str | None:
    """The GPU the draft goes on when there are several: the one with the largest budget (the
    most room after its share of the target's layers), as llama.cpp names it (CUDA0, CUDA1...,
    counted among the visible GPUs)."""
    per, gpus = plan.memory.budget.per_device, plan.hardware.gpus
    if plan.hardware.kind != "cuda" or len(per) < 2 or len(gpus) != len(per):
        return None
    return f"CUDA{max(range(len(per)), key=lambda i: (per[i], gpus[i].free_bytes, -i))}"


def draft_flags(plan: Plan, rpc: bool, draft_local: bool) -> list[Flag]:
    """The draft: on the fastest device with room (a GPU, whole; the CPU on a CPU machine)."""
    kind = plan.hardware.kind
    if rpc and draft_local:
        out: list[Flag] = [("-devd", LOCAL_DEVICE[kind])]  # keep the draft off the network
        return out + ([("-ngld", str(ALL))] if kind != "cpu" else [])
    device = draft_device(plan)
    out = [("-devd", device)] if device else []
    if kind != "cpu" or rpc:
        out.append(("-ngld", str(ALL)))
    return out


# What llama-server logs as it loads (llama.cpp's own words; the target is loaded first). At the
# default verbosity (3) the 2026 builds say the slots and their context, and --fit's warnings; the
# layers and buffers only at -lv 4, or in older builds.
_SLOTS = re.compile(r"load_model: initializing, n_slots = (\d+), n_ctx_slot = (\d+)")
_OFFLOADED = re.compile(r"load_tensors: offloaded (\d+)/(\d+) layers to GPU")
_N_CTX = re.compile(r"llama_context: n_ctx\s*=\s*(\d+)")
_BUFFER = re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB")
_KV = re.compile(r"llama_kv_cache:\s+(\S+) KV buffer size =\s+([\d.]+) MiB")
_FIT_FAILED = re.compile(r"failed to fit params to free device memory: (.*)")
_START = re.compile(r"llama_server: initializing|build: \d+ |system info:")  # each start


def chosen(log: str) -> str:
    """What llama.cpp chose for the target in the last start in `log`: layers on the GPUs,
    context, and where the weights and KV went. Empty when the log says nothing of it."""
    starts = [m.start() for m in _START.finditer(log)]
    text = log[starts[-1]:] if starts else log
    parts = []
    layers, devices = _OFFLOADED.search(text), _BUFFER.findall(text)
    if layers and any(not name.startswith("CPU") for name, _ in devices):  # a CPU build says
        parts.append(f"{layers.group(1)}/{layers.group(2)} layers on the GPU")  # it too
    ctx, slots = _N_CTX.search(text), _SLOTS.search(text)
    if slots:
        parts.append(f"context {slots.group(2)} x {slots.group(1)} slot"
                     + ("s" if slots.group(1) != "1" else ""))
    elif ctx:
        parts.append(f"context {ctx.group(1)}")
    buffers = _sizes(_BUFFER, text)
    if buffers:
        parts.append(f"weights {buffers}")
    kv = _sizes(_KV, text)
    if kv:
        parts.append(f"KV {kv}")
    failed = _FIT_FAILED.search(text)
    if failed:
        parts.append(f"--fit gave up ({failed.group(1).strip()})")
    return ", ".join(parts)


def _sizes(pattern: re.Pattern[str], text: str) -> str:
    """'CPU_Mapped 3.4 GiB + CUDA0 1.2 GiB' for the target (the first load in the text)."""
    seen: dict[str, int] = {}
    for m in pattern.finditer(text):
        if m.group(1) in seen:
            break  # the draft's buffers follow the target's
        seen[m.group(1)] = round(float(m.group(2)) * MIB)
    return " + ".join(f"{name} {gib(size, 2)}" for name, size in seen.items())
