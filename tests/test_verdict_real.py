"""bench's one verdict against real llama-server processes: broken builds of it (tests/bin, see
tests/broken_engine.py) are caught and never called a speedup; the real build passes and is
certified, and `plan` and `status` show that certificate with the engine build it is for (the
build that alters tool calls: tests/test_structured_real.py).

Kept short: one suite, two prompts, one pass, short replies and small sampling budgets."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from specctl.adapters.llamacpp import LlamaCpp
from specctl.orchestrator.contract.dirs import Dirs
from specctl.orchestrator.measure.prompts import suites
from specctl.orchestrator.runtime.servers import free_port
from tests.cli import ROOT, specctl, status_row

pytestmark = [pytest.mark.server, pytest.mark.timeout(2400)]  # slow on a loaded 2-core machine
BIN = ROOT / "tests" / "bin"
QWEN = 'target = "testbed:qwen-1.5b-q4"\ndraft = "testbed:qwen-0.5b-q4"\n'
SMOL = 'target = "testbed:smollm2-135m"\ndraft = "testbed:smollm2-135m"\n'
SHORT = ("--suite", "chat", "--prompts", "2", "--repeats", "1", "--precision", "0",
         "--max-tokens", "16")


def environment(tmp_path: Path, broken: str | None = None) -> dict[str, str]:
    """This test's state dir, and the broken build in place of llama-server when named."""
    real = LlamaCpp(backends_dir=Dirs.from_env().backends).locate()
    assert real is not None, "the testbed's llama-server is not installed"
    env = {**os.environ, "SPECCTL_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "200",
           "REAL_LLAMA_SERVER": str(real)}
    if broken:
        env["SPECCTL_LLAMA_SERVER"] = str(BIN / broken)
    return env


def bench(tmp_path: Path, models: str, env: dict[str, str], *extra: str, port: int = 0
          ) -> tuple[int, str, dict[str, Any]]:
    profile = tmp_path / "p.toml"
    profile.write_text(f'{models}k = 3\n[server]\ncontext = 2048\n' +
                       (f"port = {port}\n" if port else ""))
    out = tmp_path / "report.json"
    done = specctl("bench", "-p", str(profile), *SHORT, "--output", str(out), *extra, env=env,
                   timeout=2300)
    assert out.exists(), done.stdout + done.stderr
    return done.returncode, done.stdout + done.stderr, json.loads(out.read_text())


def nothing_saved(env: dict[str, str]) -> None:
    state = Path(env["SPECCTL_STATE_DIR"])
    assert not list((state / "tuned").glob("*.json")) if (state / "tuned").exists() else True
    assert not (state / "backends").exists() or not list((state / "backends").glob("*.json"))


def test_the_draft_served_alone_is_an_output_change_and_its_floor_a_broken_engine(
        tmp_path: Path) -> None:
    """The issue's broken engine: `bench --quality` exits non-zero, the verdict and the JSON say
    the output changed, the floor is reported failing, and the certificate written fails."""
    env = environment(tmp_path, "broken-spec-llama-server")
    code, out, report = bench(tmp_path, QWEN, env, "--quality", "--samples", "8")
    assert code == 3, out
    assert report["outcome"] == "output changed" and report["usable"] == []
    assert report["verdict"].startswith("output changed: draft k=3 must not be used (chat: ")
    assert "verdict: output changed" in out and "speculation helps" not in out
    assert report["floor_check"]["passed"] is False
    assert "FAILS: the engine is broken" in out
    assert "speedup" not in report["configs"]["draft k=3"]["overall"]
    assert sum(s["drafted"] for s in report["samples"]) == 0
    assert report["certificate"].startswith("FAILING")
    nothing_saved(env)


def test_a_sampler_cut_while_speculating_is_caught_by_sampling_alone(tmp_path: Path) -> None:
    """A second break: it drafts for real and greedy output stays the same, but sampling is cut
    to top-k 1; the sampling test (speculative and floor side) finds it."""
    env = environment(tmp_path, "perturbed-sampler-llama-server")
    code, out, report = bench(tmp_path, SMOL, env, "--quality", "--samples", "24")
    assert code == 3, out
    assert report["outcome"] in ("output changed", "broken engine"), report["verdict"]
    assert "sampled distributions differ" in report["verdict"]
    assert report["floor_check"]["passed"] is False
    assert sum(s["drafted"] for s in report["samples"] if s["config"] == "draft k=3") > 0
    assert report["configs"]["draft k=3"]["chat"]["checks"]["greedy"]["explained"] is True


def test_a_speculative_server_that_drafted_nothing_is_flagged(tmp_path: Path) -> None:
    env = environment(tmp_path, "no-draft-llama-server")
    code, out, report = bench(tmp_path, SMOL, env)
    assert code == 3, out
    assert report["outcome"] == "the engine did not draft"
    assert report["verdict"].startswith("the engine did not draft (draft k=3)")
    assert "speedup" not in report["configs"]["draft k=3"]["overall"]
    assert "NOT USABLE" in out


def test_the_real_engine_passes_is_certified_and_status_shows_it(tmp_path: Path) -> None:
    env = environment(tmp_path)
    port = free_port()
    profile = tmp_path / "p.toml"
    profile.write_text(f'{SMOL}k = 3\n[server]\ncontext = 2048\nport = {port}\n')
    before = json.loads(specctl("plan", "-p", str(profile), "--json", env=env).stdout)
    assert before["certificate"]["state"] == "none"
    code, out, report = bench(tmp_path, SMOL, env, "--quality", "--samples", "8", port=port)
    assert code == 0, out
    assert report["outcome"] == "speed" and report["usable"] == ["draft k=3"]
    assert report["floor_check"]["passed"] is True
    assert report["certificate"].startswith("passing, for llamacpp ")
    assert report["structured"]["passed"] is True, report["structured"]  # tools answered as text
    after = json.loads(specctl("plan", "-p", str(profile), "--json", env=env).stdout)
    assert after["certificate"]["state"] == "passing"
    assert after["certificate"]["structured"].startswith(
        "tool calls and structured output: the target's, ")
    version = after["backend_version"]
    assert after["certificate"]["engine"]["version"] == version
    up = specctl("up", "-p", str(profile), "--no-provision", env=env, timeout=300)
    try:
        assert up.returncode == 0, up.stderr
        row = status_row(env, "p")
        assert row["certificate"]["state"] == "passing"
        assert row["certificate"]["engine"]["version"] == version
        shown = specctl("status", env=env).stdout
        assert f"p: certificate: passing for llamacpp {version}" in " ".join(shown.split())
        assert "p: certificate: tool calls and structured output: the target's" in " ".join(
            shown.split())
    finally:
        specctl("down", "--all", env=env)
    # the same profile on another build of the engine: its certificate is for the old one
    other = environment(tmp_path, "no-draft-llama-server")
    changed = json.loads(specctl("plan", "-p", str(profile), "--json", env=other).stdout)
    assert changed["certificate"]["state"] == "engine changed"
    assert "engine build changed since" in changed["certificate"]["line"]


def test_tunes_check_refuses_to_save_a_setting_whose_engine_did_not_draft(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check `tune` runs before it saves, on the build that drops the draft: refused in one
    line (the output is the target's, but nothing was speculated)."""
    from specctl.orchestrator.app import App
    from specctl.orchestrator.errors import SpecctlError
    from specctl.orchestrator.measure.lossless import check as lossless

    for key, value in environment(tmp_path, "no-draft-llama-server").items():
        if key.startswith(("SPECCTL_", "REAL_")):
            monkeypatch.setenv(key, value)
    profile = tmp_path / "p.toml"
    profile.write_text(f'{SMOL}k = 3\n[server]\ncontext = 2048\n')
    app = App.from_env()
    got = app.resolve(str(profile))
    prompts = {c: suites.suite_texts(c)[:1] for c in ("chat", "code")}
    with pytest.raises(SpecctlError) as refused:
        lossless.gate(got.plan, got.backend, got.installed, prompts, lossless.short(0.8, 0.95),
                      app.dirs.logs, lambda _m: None)
    assert "the engine did not draft" in str(refused.value) and "not saved" in str(refused.value)
    assert "\n" not in str(refused.value)
