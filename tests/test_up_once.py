"""`up` resolves once, in the parent: one profile load and one probe per backend; the detached
supervisor runs the handed-over launch without planning; only the chosen backend is provided.

In-process through click's CliRunner, with the supervisor itself replaced by a recorder (no
process or signal behaviour is under test here; tests/test_server.py runs `up` for real)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import specctl.orchestrator.cli.main  # noqa: F401 (importing it registers the commands)
from specctl.orchestrator import runs
from specctl.orchestrator.cli.base import cli
from specctl.orchestrator.config import profiles
from specctl.orchestrator.contract import registry
from specctl.orchestrator.contract.adapter import Adapter
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.planning import backends
from specctl.orchestrator.runtime import handoff, provision
from tests.ggufs import write_gguf


class Calls:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.loads = 0
        self.probes: Counter[str] = Counter()
        self.installs: list[str] = []
        self.served: list[handoff.Ready] = []
        self.checked: list[bool] = []
        load, probe_all = profiles.load, backends.probe_all

        def counted_load(*args: Any, **kw: Any) -> profiles.Profile:
            self.loads += 1
            return load(*args, **kw)

        def counted_probe(registry: dict[str, Adapter]) -> dict[str, Any]:
            self.probes.update(list(registry))
            return probe_all(registry)

        def no_install(backend: Adapter, *_a: Any, **_k: Any) -> None:
            self.installs.append(backend.name)
            raise AssertionError(f"{backend.name} was installed")

        def serve(_app: Any, ready: handoff.Ready, _say: Any, checked: bool = False) -> int:
            self.served.append(ready)
            self.checked.append(checked)
            return 0

        monkeypatch.setattr(profiles, "load", counted_load)
        monkeypatch.setattr(backends, "probe_all", counted_probe)
        monkeypatch.setattr(provision, "install", no_install)
        monkeypatch.setattr(runs, "serve_foreground", serve)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    return Calls(monkeypatch)


@pytest.fixture
def llamacpp_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """llama.cpp as the recorded dialect says it is, without running a binary."""
    cls = registry.adapter_classes()["llamacpp"]
    monkeypatch.setattr(cls, "probe", lambda self: replace(self.assumed(), assumed=False,
                                                           path="/opt/llama/llama-server"))


def small_pair(tmp_path: Path) -> Path:
    target = write_gguf(tmp_path / "target.gguf", name="tiny target", block_count=8)
    draft = write_gguf(tmp_path / "draft.gguf", name="tiny draft", block_count=2)
    profile = tmp_path / "pair.toml"
    profile.write_text(f'target = "{target}"\ndraft = "{draft}"\nk = 3\n'
                       'backend = ["llamacpp"]\n[server]\ncontext = 1024\n')
    return profile


def test_up_loads_the_profile_once_and_probes_once(tmp_path: Path, calls: Calls,
                                                   llamacpp_installed: None) -> None:
    done = CliRunner().invoke(cli, ["up", "--profile", str(small_pair(tmp_path)),
                                    "--foreground", "--no-provision"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert calls.loads == 1
    assert calls.probes == Counter({"llamacpp": 1})
    assert calls.installs == []
    (ready,) = calls.served
    assert ready.name == "pair" and "--spec-draft-n-max" in ready.launch().argv


def test_up_builds_its_launch_once(tmp_path: Path, calls: Calls, llamacpp_installed: None,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine arguments are checked before any work and that same Launch is handed over:
    the adapter's launch runs once (it ran twice: the check's was thrown away)."""
    cls = registry.adapter_classes()["llamacpp"]
    real, built = cls.launch, []

    def counted(self: Adapter, *args: Any, **kw: Any) -> Any:
        built.append(1)
        return real(self, *args, **kw)

    monkeypatch.setattr(cls, "launch", counted)
    done = CliRunner().invoke(cli, ["up", "--profile", str(small_pair(tmp_path)),
                                    "--foreground", "--no-provision"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert len(built) == 1


def test_the_detached_supervisor_runs_the_handed_over_launch_without_planning(
        tmp_path: Path, calls: Calls, llamacpp_installed: None, isolated_dirs: Dirs) -> None:
    profile = small_pair(tmp_path)
    CliRunner().invoke(cli, ["up", "--profile", str(profile), "--foreground", "--no-provision"],
                       catch_exceptions=False)
    (ready,) = calls.served
    path = handoff.write(isolated_dirs.runs, ready)  # the runs dir: --handoff takes no other
    profile.unlink()  # the child must not need it
    loads, probes = calls.loads, sum(calls.probes.values())
    done = CliRunner().invoke(cli, ["up", "--profile", "pair", "--foreground",
                                    "--handoff", str(path)], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert (calls.loads, sum(calls.probes.values())) == (loads, probes)
    assert calls.served[-1] == ready
    assert calls.checked == [False, True]  # the parent's start checks are not run again
    assert not path.exists()  # read once, then removed


def test_up_of_a_profile_for_another_backend_builds_nothing(
        tmp_path: Path, calls: Calls, monkeypatch: pytest.MonkeyPatch) -> None:
    cls = registry.adapter_classes()["vllm"]
    monkeypatch.setattr(cls, "probe", lambda self: replace(self.assumed(), assumed=False,
                                                           path="/opt/vllm/bin/python"))
    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 512, "max_position_embeddings": 2048}))
    (folder / "model.safetensors").write_bytes(b"\0" * 4096)
    profile = tmp_path / "gpu.toml"
    profile.write_text(f'target = "{folder}"\ndraft = "ngram"\nk = 3\nbackend = ["vllm"]\n'
                       '[server]\ncontext = 1024\n')
    done = CliRunner().invoke(cli, ["up", "--profile", str(profile), "--foreground"],
                              catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert calls.installs == []
    assert set(calls.probes) == {"vllm"}  # llama.cpp is neither probed nor built
    (ready,) = calls.served
    assert ready.plan["backend"] == "vllm"


def test_up_serves_through_the_router_after_a_tune_that_left_it_without_a_draft() -> None:
    """A saved tune not surely faster for the whole mix leaves the plan without a draft, but
    its figures per kind still start the router (edits to n-gram, 1.69x the engine's defaults
    on whole files where one plain server gave 0.88x): `up` with k = "auto" routes, as the
    gateway does. A k of the profile's own, or an engine whose servers copy the weights, does
    not."""
    from specctl.adapters.llamacpp import LlamaCpp
    from specctl.orchestrator.app import Resolved
    from tests import plans
    from tests.conftest import recorded

    auto = profiles.parse('target = "testbed:qwen-1.5b-f16"\n', "p", "test")
    fixed = profiles.parse('target = "testbed:qwen-1.5b-f16"\nk = 3\n', "p", "test")
    tuned_off = plans.plan().baseline().but(k_source="tuned")
    untuned_off = plans.plan().baseline()
    engine = LlamaCpp()

    def routes(profile: profiles.Profile, plan: Any) -> bool:
        return runs.routed(Resolved(profile, plan, engine.assumed(), engine))

    assert routes(auto, tuned_off) and routes(auto, plans.plan())
    assert not routes(auto, untuned_off)  # nothing to route among
    assert not routes(fixed, tuned_off)
    assert not routes(auto, tuned_off.but(hardware=recorded("linux_1x_rtx3090_24g")))
