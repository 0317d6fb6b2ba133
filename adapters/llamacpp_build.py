"""Provision llama.cpp: use a llama-server that is already there, or build one from source.

The source is the llama.cpp tree that the `llama-cpp-python` sdist on PyPI carries under
`vendor/llama.cpp`. Metal on macOS, CUDA when `nvcc` is present, CPU otherwise; native CPU
flags, so the cache is keyed by source version, accelerator, the CPU's model and every flag it
reports (`-march=native` may use any of them). A finished build is recorded in `build.json`; a
second install finds it in seconds, and a build made for another CPU is never used.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from specctl.orchestrator.contract.launch import Progress
from specctl.orchestrator.errors import BackendError
from specctl.orchestrator.files import UnreadableError, read_text

SOURCE_PACKAGE = "llama-cpp-python"
SOURCE_VERSION = "0.3.36"
TARGETS = ("llama-server", "llama-quantize")
RPC_TARGETS = ("ggml-rpc-server", "rpc-server")  # the name changed in 2026
_STEP = re.compile(r"^\[(\d+)/(\d+)\]")

# ggml's AMX matmul segfaults on Sapphire-Rapids-class CPUs (ggml-org/llama.cpp#20824, open; seen
# here on every model at the first decode), and -march=native turns it on wherever AMX exists.
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


@dataclass(frozen=True)
class Toolchain:
    accel: str  # "metal" | "cuda" | "cpu"
    cpu_flags: tuple[str, ...]
    generator: str | None  # "Ninja" when ninja is there

    @property
    def compiler_flags(self) -> str:
        return NO_AMX if self.accel != "metal" and "amx_tile" in self.cpu_flags else ""

    @property
    def key(self) -> str:
        what = " ".join([*self.cpu_flags, self.compiler_flags])
        digest = hashlib.sha256(what.encode()).hexdigest()[:8]
        return f"{SOURCE_VERSION}-{self.accel}-{platform.machine()}-{digest}"


def cpu_signature(cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, ...]:
    """What a native build depends on: the CPU model and all its flags (Linux), else the
    processor name."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return (platform.processor() or platform.machine(),)
    model, flags = "", set[str]()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "CPU part") and not model:
            model = value.strip()
        elif key.strip() in ("flags", "Features"):
            flags |= set(value.split())
    return (model, *sorted(flags))


def toolchain(cpu_flags: tuple[str, ...], has_cuda_gpu: bool) -> Toolchain:
    """CUDA needs both nvcc and an NVIDIA GPU (nvcc alone, as on CI machines, builds for CPU)."""
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        accel = "metal"
    elif has_cuda_gpu and shutil.which("nvcc"):
        accel = "cuda"
    else:
        accel = "cpu"
    return Toolchain(accel, cpu_flags, "Ninja" if shutil.which("ninja") else None)


def llamacpp_root(backends_dir: Path) -> Path:
    return backends_dir / "llama.cpp"


def installed_server(backends_dir: Path, tc: Toolchain) -> Path | None:
    """This machine's finished build's llama-server in the cache, if any."""
    if record_of(backends_dir, tc) is None:
        return None
    server = llamacpp_root(backends_dir) / tc.key / "bin" / "llama-server"
    return server if server.is_file() else None


def record_of(backends_dir: Path, tc: Toolchain) -> dict[str, object] | None:
    path = llamacpp_root(backends_dir) / tc.key / "build.json"
    try:
        data = json.loads(read_text(path, limit=1 << 16))
    except (OSError, ValueError, RecursionError, UnreadableError):  # no finished build
        return None
    return data if isinstance(data, dict) else None


def _run(cmd: list[str], log: Path, progress: Progress, what: str, cwd: Path | None = None) -> None:
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(line)
            m = _STEP.match(line)
            if m:
                progress(what, int(m.group(1)), int(m.group(2)))
        if proc.wait() != 0:
            raise BackendError(f"{what} failed (exit {proc.returncode}); see {log}")


def _fetch_source(work: Path, log: Path, progress: Progress) -> Path:
    progress(f"downloading {SOURCE_PACKAGE}=={SOURCE_VERSION} source from PyPI", 0, 0)
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", SOURCE_PACKAGE,
          "--disable-pip-version-check", f"{SOURCE_PACKAGE}=={SOURCE_VERSION}", "-d", str(work)],
         log, progress, "pip download")
    sdists = list(work.glob("*.tar.gz"))
    if not sdists:
        raise BackendError(f"pip did not deliver the {SOURCE_PACKAGE} source; see {log}")
    progress("unpacking vendor/llama.cpp", 0, 0)
    with tarfile.open(sdists[0]) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name]
        tar.extractall(work, members=members, filter="data")
    found = list(work.glob("*/vendor/llama.cpp/CMakeLists.txt"))
    if not found:
        raise BackendError(f"{sdists[0].name} carries no vendor/llama.cpp tree")
    return found[0].parent


def cmake_args(src: Path, out: Path, tc: Toolchain) -> list[str]:
    args = ["cmake", "-S", str(src), "-B", str(out), "-DCMAKE_BUILD_TYPE=Release",
            "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_UI=OFF",
            "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF",
            "-DBUILD_SHARED_LIBS=OFF", "-DGGML_RPC=ON", "-Wno-dev"]
    if tc.generator:
        args += ["-G", tc.generator]
    if tc.compiler_flags:
        args += [f"-DCMAKE_C_FLAGS={tc.compiler_flags}", f"-DCMAKE_CXX_FLAGS={tc.compiler_flags}"]
    if tc.accel == "cuda":
        args.append("-DGGML_CUDA=ON")
    elif tc.accel == "metal":
        args.append("-DGGML_METAL=ON")
    return args


def _rpc_target(src: Path) -> str:
    text = (src / "tools" / "rpc" / "CMakeLists.txt")
    body = text.read_text() if text.is_file() else ""
    return next((t for t in RPC_TARGETS if f"set(TARGET {t})" in body), RPC_TARGETS[1])


def install(backends_dir: Path, tc: Toolchain, progress: Progress, rebuild: bool = False,
            jobs: int | None = None) -> Path:
    """Build (or reuse) llama-server, llama-quantize and the RPC server; returns the bin dir."""
    root = llamacpp_root(backends_dir)
    final = root / tc.key
    if not rebuild and record_of(backends_dir, tc) is not None:
        return final / "bin"
    root.mkdir(parents=True, exist_ok=True)
    log = root / f"build-{tc.key}.log"
    log.write_text("")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="specctl-build-", dir=root) as tmp:
        work = Path(tmp)
        src = _fetch_source(work, log, progress)
        out = work / "build"
        progress("configuring (cmake)", 0, 0)
        _run(cmake_args(src, out, tc), log, progress, "cmake configure")
        targets = [*TARGETS, _rpc_target(src)]
        _run(["cmake", "--build", str(out), "--config", "Release", "-j",
              str(jobs or os.cpu_count() or 2), "--target", *targets], log, progress,
             "compiling llama.cpp")
        staged = work / "staged"
        (staged / "bin").mkdir(parents=True)
        for t in targets:
            binary = next(iter(out.glob(f"bin/{t}")), None)
            if binary is None:
                raise BackendError(f"the build did not produce {t}; see {log}")
            name = "rpc-server" if t in RPC_TARGETS else t
            shutil.copy2(binary, staged / "bin" / name)
        version = subprocess.run([str(staged / "bin" / "llama-server"), "--version"],
                                 capture_output=True, text=True, check=False)
        record = {"source": f"{SOURCE_PACKAGE}=={SOURCE_VERSION}", "accel": tc.accel,
                  "cpu_flags": list(tc.cpu_flags),
                  "compiler_flags": tc.compiler_flags, "version": (version.stdout + version.stderr)
                  .strip(), "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                  "seconds": round(time.monotonic() - started)}
        (staged / "build.json").write_text(json.dumps(record, indent=2) + "\n")
        if final.exists():
            shutil.rmtree(final)
        staged.rename(final)
    return final / "bin"
