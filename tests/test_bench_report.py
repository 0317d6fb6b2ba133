"""Bench report arithmetic on hand-made samples: paired speedups, acceptance, identity, verdict."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from specctl.orchestrator.cli import render
from specctl.orchestrator.measure.bench import flow as bench
from specctl.orchestrator.measure.estimates import intervals
from specctl.orchestrator.measure.prompts import suites
from tests import plans
from tests.simengine import Law, SimLab

BASE = bench.BASELINE


def sample(config: str, cat: str, prompt: int, tps: float, drafted: int = 0,
           accepted: int = 0, drafts: int = 0, sha: str = "same") -> bench.Sample:
    """Timed by the client's clock: every token's making counted (a server's decode time
    leaves out the first token: test_intervals)."""
    return bench.Sample(config=config, method="draft", k=4, category=cat, prompt=prompt,
                        repeat=0, tokens=64, decode_tps=tps, wall_s=1.0, timed_by="client",
                        drafted=drafted, accepted=accepted, drafts=drafts, text_sha=sha)


def spec(cat: str, prompt: int, accepted: int, step_s: float = 0.2, repeat: int = 0,
         slow: float = 1.0, sha: str = "same") -> bench.Sample:
    """A k=4 sample that drafted 40 tokens: its steps (64 - accepted) at step_s each."""
    steps = 64 - accepted
    return replace(sample("k4", cat, prompt, 64 / (steps * step_s * slow), 40, accepted, 10,
                          sha), repeat=repeat)


def base(cat: str, prompt: int, repeat: int = 0, slow: float = 1.0) -> bench.Sample:
    return replace(sample(BASE, cat, prompt, 10.0 / slow), repeat=repeat)


def test_groups_pair_each_sample_with_its_baseline() -> None:
    samples = [base("code", 0), spec("code", 0, 30), base("code", 1),
               spec("code", 1, 20, sha="diff"), base("chat", 0), spec("chat", 0, 10)]
    mix = {"code": 0.5, "chat": 0.5}
    code = bench._group(samples, "k4", "code", mix, objective="decode")
    assert code["n"] == 2
    # throughput: 128 tokens in (34 + 44) steps of 0.2 s against 128 tokens in 12.8 s
    assert code["speedup"] == pytest.approx(12.8 / (34 * 0.2 + 44 * 0.2))
    assert code["speedup_min"] == pytest.approx(6.4 / 8.8)
    assert code["speedup_max"] == pytest.approx(6.4 / 6.8)
    assert code["acceptance"] == 50 / 80
    assert code["accepted_per_step"] == 50 / 20
    assert code["identical"] == 0.5
    overall = bench._group(samples, "k4", None, mix, objective="decode")
    # the mix: each category's mean request time, weighted alike
    spec_t = 0.5 * (34 + 44) * 0.2 / 2 + 0.5 * 54 * 0.2
    base_t = 0.5 * 6.4 + 0.5 * 6.4
    assert overall["n"] == 3 and overall["speedup"] == pytest.approx(base_t / spec_t)
    chat_heavy = bench._group(samples, "k4", None, {"code": 0.1, "chat": 0.9}, objective="decode")
    assert chat_heavy["speedup"] < overall["speedup"] < code["speedup"]


def test_outside_load_cannot_pull_the_speedup_and_the_bound_holds() -> None:
    quiet = [base("code", 0), spec("code", 0, 30), base("code", 1), spec("code", 1, 20)]
    # a second pass where load slowed one baseline request 3x and one speculative one 2x
    loaded = [*quiet, base("code", 0, 1, slow=3.0), spec("code", 0, 30, repeat=1),
              base("code", 1, 1), spec("code", 1, 20, repeat=1, slow=2.0)]
    mix = {"code": 1.0}
    assert bench._group(loaded, "k4", "code", mix, objective="decode")["speedup"] == pytest.approx(
        bench._group(quiet, "k4", "code", mix, objective="decode")["speedup"])
    # with c = 0.5, k = 4 can give at most 5/3 = 1.67x: the 3x-slowed baseline made one pair
    # 2.8x; it is discarded as noise and counted, never reported
    held = bench._group(loaded, "k4", "code", mix, limit=intervals.bound("draft", 4, 0.5),
                        objective="decode")
    assert held["bound"] == pytest.approx(5 / 3) and held["discarded"] == 1
    assert held["speedup_max"] <= held["bound"] and "implausible" not in held


def test_a_figure_above_the_bound_is_flagged_in_the_table() -> None:
    row = {"baseline_tps": 10.0, "tps": 30.0, "speedup": 3.0, "speedup_low": 2.5,
           "speedup_high": 3.5, "speedup_min": 2.4, "speedup_max": 3.6, "acceptance": 0.5,
           "accepted_per_step": 1.0, "identical": 1.0, "n": 4, "bound": 2.04, "discarded": 2,
           "implausible": "above the physical bound 2.04x (speedup 3.00x): noise, not a "
                          "speedup"}
    result = {"profile": "p", "backend": "llamacpp", "hardware": "h", "categories": ["code"],
              "configs": {"draft k=2": {"code": row, "overall": row}}, "verdict": "",
              "conditions": {"cost": 0.235, "sequential": True, "drift": 0.12,
                             "noise": "other processes used 1.0 cores", "stopped": "budget",
                             "precision": 0.05}}
    console = Console(record=True, width=240)
    render.show_bench(console, result)
    text = console.export_text()
    assert "3.00x* (!)" in text or "3.00x (!)" in text
    assert "(!) draft k=2, code: above the physical bound 2.04x" in text
    assert "physical bound 2.04x (k+1)/(k*c+1) for c = 0.235 measured here; 2 pair(s)" in text
    assert "one server at a time" in text and "drifted 12% between blocks" in text
    # n-gram has no draft model: its bound is k+1 of its draft, said without a c
    ngram = {**row, "speedup": 1.2, "speedup_high": 1.3, "speedup_max": 1.3, "bound": 9.0,
             "implausible": ""}
    result["configs"] = {"ngram k=8": {"code": ngram, "overall": ngram},
                         "draft k=4 + ngram-mod k=16": {"code": ngram, "overall": ngram}}
    console = Console(record=True, width=240)
    render.show_bench(console, result)
    text = console.export_text()
    assert "ngram k=8: physical bound 9.00x k+1 of the longest draft (ngram drafts" in text
    assert "draft k=4 + ngram-mod k=16: physical bound 9.00x k+1 of the longest draft (a chain" \
        in text
    assert "for c = 0.235" not in text


def test_concurrency_levels_pair_rounds_and_find_where_speculation_stops_paying() -> None:
    def rnd(config: str, level: int, n: int, wall: float) -> list[bench.Sample]:
        return [bench.Sample(config=config, method="draft", k=4, category="code", prompt=j,
                             repeat=0, tokens=50, decode_tps=10.0, wall_s=wall,
                             timed_by="server", drafted=0, accepted=0, drafts=0, text_sha="x",
                             level=level, round=n, round_wall_s=wall) for j in range(level)]
    samples = [*rnd(BASE, 2, 0, 10.0), *rnd("k4", 2, 0, 8.0),
               *rnd(BASE, 4, 0, 10.0), *rnd("k4", 4, 0, 12.5)]
    levels = bench.concurrency(samples, "k4")
    assert [(r["level"], r["speedup"]) for r in levels] == [(2, 1.25), (4, 0.8)]
    assert levels[1]["baseline_tps"] == 20.0 and levels[1]["tps"] == 16.0
    assert bench.stops_paying(levels, 1.4) == 4
    assert bench.stops_paying(levels, 0.9) == 1


def test_verdicts() -> None:
    def table(speedup: float) -> dict[str, dict[str, dict[str, object]]]:
        return {"k4": {"overall": {"speedup": speedup, "noisy": False},
                       "code": {"speedup": speedup}}}

    assert bench.verdict(table(1.43), ["code"]).startswith("speculation helps (k4: 1.43x")
    assert "does not pay here: turn it off" in bench.verdict(table(0.57), ["code"])
    assert "no clear difference" in bench.verdict(table(1.01), ["code"])


def test_every_suite_has_a_dozen_distinct_prompts() -> None:
    for name in suites.SUITES:
        prompts = suites.load_suite(name)
        assert len(prompts) >= 12 and len(set(prompts)) == len(prompts)


def test_bench_keeps_measuring_to_the_precision_one_server_at_a_time(tmp_path: Path) -> None:
    """bench's machinery on the simulated engine (tests/simengine.py): bursts of outside load,
    servers that do not fit side by side: alternating blocks, more passes until the interval
    is within ±5%, and the figure is the law's."""
    plan = plans.plan().but(k=3)
    law = Law()
    room = SimLab(law, plan, seed=3, noise=0.3, fits=False)
    configs = bench.configs_for(plan, [3])
    notes: dict[str, Any] = {}
    samples = bench.measure(configs, None, None, room.workload, 2, 64,  # type: ignore[arg-type]
                            tmp_path, precision=0.05, budget=900.0, notes=notes, room=room)
    assert room.most_up == 1 and notes["sequential"] is True
    assert notes["stopped"] in ("precision", "budget") and notes["drift"] >= 0
    assert notes["cost"] == pytest.approx(law.cost, rel=0.05)
    report = bench.summarize(samples, configs, room.workload.weights(), notes["cost"])
    row = report["configs"]["draft k=3"]["overall"]
    truth = law.true_speedup(plan, "testbed:qwen-0.5b-q4")
    assert row["speedup_low"] <= truth <= row["speedup_high"], (row, truth)
    assert row["speedup_high"] <= row["bound"]
    if notes["stopped"] == "precision":
        assert (row["speedup_high"] - row["speedup_low"]) / 2 <= 0.05 * row["speedup"]


def test_bench_budget_bounds_the_repeats_too_when_a_precision_is_asked(tmp_path: Path) -> None:
    """With --precision, --budget holds for the passes --repeats asked for too (a bench of
    eleven configurations ran three passes, 48 minutes, past a 6-minute budget): no pass is
    started that would end past it; without --precision the repeats are what was asked."""
    plan = plans.plan().but(k=3)
    configs = bench.configs_for(plan, [2, 3, 4])

    def passes(precision: float | None, budget: float) -> tuple[int, dict[str, Any], float]:
        room = SimLab(Law(), plan, seed=5, noise=0.0, fits=True)
        notes: dict[str, Any] = {}
        start = room.clock()
        samples = bench.measure(configs, None, None, room.workload,  # type: ignore[arg-type]
                                3, 64, tmp_path, precision=precision, budget=budget,
                                notes=notes, room=room)
        return len({s.repeat for s in samples}), notes, room.clock() - start

    _, _, per_pass = passes(None, 1.0)  # three passes, as asked
    budget = per_pass / 3 * 2.5
    n, notes, took = passes(0.001, budget)
    assert (n, notes["stopped"]) == (2, "budget") and took <= budget
    assert passes(None, budget)[0] == 3
    assert passes(0.001, 1.0)[0] == 1  # the first pass always runs


def test_tunes_n_gram_pick_is_measured_beside_the_drafts_asked_for() -> None:
    """Where tune saved n-gram (no draft model) and bench is asked --also draft:3 (llama.cpp's
    default speculation), tune's pick is measured as it is, and the draft takes the profile's
    draft model (before, the profile as written was measured in the pick's place)."""
    written = plans.plan().but(k=4)
    picked = written.but(method="ngram", k=8, draft=None, p_min=None)
    got = {c.label: c.plan for c in bench.configs_for(picked, (), None, ["draft:3", "ngram:8"],
                                                      written)}
    assert list(got) == ["baseline", "ngram k=8", "draft k=3"], list(got)
    assert got["ngram k=8"] == picked and got["draft k=3"].draft == written.draft


def test_c_is_timed_on_the_shortest_prompt_of_each_category(tmp_path: Path) -> None:
    """bench times c (the draft alone against the baseline) on the shortest prompt of each
    category, as tune does, never on every prompt: on five suites with documents of 1-2k
    tokens, short requests to every prompt took 859 s before the first pass."""
    from specctl.orchestrator.measure.estimates import step_costs as costs

    plan = plans.plan().but(k=3)
    room = SimLab(Law(), plan, seed=5, noise=0.0, fits=True)
    configs = bench.configs_for(plan, [3])
    bench.measure(configs, None, None, room.workload, 1, 64,  # type: ignore[arg-type]
                  tmp_path, budget=900.0, room=room)
    work = room.workload
    timed = {i for _, label, i in room.asked if label == "draft alone"}
    cats = {p.category for p in work.prompts}
    assert timed == set(costs.shortest(work)) and len(timed) == len(cats) < len(work.prompts)
    def size(i: int) -> int:
        return sum(len(t) for t in work.prompts[i].turns) + len(work.prompts[i].system or "")

    for i in timed:
        assert all(size(j) >= size(i) for j in range(len(work.prompts))
                   if work.prompts[j].category == work.prompts[i].category)


@pytest.mark.parametrize("twin_pace", [1.0, 1.15])
def test_the_a_a_control_holds_between_equal_servers_and_flags_a_slower_twin(
        tmp_path: Path, twin_pace: float) -> None:
    """`--also baseline`: a second baseline server measured like every configuration, on the
    simulated engine with a quiet machine's jitter. Equal servers: its interval holds 1.00x and
    the run is not flagged. A twin 15% slower than its baseline by its own pace (a server placed
    worse than its twin): the control shows it, the run is flagged with the margin, and the
    tables and the routed line say so. The twin is no configuration: never the verdict's, never
    the best single setting."""
    plan = plans.plan().but(k=3)
    configs = bench.configs_for(plan, [3], also=[" baseline"])
    assert [c.label for c in configs] == [BASE, bench.TWIN, "draft k=3"]
    assert configs[1].plan == configs[0].plan
    room = SimLab(Law(), plan, seed=7, noise=0.0, slow={bench.TWIN: twin_pace})
    samples = bench.measure(configs, None, None, room.workload, 2, 64,  # type: ignore[arg-type]
                            tmp_path, room=room)
    report = bench.summarize(samples, configs, room.workload.weights())
    assert bench.TWIN not in report["configs"] and "draft k=3" in report["verdict"]
    control = report["control"]
    top = control["rows"]["overall"]
    assert top["speedup"] == pytest.approx(1 / twin_pace, rel=0.03)
    assert control["biased"] is (twin_pace > 1)
    assert control["margin"] >= abs(1 - 1 / twin_pace)
    if twin_pace == 1.0:
        assert top["speedup_low"] <= 1.0 <= top["speedup_high"] and control["margin"] < 0.05
    report |= {"profile": "p", "backend": "llamacpp", "hardware": "cpu",
               "routing": {"route": "code -> draft k=3; chat -> off", "memory": "fits",
                           "over_best": {"best": "draft k=3", "speedup": 1.02,
                                         "speedup_low": 0.99, "speedup_high": 1.05},
                           "held_out": {}, "held_out_accuracy": 1.0, "workload": {},
                           "workload_accuracy": 1.0}}
    console = Console(record=True, width=200)
    render.show_bench(console, report)
    text = console.export_text()
    assert "A/A control (a second baseline server, the same argv)" in text
    assert ("not shown" in text) is (twin_pace > 1)
    assert f"(A/A control {'FAILED' if twin_pace > 1 else 'held'}: ±" in text
