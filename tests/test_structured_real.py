"""Tool calls and structured output stay the target's, on real llama-server processes: every
setting `tune` can choose on llama.cpp answers the structured prompts as the target alone does
(or where numerics explain it), and `bench --quality` fails the planted engine that alters tool
calls (tests/bin/tool-call-llama-server), says which prompt and what differed, and certifies the
failure.

SmolLM2-135M is its own draft here, with a chat template that has tools
(tests/fixtures/chat-templates/hermes-tools.jinja: its own has none, and llama-server then
answers a request's tools with text)."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import pytest

from specctl.orchestrator.measure.bench import flow as bench_mod
from specctl.orchestrator.measure.lab import engine
from specctl.orchestrator.measure.lossless import structured
from specctl.orchestrator.measure.prompts import structured as prompts
from tests.cli import ROOT, specctl
from tests.test_verdict_real import SHORT, environment

pytestmark = [pytest.mark.server, pytest.mark.timeout(2400)]  # slow on a loaded 2-core machine
TEMPLATE = ROOT / "tests" / "fixtures" / "chat-templates" / "hermes-tools.jinja"
SMOL = ('target = "testbed:smollm2-135m"\ndraft = "testbed:smollm2-135m"\nk = 3\n'
        f'extra_args = ["--chat-template-file", "{TEMPLATE}"]\n[server]\ncontext = 2048\n')
# tune's candidates on llama.cpp (measure/tune/flow._candidates, its default max-k 8): the draft
# at k 3, 2 and 8, n-gram at 8, the draft chained with ngram-mod, ngram-mod alone, the draft
# with a p-min (the cost model's k joins among 1-8: the same method as the draft at 2 and 8)
KS = [3, 2, 8]
TUNES = ("ngram:8", "ngram-mod", "draft:3+ngram-mod", "draft:3@0.5")


def test_every_setting_tune_can_choose_answers_tool_calls_as_the_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specctl.orchestrator.app import App

    for key, value in environment(tmp_path).items():
        if key.startswith(("SPECCTL_", "REAL_")):
            monkeypatch.setenv(key, value)
    profile = tmp_path / "p.toml"
    profile.write_text(SMOL)
    got = App.from_env().resolve(str(profile))
    kinds = got.backend.structured(got.plan, got.installed)
    assert kinds == set(prompts.KINDS)  # this build's Jinja templates are on by default
    floor = got.backend.rejecting(got.plan, got.installed)
    assert floor is not None
    configs = bench_mod.configs_for(got.plan, KS, None, TUNES)
    assert [c.label for c in configs] == ["baseline", "draft k=3", "draft k=2", "draft k=8",
                                          "ngram k=8", "ngram-mod k=16",
                                          "draft k=3 + ngram-mod k=16", "draft k=3 p-min 0.5"]
    with ExitStack() as stack:
        up = {cfg.label: stack.enter_context(engine.serve(
            cfg.plan, got.backend, got.installed, tmp_path, f"structured-{cfg.label}"))
            for cfg in [*configs, bench_mod.Config(bench_mod.FLOOR, floor)]}
        checked = structured.compare(up.pop(bench_mod.BASELINE), {
            label: srv for label, srv in up.items() if label != bench_mod.FLOOR},
            prompts.load(), kinds, lambda _m: None, up[bench_mod.FLOOR])
    assert checked.not_checked == []
    assert [p["shape"] for p in checked.prompts][:3] == ["tool call"] * 3, checked.prompts
    for label, side in checked.sides.items():
        assert side.passed and side.n == 5, f"{label}: {side.message()}"
        assert side.shapes["tool call"] == 3


def test_bench_quality_fails_an_engine_that_alters_tool_calls_and_certifies_it(
        tmp_path: Path) -> None:
    """The planted engine speculates for real and leaves chat text alone: the greedy and sampled
    chat checks pass it; the tool-call check does not, and says where."""
    env = environment(tmp_path, "tool-call-llama-server")
    profile = tmp_path / "p.toml"
    profile.write_text(SMOL)
    out = tmp_path / "report.json"
    done = specctl("bench", "-p", str(profile), *SHORT, "--quality", "--samples", "8",
                   "--output", str(out), env=env, timeout=2300)
    said = done.stdout + done.stderr
    assert done.returncode == 3, said
    report = json.loads(out.read_text())
    assert report["outcome"] == "output changed" and report["usable"] == []
    assert report["verdict"].startswith("output changed: draft k=3 must not be used (tool calls "
                                         "and structured output: "), report["verdict"]
    changed = report["structured"]["configs"]["draft k=3"]["differences"]
    assert {d["prompt"] for d in changed} == {"weather", "calendar", "currency"}, changed
    weather = next(d for d in changed if d["prompt"] == "weather")
    assert weather["what"].startswith("tool call 1 (get_weather): its arguments differ at city: "
                                      '"aris" where the baseline has "Paris"'), weather
    assert "'weather' (tools): tool call 1 (get_weather): its arguments differ at city" in \
        " ".join(said.split())
    # chat text is the target's: the other checks pass it, and the floor (unaltered) passes
    assert report["configs"]["draft k=3"]["chat"]["checks"]["greedy"]["explained"] is True
    assert report["quality"]["categories"]["chat"]["verdict"] == "no difference detected"
    assert report["floor_check"]["passed"] is True
    assert sum(s["drafted"] for s in report["samples"] if s["config"] == "draft k=3") > 0
    assert report["certificate"].startswith("FAILING")
    plan = json.loads(specctl("plan", "-p", str(profile), "--json", env=env).stdout)
    assert plan["certificate"]["state"] == "failing"
    assert plan["certificate"]["structured"].startswith(
        "tool calls and structured output: CHANGED, 2/5 answers identical to the baseline's")
    assert plan["certificate"]["certificate"]["structured"]["passed"] is False
