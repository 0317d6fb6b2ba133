"""scripts/gpu-check without a GPU: --dry-run lists every step it would run (the argument
parsing checked), and a real run on a machine without nvidia-smi stops at once with one line
saying what is missing, exit 2 and a results file that says so. The run itself needs a CUDA
machine (the device machines: `scripts/gpu-check --help` says how to prepare one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu-check"


def gpu_check(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path if path is not None else os.environ.get("PATH", "")}
    env.pop("OUT", None)
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=60, check=False, cwd=ROOT)


def test_dry_run_lists_every_step_and_runs_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = gpu_check("--dry-run", "--out", str(out), "--budget", "300")
    assert done.returncode == 0, done.stderr
    steps = [ln.split()[0] for ln in done.stdout.splitlines()[1:]]
    for step in ("vllm-install", "vllm-cuda", "tiny-models", "up-draft", "up-ngram",
                 "bench-paired", "bench-sequential", "tune-costs", "llamacpp-cuda"):
        assert step in steps, done.stdout
    assert "--sequential" in done.stdout and "--also ngram" in done.stdout
    assert "budget 300 s" in done.stdout and not out.exists()


def test_dry_run_takes_an_existing_vllm_environment_or_a_wheelhouse(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    done = gpu_check("--dry-run", "--wheelhouse", str(wheels), "--no-llamacpp")
    assert done.returncode == 0, done.stderr
    assert f"--no-index --find-links {wheels}" in done.stdout
    assert "llamacpp-cuda" not in done.stdout
    done = gpu_check("--dry-run", "--vllm-python", "/opt/vllm/bin/python")
    assert "vllm-install" not in done.stdout and "SPECCTL_VLLM_PYTHON=/opt/vllm/bin/python" in \
        done.stdout


def test_bad_arguments_are_one_usage_line_and_exit_2(tmp_path: Path) -> None:
    for args in (["--budget", "5"], ["--vllm-python", str(tmp_path / "none")],
                 ["--wheelhouse", str(tmp_path / "none")],
                 ["--vllm-python", "x", "--wheelhouse", "y"], ["--frobnicate"]):
        done = gpu_check(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert "error:" in done.stderr and "Traceback" not in done.stderr


def test_without_nvidia_smi_it_says_what_is_missing_and_exits_2(tmp_path: Path) -> None:
    out = tmp_path / "out"
    empty = tmp_path / "bin"
    empty.mkdir()
    done = gpu_check("--out", str(out), path=str(empty))  # no nvidia-smi on this PATH
    assert done.returncode == 2, done.stdout + done.stderr
    problem = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(problem) == 1 and "missing: no nvidia-smi on PATH" in problem[0], done.stderr
    result = json.loads((out / "results.json").read_text())
    assert result["ok"] is False and "nvidia-smi" in result["missing"]


def test_help_says_how_to_prepare_the_machine() -> None:
    done = gpu_check("--help")
    assert done.returncode == 0
    for words in ("pip download -d wheelhouse vllm", "--vllm-python", "results.json",
                  "gpu-check.log", "$OUT"):
        assert words in done.stdout, words
