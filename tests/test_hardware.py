"""Hardware: recorded machines, fingerprints, and the detectors with injected runners."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from specctl.orchestrator.contract.hardware import AppleSilicon, Cpu, Gpu, Hardware
from specctl.orchestrator.errors import HardwareError
from specctl.orchestrator.machine import hardware
from specctl.orchestrator.machine.hardware import (
    Detectors,
    detect,
    detect_apple,
    detect_cpu,
    detect_nvidia,
    from_json,
)
from specctl.orchestrator.sizes import GIB, MIB
from tests.conftest import HARDWARE, recorded

MACHINES = sorted(p.stem for p in HARDWARE.glob("*.json"))

# name -> (kind, total GPU memory in GiB, describe())
EXPECTED: dict[str, tuple[str, float, str]] = {
    "linux_1x_h100_80g": ("cuda", 79.6, "1x NVIDIA H100 80GB HBM3 (79.6 GiB each)"),
    "linux_1x_rtx4090_24g": ("cuda", 23.5, "1x NVIDIA GeForce RTX 4090 (23.5 GiB each)"),
    "linux_8x_h100_80g": ("cuda", 8 * 79.6, "8x NVIDIA H100 80GB HBM3 (79.6 GiB each)"),
    "linux_8x_h200_141g": ("cuda", 8 * 139.8, "8x NVIDIA H200 (139.8 GiB each)"),
    "linux_cpu_2c_24g": ("cpu", 0.0,
                         "CPU Intel Xeon Processor (Icelake), 2 cores, 23.4 GiB RAM"),
    "macos_m3_ultra_96g": (
        "metal", 0.0, "Apple M3 Ultra, 96.0 GiB unified memory (Metal working set 72.0 GiB)"),
    "linux_2x_rtx3090_24g": ("cuda", 48.0, "2x NVIDIA GeForce RTX 3090 (24.0 GiB each, 0.4 GiB "
                             "in use by other processes)"),
    "linux_1x_rtx3090_24g": ("cuda", 24.0, "1x NVIDIA GeForce RTX 3090 (24.0 GiB each, 0.2 GiB "
                             "in use by other processes)"),
    "linux_4x_a100_40g": ("cuda", 160.0, "4x NVIDIA A100-SXM4-40GB (40.0 GiB each)"),
    "macos_m2_pro_32g": (
        "metal", 0.0, "Apple M2 Pro, 32.0 GiB unified memory (Metal working set 21.4 GiB)"),
    "linux_1x_l40s_48g_shared": ("cuda", 44.99, "1x NVIDIA L40S (45.0 GiB each, 22.5 GiB in use "
                                 "by other processes)"),
}

NVIDIA_SMI_2X_H100 = "0, NVIDIA H100 80GB HBM3, 81559, 0\n1, NVIDIA H100 80GB HBM3, 81559, 40960\n"
NVIDIA_QUERY = ("nvidia-smi", "--query-gpu=index,name,memory.total,memory.used",
                "--format=csv,noheader,nounits")


def test_every_fixture_machine_is_expected() -> None:
    assert sorted(EXPECTED) == MACHINES


@pytest.mark.parametrize("name", MACHINES)
def test_recorded_machine_kind_memory_and_description(name: str) -> None:
    kind, gpu_gb, description = EXPECTED[name]
    hw = recorded(name)
    assert hw.name == name
    assert hw.kind == kind
    assert hw.gpu_memory_bytes == pytest.approx(gpu_gb * GIB, rel=1e-3)
    assert all(type(g.memory_bytes) is int for g in hw.gpus)
    assert hw.describe() == description


@pytest.mark.parametrize("name", MACHINES)
def test_load_reads_the_file_and_records_its_path(name: str) -> None:
    path = HARDWARE / f"{name}.json"
    hw = hardware.load(path)
    assert hw.source == str(path)
    assert hw == recorded(name)  # source does not take part in equality


@pytest.mark.parametrize("name", MACHINES)
def test_to_json_round_trips(name: str) -> None:
    hw = recorded(name)
    data = hw.to_json()
    assert "source" not in data
    assert from_json(json.loads(json.dumps(data))) == hw


def test_cuda_machine_details() -> None:
    hw = recorded("linux_8x_h100_80g")
    assert len(hw.gpus) == 8
    assert [g.index for g in hw.gpus] == list(range(8))
    assert hw.apple is None
    assert hw.cpu.flags == ("avx", "avx2", "avx512f", "fma", "f16c")


def test_apple_machine_details() -> None:
    hw = recorded("macos_m3_ultra_96g")
    assert hw.apple == AppleSilicon("Apple M3 Ultra", 96 * GIB, 72 * GIB)
    assert hw.gpus == ()


def test_fingerprint_is_stable() -> None:
    first = recorded("linux_1x_h100_80g").fingerprint()
    again = hardware.load(HARDWARE / "linux_1x_h100_80g.json").fingerprint()
    assert first == again
    assert len(first) == 16
    int(first, 16)  # hex


def test_fingerprints_differ_between_machines() -> None:
    prints = {name: recorded(name).fingerprint() for name in MACHINES}
    assert len(set(prints.values())) == len(MACHINES), prints


def test_fingerprint_ignores_the_machine_name_but_not_the_gpus() -> None:
    hw = recorded("linux_1x_h100_80g")
    renamed = Hardware(name="other-host", os=hw.os, arch=hw.arch, cpu=hw.cpu, gpus=hw.gpus)
    assert renamed.fingerprint() == hw.fingerprint()
    fewer = Hardware(name=hw.name, os=hw.os, arch=hw.arch, cpu=hw.cpu, gpus=())
    assert fewer.fingerprint() != hw.fingerprint()


def test_bad_json_file_names_the_path(tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text('{"name": "x", "os": ')
    with pytest.raises(HardwareError, match="not valid JSON") as info:
        hardware.load(bad)
    assert str(bad) in str(info.value)


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.json"
    with pytest.raises(HardwareError, match="not found") as info:
        hardware.load(missing)
    assert str(missing) in str(info.value)


def test_json_that_is_not_a_machine_names_the_path(tmp_path: Path) -> None:
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({"name": "x", "os": "linux", "arch": "x86_64"}))
    with pytest.raises(HardwareError, match="not a recorded machine") as info:
        hardware.load(odd)
    assert str(odd) in str(info.value)


# --- detectors with injected runners -------------------------------------------------------


def test_detect_nvidia_parses_recorded_nvidia_smi() -> None:
    calls: list[tuple[str, ...]] = []

    def run(argv: Sequence[str]) -> str | None:
        calls.append(tuple(argv))
        return NVIDIA_SMI_2X_H100

    gpus = detect_nvidia(run)
    assert calls == [NVIDIA_QUERY]
    assert gpus == (Gpu("NVIDIA H100 80GB HBM3", 81559 * MIB, 0, 0),
                    Gpu("NVIDIA H100 80GB HBM3", 81559 * MIB, 1, 40960 * MIB))
    assert gpus[1].free_bytes == (81559 - 40960) * MIB


def test_detect_nvidia_without_nvidia_smi_finds_nothing() -> None:
    assert detect_nvidia(lambda _argv: None) == ()
    assert detect_nvidia(lambda _argv: "") == ()


def test_detect_nvidia_skips_lines_it_cannot_read() -> None:
    out = ("0, NVIDIA A100-SXM4-40GB, [N/A], 0\n1, NVIDIA A100-SXM4-40GB, 40960, [N/A]\n"
           "garbage\n")
    assert detect_nvidia(lambda _argv: out) == (Gpu("NVIDIA A100-SXM4-40GB", 40 * GIB, 1),)


def _sysctl(values: dict[str, str | None]) -> hardware.Runner:
    def run(argv: Sequence[str]) -> str | None:
        assert list(argv[:2]) == ["sysctl", "-n"]
        return values.get(argv[2])

    return run


def test_detect_apple_reads_sysctl() -> None:
    run = _sysctl({"machdep.cpu.brand_string": "Apple M3 Ultra\n",
                   "hw.memsize": f"{96 * 1024**3}\n", "iogpu.wired_limit_mb": "0\n"})
    apple = detect_apple(run, system="Darwin", machine="arm64")
    assert apple == AppleSilicon(chip="Apple M3 Ultra", unified_memory_bytes=96 * GIB,
                                 metal_working_set_bytes=72 * GIB)


def test_detect_apple_honours_a_raised_wired_limit() -> None:
    run = _sysctl({"machdep.cpu.brand_string": "Apple M2 Max", "hw.memsize": str(64 * 1024**3),
                   "iogpu.wired_limit_mb": "57344"})
    apple = detect_apple(run, system="Darwin", machine="arm64")
    assert apple is not None
    assert apple.unified_memory_bytes == 64 * GIB
    assert apple.metal_working_set_bytes == 56 * GIB  # 57344 MiB


def test_detect_apple_small_machine_gets_two_thirds() -> None:
    run = _sysctl({"machdep.cpu.brand_string": "Apple M1", "hw.memsize": str(16 * 1024**3)})
    apple = detect_apple(run, system="Darwin", machine="arm64")
    assert apple is not None
    assert apple.metal_working_set_bytes == round(16 * GIB * 0.67)


@pytest.mark.parametrize(("system", "machine"), [("Linux", "x86_64"), ("Darwin", "x86_64"),
                                                 ("Linux", "aarch64")])
def test_detect_apple_elsewhere_is_none(system: str, machine: str) -> None:
    def run(argv: Sequence[str]) -> str | None:
        raise AssertionError(f"must not run {argv}")

    assert detect_apple(run, system=system, machine=machine) is None


def test_detect_cpu_reads_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    block = ("processor\t: {n}\nvendor_id\t: GenuineIntel\n"
             "model name\t: Intel(R) Xeon(R) Platinum 8480+\n"
             "flags\t\t: fpu vme sse sse2 avx avx2 fma f16c avx512f avx512_bf16 sha_ni\n\n")
    cpuinfo.write_text(block.format(n=0) + block.format(n=1))

    def run(argv: Sequence[str]) -> str | None:
        raise AssertionError(f"must not run {argv}")

    cpu = detect_cpu(cpuinfo, run)
    assert cpu.model == "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu.flags == ("avx", "avx2", "avx512_bf16", "avx512f", "f16c", "fma")
    assert cpu.cores >= 1
    assert cpu.ram_bytes > 0


def test_detect_cpu_reads_arm_features(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd sve crc32\n")
    cpu = detect_cpu(cpuinfo, lambda _argv: None)
    assert "sve" in cpu.flags
    assert "crc32" not in cpu.flags


def test_detect_uses_the_injected_detectors() -> None:
    cpu = Cpu(model="Test CPU", cores=4, ram_bytes=16 * GIB, flags=("avx2",))
    gpus = (Gpu("NVIDIA H100 80GB HBM3", 81559 * MIB, 0),)
    hw = detect(Detectors(cpu=lambda: cpu, nvidia=lambda: gpus, apple=lambda: None))
    assert hw.cpu == cpu
    assert hw.gpus == gpus
    assert hw.kind == "cuda"
    assert hw.source == "detected"
    assert hw.name


def test_detect_apple_machine_from_detectors() -> None:
    cpu = Cpu(model="Apple M3 Ultra", cores=28, ram_bytes=96 * GIB, flags=("neon",))
    apple = AppleSilicon("Apple M3 Ultra", 96 * GIB, 72 * GIB)
    hw = detect(Detectors(cpu=lambda: cpu, nvidia=lambda: (), apple=lambda: apple))
    assert hw.kind == "metal"
    assert hw.describe().startswith("Apple M3 Ultra, 96.0 GiB unified memory")


def test_detect_cpu_only_machine_from_detectors() -> None:
    cpu = Cpu(model="Tiny", cores=2, ram_bytes=8 * GIB)
    hw = detect(Detectors(cpu=lambda: cpu, nvidia=lambda: (), apple=lambda: None))
    assert hw.kind == "cpu"
    assert hw.gpu_memory_bytes == 0


# --- what is visible and free -------------------------------------------------------------


def test_a_machine_recorded_in_gib_still_loads(tmp_path: Path) -> None:
    """Files written before sizes were bytes (`memory_gb`, GiB) read as the same bytes."""
    old = {"name": "old", "os": "linux", "arch": "x86_64",
           "cpu": {"model": "m", "cores": 2, "ram_gb": 23.5},
           "gpus": [{"name": "g", "memory_gb": 79.6, "index": 0}]}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    hw = hardware.load(path)
    assert hw.gpus[0].memory_bytes == round(79.6 * GIB)
    assert hw.cpu.ram_bytes == round(23.5 * GIB)


def test_used_above_total_is_refused(tmp_path: Path) -> None:
    data = recorded("linux_1x_l40s_48g_shared").to_json()
    data["gpus"][0]["used_bytes"] = data["gpus"][0]["memory_bytes"] + 1
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(HardwareError, match="used_bytes is above memory_bytes"):
        hardware.load(path)


def test_cuda_visible_devices_keeps_the_named_gpus_in_order() -> None:
    hw = recorded("linux_8x_h100_80g")
    seen = hardware.visible(hw, "3,1")
    assert [g.index for g in seen.gpus] == [3, 1]
    assert seen.visibility == ("CUDA_VISIBLE_DEVICES=3,1: 2 of 8 GPUs visible (hidden: 0, 2, 4, "
                               "5, 6, 7)")
    assert hardware.visible(hw, None) is hw
    assert hardware.visible(hw, "0,1,2,3,4,5,6,7") is hw


@pytest.mark.parametrize("value", ["", "-1", "-1,0"])
def test_cuda_visible_devices_empty_or_negative_hides_every_gpu(value: str) -> None:
    seen = hardware.visible(recorded("linux_2x_rtx3090_24g"), value)
    assert seen.gpus == () and seen.kind == "cpu"
    assert "0 of 2 GPUs visible" in seen.visibility


def test_cuda_visible_devices_stops_at_the_first_negative_index() -> None:
    seen = hardware.visible(recorded("linux_8x_h100_80g"), "2,-1,3")
    assert [g.index for g in seen.gpus] == [2]


@pytest.mark.parametrize(("value", "message"), [
    ("GPU-8f3a1c2e", "GPU indices"), ("0,9", "names GPU 9, which linux_2x_rtx3090_24g does not")])
def test_cuda_visible_devices_it_cannot_apply_is_one_line(value: str, message: str) -> None:
    with pytest.raises(HardwareError, match=message) as info:
        hardware.visible(recorded("linux_2x_rtx3090_24g"), value)
    assert "\n" not in str(info.value)
