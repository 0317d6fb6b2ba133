"""What tune and bench optimise: the time the client waits for (the `latency` objective, the
default), on the simulated engine with a prefill law (tests/simengine.py): each prompt's tokens
prefilled by the target, and by a draft model too (its prefill a cost of a draft configuration,
which n-gram has not), with noise bursts covering 30% of the time.

A workload of long prompts and short answers (questions over a document): the draft's decode
speedup cannot earn back its prefill, so the decode objective picks the draft and the latency
objective does not (no draft, or n-gram). Short prompts with long answers: both pick the draft.
Wherever the server counts the draft's prefill (in the time to the first token, or in the
decode time after it), the end-to-end figure counts it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specctl.orchestrator.measure import bench, intervals
from specctl.orchestrator.measure.route import route_for
from specctl.orchestrator.measure.tune import tune
from specctl.orchestrator.measure.tuned import Result
from specctl.orchestrator.planning.plan import Plan
from tests import plans
from tests.simengine import Law, SimLab

SEEDS = range(6)
DRAFT = "testbed:qwen-0.5b-q4"


@pytest.fixture
def plan() -> Plan:
    return plans.plan().but(k=3)


def long_prompts(where: str = "ttft") -> Law:
    """Questions over a 2,000-token document, answered in 32 tokens: the target prefills in
    5 s, the draft in 1.5 s more; decoding takes 1.6 s without a draft, about 1.1 s with."""
    return Law(prompt_tokens=(2000,) * 6, replies=(32,) * 6, prefill_tps=400.0,
               draft_prefill=0.3, draft_prefill_in=where, ngram_gain=(1.02,) * 6)


def short_prompts() -> Law:
    """Short questions (60 tokens) with long answers (160 tokens)."""
    return Law(prompt_tokens=(60,) * 6, replies=(160,) * 6, prefill_tps=400.0,
               draft_prefill=0.3, ngram_gain=(1.02,) * 6)


def tuned(plan: Plan, law: Law, seed: int, objective: intervals.Objective) -> Result:
    return tune(plan, SimLab(law, plan, seed=seed, noise=0.3, server_timed=True), max_k=8,
                max_tokens=64, objective=objective)


def test_the_laws_figures_disagree_as_the_workloads_say(plan: Plan) -> None:
    """The premise: on long prompts the draft is faster in decode and slower end to end."""
    law = long_prompts()
    assert law.true_speedup(plan, DRAFT, 32) > 1.2
    assert law.true_latency(plan, DRAFT) < 0.9
    assert short_prompts().true_latency(plan, DRAFT) > 1.2


@pytest.mark.parametrize("where", ["ttft", "decode"])
def test_long_prompts_short_answers_latency_drops_the_draft_decode_keeps_it(
        plan: Plan, where: str) -> None:
    """Where the server counts the draft's prefill in the time to the first token, the
    decode objective cannot see it and keeps the draft; where it counts it in the decode time,
    the decode steps carry it too. Either way, end to end the draft does not pay."""
    law = long_prompts(where)
    if where == "ttft":
        decode = [tuned(plan, law, seed, "decode") for seed in SEEDS]
        assert sum(r.method == "draft" and r.serves for r in decode) >= 5, [
            r.summary for r in decode]
    latency = [tuned(plan, law, seed, "latency") for seed in SEEDS]
    # end to end nothing pays its way here: no draft (or n-gram, which prefills nothing)
    assert all(not (r.method == "draft" and r.serves) for r in latency), [
        r.summary for r in latency]
    for r in latency:
        assert r.objective == "latency"
        drafts = [m for m in r.measured if m.method == "draft" and m.latency is not None]
        # the drafts slower than the baseline end to end on the whole (one measured on one
        # request of a category may not be)
        assert drafts and sum(m.latency or 0 for m in drafts) / len(drafts) < 1.0, drafts


def test_short_prompts_long_answers_both_objectives_keep_the_draft(plan: Plan) -> None:
    law = short_prompts()
    objectives: tuple[intervals.Objective, ...] = ("decode", "latency")
    for objective in objectives:
        got = [tuned(plan, law, seed, objective) for seed in SEEDS]
        assert sum(r.method == "draft" and r.serves for r in got) >= 5, [
            r.summary for r in got]
        for r in got:
            assert r.objective == objective and r.figures.get("latency")
            point, low, high = r.figures["latency"]
            assert low <= point <= high


def test_bench_reports_end_to_end_ttft_and_decode_with_intervals_and_length_buckets(
        plan: Plan, tmp_path: Path) -> None:
    """Every configuration's row, per category and overall, has the end-to-end speedup and the
    TTFT ratio with their intervals beside the decode speedup; the end-to-end speedup by prompt
    length (prompts of 100 to 5,000 tokens: every bucket), each with its interval."""
    law = Law(prompt_tokens=(100, 600, 1500, 5000, 300, 2000), replies=(), prefill_tps=400.0,
              draft_prefill=0.3)
    room = SimLab(law, plan, seed=2, noise=0.3, server_timed=True)
    configs = bench.configs_for(plan, [3], also=["ngram:8"])
    notes: dict[str, Any] = {}
    samples = bench.measure(configs, None, None, room.workload, 3, 64,  # type: ignore[arg-type]
                            tmp_path, precision=None, notes=notes, room=room)
    report = bench.summarize(samples, configs, room.workload.weights(), notes["cost"])
    assert report["objective"] == "latency"
    for label in ("draft k=3", "ngram k=8"):
        for cat in [*report["categories"], "overall"]:
            row = report["configs"][label][cat]
            for key, prefix in (("e2e_speedup", "e2e"), ("ttft_ratio", "ttft"),
                                ("decode_speedup", "decode")):
                assert row[f"{prefix}_low"] <= row[key] <= row[f"{prefix}_high"], (label, cat)
            assert row["speedup"] == row["e2e_speedup"]  # the objective's
        lengths = report["buckets"][label]
        assert [b["bucket"] for b in lengths] == ["<256", "256-1k", "1k-4k", ">=4k"]
        assert [b["prompts"] for b in lengths] == [1, 2, 2, 1]
        assert all(b["e2e_low"] <= b["e2e_speedup"] <= b["e2e_high"] for b in lengths)
    draft = report["configs"]["draft k=3"]["overall"]
    ngram = report["configs"]["ngram k=8"]["overall"]
    # the draft's prefill comes before its first token; n-gram prefills nothing of its own
    assert draft["ttft_high"] < 0.85 and ngram["ttft_low"] <= 1.0 <= ngram["ttft_high"] * 1.02
    truth = law.true_latency(plan, DRAFT)
    assert draft["e2e_low"] * 0.97 <= truth <= draft["e2e_high"] * 1.03, (draft, truth)
    # where speculation stops paying: the longest prompts' end-to-end figure is the lowest
    got = {b["bucket"]: b["e2e_speedup"] for b in report["buckets"]["draft k=3"]}
    assert got[">=4k"] < got["<256"]


def test_the_route_sends_long_prompts_with_short_answers_where_prefill_is_cheapest(
        plan: Plan) -> None:
    """Each kind's winner, as the route reads it, is the end-to-end one by default: summaries
    of 2,000-token articles in 32 tokens go to no draft or n-gram, code (short prompts, long
    answers) to the draft; tuned by decode speed, summaries would go to the draft."""
    from tests.test_routing import adapter

    law = Law(alphas=(0.9, 0.9, 0.35, 0.35, 0.85, 0.85), prompt_tokens=(60, 60, 60, 60, 2000,
                                                                        2000),
              replies=(160, 160, 64, 64, 32, 32), prefill_tps=400.0, draft_prefill=0.3,
              ngram_gain=(1.0, 1.0, 1.0, 1.0, 1.05, 1.05))
    settings: dict[str, list[str]] = {"latency": [], "decode": []}
    for seed in range(3):
        for objective in ("latency", "decode"):
            found = tune(plan, SimLab(law, plan, seed=seed, noise=0.3, server_timed=True),
                         max_k=8, objective=objective)
            route, why = route_for(plan, found, adapter())
            kinds = {w.category: w.method for w in found.winners}
            settings[objective].append(kinds["summarize"])
            assert kinds["code"] == "draft", (objective, found.winners)
            if objective == "latency":
                assert route is None or route.member_for("summarize").plan.draft is None, why
    assert all(m in ("none", "ngram") for m in settings["latency"]), settings
    assert settings["decode"].count("draft") >= 2, settings
