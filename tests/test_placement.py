"""Memory placement in one unit: bytes compared, GiB shown; GPUs split by free memory, partial
and MoE offload, the recorded machines with their placement computed by hand."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specctl.adapters.llamacpp import LlamaCpp
from specctl.adapters.vllm import Vllm, VllmOptions
from specctl.orchestrator.config.profiles import Memory
from specctl.orchestrator.contract.launch import Installed
from specctl.orchestrator.contract.memory import Budget
from specctl.orchestrator.contract.model import ModelInfo
from specctl.orchestrator.errors import DoesNotFitError
from specctl.orchestrator.planning import memory
from specctl.orchestrator.planning.memory import estimate
from specctl.orchestrator.sizes import GIB, MIB, gib_pair
from tests import plans
from tests.conftest import HARDWARE, recorded
from tests.test_planner import plan_for

TYPES = LlamaCpp.cache_types


def model(layers: int, kv_heads: int, head_dim: int, size: int, vocab: int = 32000,
          share: float = 0.0) -> ModelInfo:
    return replace(plans.target(), layers=layers, kv_heads=kv_heads, head_dim=head_dim,
                   size_bytes=size, vocab_size=vocab, expert_share=share)


models = st.builds(model, st.integers(1, 128), st.integers(1, 16), st.sampled_from([64, 128]),
                   st.integers(1 << 20, 200 * GIB), st.integers(1000, 260000),
                   st.sampled_from([0.0, 0.9]))


@settings(max_examples=300, deadline=None)
@given(models, st.one_of(st.none(), models), st.sampled_from([2048, 4096, 16384, 131072]),
       st.integers(0, 300 * GIB), st.integers(0, 300 * GIB), st.booleans())
def test_a_plan_fits_exactly_when_its_bytes_fit(target: ModelInfo, draft: ModelInfo | None,
                                                context: int, limit: int, host: int,
                                                spill: bool) -> None:
    budget = Budget(limit, "test", host=host)
    ways = LlamaCpp.spills if spill else ()
    try:
        chosen, notes = memory.plan(target, draft, context, Memory(), budget, TYPES, ways)
    except DoesNotFitError as exc:
        # nothing smaller fits: the smallest cache at the shortest context, bytes against bytes
        smallest = estimate(target, draft, min(2048, context), "q4_0", budget)
        assert smallest.total_bytes > limit
        if not ways:
            numbers = re.search(r"needs ([\d.]+) GiB .* budget is ([\d.]+) GiB", str(exc))
            assert numbers is not None, str(exc)
            assert float(numbers.group(1)) > float(numbers.group(2))  # never "21.5 of 21.5"
        assert " GB" not in str(exc)
        return
    assert chosen.fits
    assert chosen.device_bytes <= limit and chosen.host_bytes <= host
    assert chosen.fits == (chosen.total_bytes - chosen.host_bytes <= limit
                           and chosen.host_bytes <= host)
    assert not any(" GB" in n for n in notes)
    if chosen.host_bytes:  # spilled only when nothing fitted the devices alone
        whole = estimate(target, draft, min(2048, context), "q4_0", budget)
        assert whole.total_bytes > limit


@given(models, st.sampled_from(["f16", "q8_0", "q4_0"]))
def test_the_boundary_is_a_byte(target: ModelInfo, cache_type: str) -> None:
    need = estimate(target, None, 4096, cache_type, Budget(0, "x")).total_bytes
    mem = Memory(cache_type=cache_type, min_context=4096)  # type: ignore[arg-type]
    plan, _ = memory.plan(target, None, 4096, mem, Budget(need, "exact"), TYPES)
    assert plan.fits and plan.device_bytes == need
    with pytest.raises(DoesNotFitError):
        memory.plan(target, None, 4096, mem, Budget(need - 1, "a byte short"), TYPES)


def test_close_sizes_are_told_apart() -> None:
    assert gib_pair(round(21.53 * GIB), round(21.5 * GIB)) == ("21.53 GiB", "21.50 GiB")
    assert gib_pair(22 * GIB + MIB, 22 * GIB) == ("22.001 GiB", "22.000 GiB")
    assert gib_pair(22 * GIB + 1, 22 * GIB) == (f"{22 * GIB + 1:,} bytes", f"{22 * GIB:,} bytes")


def test_the_rtx4090_profile_keeps_16k_context_with_a_q8_cache(tmp_path: Path) -> None:
    """Qwen2.5-Coder-32B Q4_K_M + 0.5B Q8_0 at 16384 tokens: f16 KV needs 24.1 GiB, q8_0 22.13
    GiB, of 23.5 GiB x 0.95 = 22.33 GiB. (In mixed units it was cut to 4096.)"""
    profile = {"target": "hf:bartowski/Qwen2.5-Coder-32B-Instruct-GGUF:Q4_K_M",
               "draft": "hf:bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q8_0", "k": "auto",
               "backend": ["llamacpp"], "server": {"context": 16384},
               "memory": {"gpu_utilization": 0.95}}
    plan, _ = plan_for(profile, "linux_1x_rtx4090_24g", tmp_path)
    assert (plan.context, plan.cache_type) == (16384, "q8_0")
    m = plan.memory
    # by hand: 32.76e9 x 0.6055 + 0.49e9 x 1.0625 weights; KV 64 x 8 x 128 x 2 (target) and
    # 24 x 2 x 64 x 2 (draft) elements per token x 16384 x 34/32 bytes; compute 350 MiB +
    # 152064 x 512 x 4 + (350 MiB + 151936 x 512 x 4) / 2
    weights = int(32.76e9 * 0.6055) + int(0.49e9 * 1.0625)
    kv = (64 * 8 * 128 * 2 + 24 * 2 * 64 * 2) * 16384 * 17 // 16
    compute = 350 * MIB + 152064 * 512 * 4 + (350 * MIB + 151936 * 512 * 4) // 2
    assert m.total_bytes == pytest.approx(weights + kv + compute, abs=16)
    assert m.total_bytes / GIB == pytest.approx(22.13, abs=0.01)
    assert m.budget.limit == round(23.5 * GIB * 0.95)
    assert any(r.startswith("Memory: 22.1 GiB of 22.3 GiB (1x NVIDIA GeForce RTX 4090")
               for r in plan.reasons)
    assert any("KV cache quantised to q8_0" in r for r in plan.reasons)
    assert not any("Context lowered" in r for r in plan.reasons)


# --- the recorded machines, each with its placement computed by hand ---------------------------

TARGET_70B = "hf:bartowski/Meta-Llama-3.1-70B-Instruct-GGUF:Q4_K_M"
DRAFT_1B = "hf:bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0"
BF16_70B = {"target": "hf:meta-llama/Llama-3.1-70B-Instruct",
            "draft": "hf:meta-llama/Llama-3.2-1B-Instruct", "backend": ["vllm"]}
W70 = int(70.55e9 * 0.6055)  # Llama-3.1-70B Q4_K_M, catalog bytes per weight


def llama(fit: str = "auto", **more: object) -> dict[str, object]:
    return {"target": TARGET_70B, "draft": DRAFT_1B, "backend": ["llamacpp"],
            "llamacpp": {"fit": fit}, **more}


def installed_llamacpp() -> Installed:
    """The llama-server built in the shared cache when it is there, else the shipped dialect of
    the same build: the argv must pass its --help either way."""
    found = LlamaCpp(backends_dir=Path.home() / ".cache" / "specctl" / "backends").probe()
    return found or LlamaCpp().assumed()


def accepted(argv: tuple[str, ...], installed: Installed) -> None:
    flags = {a for a in argv[1:] if re.fullmatch(r"--?[a-z][a-z0-9-]*", a)}
    assert flags <= installed.flags, flags - installed.flags


def test_two_rtx3090s_split_the_70b_by_free_memory(tmp_path: Path) -> None:
    hw = recorded("linux_2x_rtx3090_24g")
    plan, _ = plan_for(llama("off"), "linux_2x_rtx3090_24g", tmp_path)
    m = plan.memory
    # by hand, per GPU: min(24576 MiB x 0.9, 24576 MiB - used) = 22118.4 MiB on both
    share = round(24576 * MIB * 0.9)
    assert m.budget.per_device == (share, share) and m.budget.devices == 2
    assert "in use" not in m.budget.why  # the utilisation share binds, not what others use
    assert m.split == (0.5, 0.5)
    # 39.8 GiB of weights + 1.2 GiB draft do not fit one GPU's 21.6 GiB; both hold them at
    # 4096 tokens with a q8_0 cache (42.6 of 43.2 GiB), no layer in system RAM
    assert (plan.context, plan.cache_type) == (4096, "q8_0")
    assert m.host_bytes == 0 and m.gpu_layers is None and m.target_bytes == W70
    assert m.device_bytes <= 2 * share
    installed = installed_llamacpp()
    argv = LlamaCpp().launch(plan, installed).argv
    got = set(itertools.pairwise(argv))
    assert {("-ngl", "999"), ("--split-mode", "layer"), ("--tensor-split", "0.5,0.5")} <= got
    assert ("-devd", "CUDA1") in got  # the draft on the GPU with more free memory
    accepted(argv, installed)
    assert any(r.startswith("Layers split across 2 GPUs by free memory (50%, 50%)")
               for r in plan.reasons)
    # with llama.cpp's --fit: the margins the plan leaves, per GPU, in MiB
    fitted, _ = plan_for(llama(), "linux_2x_rtx3090_24g", tmp_path)
    argv = LlamaCpp().launch(fitted, installed).argv
    margins = [(24576 - 402) - 22118.4, (24576 - 4) - 22118.4]  # free - budget share
    assert ("--fit-target", ",".join(str(int(x)) for x in margins)) in set(
        itertools.pairwise(argv))
    assert "-ngl" not in argv and "--tensor-split" not in argv
    accepted(argv, installed)
    assert hw.gpus[0].used_bytes == 402 * MIB


def test_a_24gb_card_runs_the_70b_partly_offloaded(tmp_path: Path) -> None:
    plan, _ = plan_for(llama("off"), "linux_1x_rtx3090_24g", tmp_path)
    m = plan.memory
    # by hand: budget min(22118.4, 24576 - 218) MiB; the f16 cache at 8192 tokens; the last
    # layers (weights + KV, 80 of them) go to RAM until the rest fits the GPU
    limit = round(24576 * MIB * 0.9)
    kv = 80 * 8 * 128 * 2 * 2 * 8192
    total = (W70 + int(1.24e9 * 1.0625) + kv + 16 * 8 * 64 * 2 * 2 * 8192
             + 350 * MIB + 128256 * 2048 + (350 * MIB + 128256 * 2048) // 2)
    per_layer = (W70 + kv) // 80
    off = -(-(total - limit) // per_layer)
    assert (m.total_bytes, m.budget.limit) == (total, limit)
    assert (plan.context, plan.cache_type) == (8192, "f16")
    assert off == 44 and m.gpu_layers == 80 - off == 36
    assert m.host_bytes == off * per_layer
    speed = (W70 + kv) / (W70 + kv + 9 * off * per_layer)  # RAM read 10x slower
    assert m.speed == pytest.approx(speed) and round(speed, 2) == 0.17
    assert ("Placement: 36 of 80 target layers on the GPU, the rest (23.3 GiB) in system RAM: "
            "expect about 17% of full-GPU speed; the draft stays on the GPU.") in plan.reasons
    installed = installed_llamacpp()
    argv = LlamaCpp().launch(plan, installed).argv
    assert ("-ngl", "36") in set(itertools.pairwise(argv))
    assert ("-ngld", "999") in set(itertools.pairwise(argv))  # the draft whole on the GPU
    accepted(argv, installed)
    # a target mostly in RAM is slower per step, so a draft step costs relatively less
    assert "weights ratio x 0.17" in plan.reasons[-1]
    whole, _ = plan_for(llama("off"), "linux_1x_h100_80g", tmp_path)
    assert plan.k >= whole.k


def test_an_moe_keeps_its_experts_in_ram_before_whole_layers(tmp_path: Path) -> None:
    profile = {"target": "hf:Qwen/Qwen3-30B-A3B-GGUF:Q8_0", "draft": "hf:Qwen/Qwen3-0.6B-GGUF:Q8_0",
               "backend": ["llamacpp"], "llamacpp": {"fit": "off"}}
    plan, _ = plan_for(profile, "linux_1x_rtx3090_24g", tmp_path)
    m = plan.memory
    size = int(30.53e9 * 1.0625)
    experts = int(size * 0.95) // 48  # per layer
    assert m.target_bytes == size
    n = -(-(m.total_bytes - m.budget.limit) // experts)
    assert m.cpu_moe_layers == n == 20 and m.gpu_layers is None
    assert m.host_bytes == 20 * experts
    argv = LlamaCpp().launch(plan, installed_llamacpp()).argv
    got = set(itertools.pairwise(argv))
    assert {("-ngl", "999"), ("--n-cpu-moe", "20")} <= got
    accepted(argv, installed_llamacpp())
    assert any(r.startswith("Placement: MoE experts of 20 of 48 layers in system RAM")
               for r in plan.reasons)


def test_four_a100s(tmp_path: Path) -> None:
    # llama.cpp: the 70B Q4 over 4 x min(40960 MiB x 0.9, 40957 MiB), a quarter each
    plan, _ = plan_for(llama("off"), "linux_4x_a100_40g", tmp_path)
    assert plan.memory.split == (0.25,) * 4 and plan.memory.host_bytes == 0
    assert (plan.context, plan.cache_type) == (8192, "f16")  # 44.9 of 144 GiB
    # vLLM: 70B BF16 (131.4 GiB) needs tensor parallelism; 4 divides its 64 heads
    vplan, installed = plan_for(BF16_70B, "linux_4x_a100_40g", tmp_path)
    opts = vplan.options
    assert isinstance(opts, VllmOptions) and opts.tensor_parallel == 4
    assert vplan.memory.budget.limit == 4 * round(40960 * MIB * 0.9)
    argv = Vllm().launch(vplan, installed).argv
    assert ("--tensor-parallel-size", "4") in set(itertools.pairwise(argv))
    assert any(r.startswith("Parallel: tensor_parallel_size 4 inferred") for r in vplan.reasons)


def test_a_32gb_mac(tmp_path: Path) -> None:
    # Metal working set 0.67 x 32 GiB = 21.44 GiB; nothing to spill into (unified memory)
    profile = {"target": "hf:bartowski/Qwen2.5-Coder-32B-Instruct-GGUF:Q4_K_M",
               "draft": "hf:bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q8_0",
               "backend": ["llamacpp"]}
    plan, _ = plan_for(profile, "macos_m2_pro_32g", tmp_path)
    assert plan.memory.budget.limit == round(32 * GIB * 0.67) and plan.memory.budget.host == 0
    # f16 at 8192: 18.5 + 0.5 + 2.1 + 0.9 = 22.0 GiB > 21.44; q8_0: 20.9 GiB fits
    assert (plan.context, plan.cache_type) == (8192, "q8_0")
    with pytest.raises(DoesNotFitError, match=r"budget is 21\.4 GiB \(Metal working-set") as e:
        plan_for(llama(), "macos_m2_pro_32g", tmp_path)
    assert "system RAM" not in str(e.value)


def test_a_shared_gpu_half_used(tmp_path: Path) -> None:
    hw = recorded("linux_1x_l40s_48g_shared")
    # 46068 MiB x 0.9 = 41461 MiB, but only 46068 - 23034 = 23034 MiB are free, less 1 GiB
    # for the server's own CUDA context
    budget = memory.budget_for(hw, Memory())
    assert budget.limit == (23034 - 1024) * MIB
    assert "less 22.5 GiB in use by other processes and 1.0 GiB" in budget.why
    profile = {"target": "hf:bartowski/Qwen2.5-Coder-32B-Instruct-GGUF:Q4_K_M",
               "draft": "hf:bartowski/Qwen2.5-Coder-0.5B-Instruct-GGUF:Q8_0",
               "backend": ["llamacpp"], "server": {"context": 16384}}
    plan, _ = plan_for(profile, "linux_1x_l40s_48g_shared", tmp_path)
    # 16384 tokens need 22.13 GiB at q8_0; 8192 need 21.99 at f16, 21.03 at q8_0 (of 21.49)
    assert (plan.context, plan.cache_type) == (8192, "q8_0")
    # vLLM refuses to start when utilisation x total is not free after its CUDA context:
    # (23034 - 1024) / 46068 = 0.477 of the GPU, rounded down
    vplan, installed = plan_for({"target": "hf:Qwen/Qwen2.5-Coder-7B-Instruct", "draft": "none",
                                 "backend": ["vllm"]}, "linux_1x_l40s_48g_shared", tmp_path)
    argv = Vllm().launch(vplan, installed).argv
    assert ("--gpu-memory-utilization", "0.47") in set(itertools.pairwise(argv))


def test_cuda_visible_devices_plans_on_the_gpus_left(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    from specctl.orchestrator.app import App
    from specctl.orchestrator.config.profiles import profile_model

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("SPECCTL_CACHE_DIR", str(tmp_path / "cache"))
    profile = profile_model().model_validate({"name": "bf16", **BF16_70B})
    machine = HARDWARE / "linux_8x_h100_80g.json"
    eight = App.from_env().resolve(profile, machine).plan
    assert isinstance(eight.options, VllmOptions) and eight.options.tensor_parallel == 8
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    two = App.from_env().resolve(profile, machine).plan
    assert isinstance(two.options, VllmOptions) and two.options.tensor_parallel == 2
    assert two.memory.budget.limit == 2 * round(79.6 * GIB * 0.9)
    assert "CUDA_VISIBLE_DEVICES=0,1: 2 of 8 GPUs visible" in two.memory.budget.why
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with pytest.raises(DoesNotFitError, match=r"needs 13\d\.\d GiB .* budget is 71\.6 GiB"):
        App.from_env().resolve(profile, machine)


# What the installed llama-server (0c1e570, CPU build) logged serving the 0.5B testbed model:
# an earlier start at the default verbosity (-np 4), then one at -lv 4, which also names the
# layers and buffers; the read-back takes the last start only.
SERVER_LOG = """\
0.00.002.997 I srv  llama_server: initializing ...
0.00.004.305 I cmn  common_param: common_params_print_info: verbosity = 3 (adjust with the `-lv N` \
CLI arg)
0.13.336.795 I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 4096, kv_unified = 'true'
0.16.977.392 I srv  llama_server: model loaded
0.00.001.146 I srv  llama_server: initializing ...
0.00.029.792 I cmn  common_init_: fitting params to device memory ...
0.02.299.055 I common_fit_params: successfully fit params to free device memory
0.04.025.572 I load_tensors: offloaded 25/25 layers to GPU
0.04.025.581 I load_tensors:   CPU_Mapped model buffer size =   462.96 MiB
0.04.025.583 I load_tensors:   CPU_REPACK model buffer size =    28.05 MiB
0.04.251.277 I llama_context: n_ctx                 = 4096
0.04.251.432 I llama_kv_cache:        CPU KV buffer size =    48.00 MiB
0.12.283.468 I srv    load_model: initializing, n_slots = 1, n_ctx_slot = 4096, kv_unified = 'false'
"""


def test_what_llamacpp_chose_is_read_from_its_log() -> None:
    from specctl.adapters.llamacpp_placement import chosen

    said = chosen(SERVER_LOG)
    # a CPU build says "offloaded 25/25 layers to GPU" too: not shown without a GPU buffer
    assert said == "context 4096 x 1 slot, weights CPU_Mapped 0.45 GiB + CPU_REPACK 0.03 GiB, " \
                   "KV CPU 0.05 GiB"
    first = SERVER_LOG[:SERVER_LOG.index("model loaded")]
    assert chosen(first) == "context 4096 x 4 slots"
    warned = first + ("0.02.1 W common_fit_params: failed to fit params to free device memory: "
                      "n_gpu_layers already set by user to 0, abort\n")
    assert chosen(warned).endswith("--fit gave up (n_gpu_layers already set by user to 0, abort)")
    gpu = ("0.00.001 I srv  llama_server: initializing ...\n"
           "load_tensors: offloaded 37/81 layers to GPU\n"
           "load_tensors:        CUDA0 model buffer size = 10240.00 MiB\n"
           "load_tensors:        CUDA1 model buffer size = 10240.00 MiB\n"
           "load_tensors:   CPU_Mapped model buffer size = 20480.00 MiB\n"
           "llama_context: n_ctx                 = 8192\n")
    assert chosen(gpu) == ("37/81 layers on the GPU, context 8192, weights CUDA0 10.00 GiB + "
                           "CUDA1 10.00 GiB + CPU_Mapped 20.00 GiB")
    assert chosen("") == "" and chosen("garbage\x00" * 100) == ""
    assert LlamaCpp().placement(gpu) == chosen(gpu)


def test_the_plan_says_when_llamacpp_fits_it_itself(tmp_path: Path) -> None:
    fitted, _ = plan_for(llama(), "linux_1x_rtx3090_24g", tmp_path)
    assert any(r.startswith("Placement: left to llama.cpp's own fitting (--fit") for r in
               fitted.reasons)
    own, _ = plan_for(llama("off"), "linux_1x_rtx3090_24g", tmp_path)
    assert not any("own fitting" in r for r in own.reasons)


def test_a_draft_may_displace_target_layers_into_ram() -> None:
    from specctl.orchestrator.planning.planner import _room

    target = model(80, 8, 128, 40 * GIB)
    gpu = Budget(20 * GIB, "one GPU", host=60 * GIB)
    assert _room(gpu, LlamaCpp(), target) == 20 * GIB  # the whole GPU: layers move to RAM
    assert _room(replace(gpu, host=25 * GIB), LlamaCpp(), target) == 5 * GIB
    assert _room(gpu, Vllm(), target) == -20 * GIB  # vLLM keeps the target whole on the GPUs


def test_rpc_workers_keep_their_own_split(tmp_path: Path) -> None:
    from specctl.adapters.llamacpp import LlamaCppOptions

    plan, _ = plan_for(llama("off"), "linux_2x_rtx3090_24g", tmp_path)
    rpc = plan.but(options=LlamaCppOptions(fit="off", rpc_workers=("10.0.0.2:50052",)))
    argv = LlamaCpp().launch(rpc, LlamaCpp().assumed()).argv
    assert "--tensor-split" not in argv and "--fit" not in argv
    assert ("-devd", "CUDA0") in set(itertools.pairwise(argv))  # the draft stays here


def test_status_reads_the_end_of_a_regular_log_only(tmp_path: Path) -> None:
    import os

    from specctl.orchestrator import runs

    log = tmp_path / "server.log"
    log.write_text("x" * (runs.LOG_READ + 10) + SERVER_LOG)
    head = runs._log_head(str(log))
    assert len(head.encode()) == runs.LOG_READ and head.endswith(SERVER_LOG)
    assert LlamaCpp().placement(head).startswith("context 4096 x 1 slot")
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    assert runs._log_head(str(fifo)) == ""  # never blocks on a FIFO
    assert runs._log_head(str(tmp_path / "missing.log")) == ""


def test_plan_output_keeps_the_reasons_whole(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from specctl.orchestrator.cli import render

    plan, installed = plan_for(llama(), "linux_1x_rtx3090_24g", tmp_path)
    out = io.StringIO()
    render.show_plan(Console(file=out, width=200), plan, installed,
                     LlamaCpp().launch(plan, installed))
    text = out.getvalue()
    assert '([llamacpp] fit = "off" passes specctl\'s own)' in text
    assert "memory      21.4 GiB of 21.6 GiB: target 39.8 GiB" in text
    assert " GB" not in text
