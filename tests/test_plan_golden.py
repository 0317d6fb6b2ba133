"""`plan --json` held byte for byte to golden files (tests/fixtures/plans/): every shipped profile
on the machine it was written for, and a profile planned on "this machine" (the recorded 2-core
CPU machine standing in, llama.cpp probed as installed) without a saved tune, with one that
serves, with one that does not, with one that is set aside, and with draft = "auto".

Only the machine-specific absolute paths are normalised (the cache, the Hugging Face home, the
test's temp folder). The shipped profiles' files are `specctl plan -p NAME --hardware FILE --json`
as recorded before the planner was given its facts as data (issue 53); the others were written by
this test on that same code (SPECCTL_WRITE_PLANS=1 writes them again: only for a change that is
meant to change plans)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

import specctl.orchestrator.cli.main  # noqa: F401 (importing it registers the commands)
from specctl.orchestrator.app import App
from specctl.orchestrator.cli.base import cli
from specctl.orchestrator.contract import registry
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.machine import hardware
from specctl.orchestrator.measure.results import tuned
from tests.conftest import FIXTURES, HARDWARE, recorded
from tests.ggufs import write_gguf

GOLDEN = FIXTURES / "plans"
RECORDED = {"cuda-h100-llama70b": "linux_1x_h100_80g",
            "cuda-h100-tgi-medusa": "linux_1x_h100_80g",
            "cuda-rtx4090-qwen-coder": "linux_1x_rtx4090_24g",
            "dgx2-deepseek-r1": "linux_8x_h200_141g",
            "m3-ultra-70b": "macos_m3_ultra_96g",
            "m3-ultra-70b-mlx": "macos_m3_ultra_96g"}
ON_TESTBED = {"cpu-demo": "linux_cpu_2c_24g", "cpu-demo-q4": "linux_cpu_2c_24g"}


def normalised(text: str, tmp: Path | None = None) -> str:
    """The machine-specific absolute paths as names."""
    text = text.replace(str(Dirs.from_env().cache), "$SPECCTL_CACHE")
    text = text.replace(os.environ["HF_HOME"], "$HF_HOME")
    return text.replace(str(tmp), "$TMP") if tmp is not None else text


def same_as_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.json"
    if os.environ.get("SPECCTL_WRITE_PLANS") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"plan --json of {name} differs from {path}"


def plan(*args: str) -> str:
    done = CliRunner().invoke(cli, ["plan", *args, "--json"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return done.output


@pytest.mark.parametrize("name", [*RECORDED, *(pytest.param(n, marks=pytest.mark.server)
                                                for n in ON_TESTBED)])
def test_a_shipped_profile_plans_as_recorded(name: str) -> None:
    machine = {**RECORDED, **ON_TESTBED}[name]
    same_as_golden(name, normalised(plan("-p", name, "--hardware",
                                         str(HARDWARE / f"{machine}.json"))))


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A profile of two tiny GGUF files planned on "this machine": the recorded 2-core CPU
    machine, llama.cpp installed (its recorded dialect), Ollama not; no model anywhere else."""
    classes = registry.adapter_classes()
    monkeypatch.setattr(classes["llamacpp"], "probe", lambda self: replace(
        self.assumed(), assumed=False, path="/opt/llama/llama-server"))
    monkeypatch.setattr(classes["ollama"], "probe", lambda self: None)
    monkeypatch.setattr(hardware, "detect", lambda *_a: recorded("linux_cpu_2c_24g"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for var, folder in (("HOME", "home"), ("SPECCTL_CACHE_DIR", "cache"),
                        ("OLLAMA_MODELS", "ollama"), ("HF_HUB_CACHE", "hf-hub")):
        monkeypatch.setenv(var, str(tmp_path / folder))
    models = tmp_path / "models"
    models.mkdir()
    monkeypatch.setenv("SPECCTL_MODELS_DIRS", str(models))
    target = write_gguf(tmp_path / "target.gguf", name="tiny target", block_count=8)
    write_gguf(models / "draft.gguf", name="tiny draft", block_count=2)
    path = tmp_path / "pair.toml"
    path.write_text(f'target = "{target}"\ndraft = "{models / "draft.gguf"}"\n'
                    'backend = ["llamacpp", "ollama"]\n[server]\ncontext = 1024\nport = 8123\n')
    return path


def save_tune(profile: Path, **changes: object) -> Path:
    """A saved `specctl tune` result for the profile's plan on this machine and build."""
    written = App.from_env().resolve(str(profile), use_tuned=False)
    dirs = Dirs.from_env()
    key = tuned.key(written.plan, written.installed.version, dirs.state / "model-sha256.json")
    data = {"profile": "pair", "method": "draft", "k": 3, "p_min": 0.4, "speedup": 1.7,
            "low": 1.4, "high": 2.0, "summary": "draft k=3 p-min 0.4 measured 1.70x",
            "alpha": 0.7, "cost": 0.1, "verify": {"3": 1.1}, "baseline_tps": 10.0,
            "k_by_batch": [(1, 2, 3), (3, 8, 2)], "chain": [{"method": "ngram-mod", "k": 16}],
            "key": key, **changes}
    dirs.tuned.mkdir(parents=True, exist_ok=True)
    return tuned.save(dirs.tuned, tuned.Result.from_json(data))


def test_this_machine_without_a_saved_tune(here: Path, tmp_path: Path) -> None:
    same_as_golden("here-untuned", normalised(plan("-p", str(here)), tmp_path))


def test_this_machine_with_a_saved_tune_that_serves(here: Path, tmp_path: Path) -> None:
    save_tune(here)
    text = normalised(plan("-p", str(here)), tmp_path)
    assert json.loads(text)["k_source"] == "tuned"
    same_as_golden("here-tuned", text)


def test_this_machine_with_a_saved_tune_not_surely_faster(here: Path, tmp_path: Path) -> None:
    save_tune(here, speedup=1.02, low=0.9, high=1.1, chain=[], k_by_batch=[])
    text = normalised(plan("-p", str(here)), tmp_path)
    assert json.loads(text)["method"] == "none"
    same_as_golden("here-tuned-not-faster", text)


def test_this_machine_with_a_saved_tune_set_aside(here: Path, tmp_path: Path) -> None:
    save_tune(here).write_text('{"k": "4"}')
    text = normalised(plan("-p", str(here)), tmp_path)
    assert any(r.startswith("Tuned result ignored") for r in json.loads(text)["reasons"])
    same_as_golden("here-tuned-set-aside", text)


def test_this_machine_with_draft_auto(here: Path, tmp_path: Path) -> None:
    text = normalised(plan("-p", str(here), "--draft", "auto"), tmp_path)
    assert any(r.startswith('Draft "auto"') for r in json.loads(text)["reasons"])
    same_as_golden("here-draft-auto", text)


@pytest.mark.server  # reads the testbed's GGUF files
def test_draft_auto_on_the_testbed_as_recorded() -> None:
    """cpu-demo with draft = "auto" picks the testbed's 0.5B draft on disk (what it counted
    among the candidates is what the shared cache holds)."""
    text = normalised(plan("-p", "cpu-demo", "--draft", "auto", "--hardware",
                           str(HARDWARE / "linux_cpu_2c_24g.json")))
    assert json.loads(text)["draft"]["ref"].endswith("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    same_as_golden("cpu-demo-draft-auto", text)


@pytest.mark.server  # reads the testbed's GGUF files
def test_drafts_of_the_testbed_target_as_recorded() -> None:
    done = CliRunner().invoke(cli, ["drafts", "testbed:qwen-1.5b-f16", "--json"],
                              catch_exceptions=False)
    assert done.exit_code == 0, done.output
    same_as_golden("drafts-qwen-1.5b-f16", normalised(done.output))
